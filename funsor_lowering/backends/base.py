"""The interface each backend adapter implements."""

import contextlib
import itertools

import numpy as np


class ArrayBackend:
    """What the library needs to know about one array library.

    :param str name: the funsor backend name (``"numpy"``, ``"torch"``, ``"jax"``).
    """

    name = None
    array_type_name = None  # for error messages, e.g. "torch.Tensor"
    # Op type -> a faster implementation with the same signature and results
    # as funsor's, used by generated programs on this backend's arrays.
    fast_implementations = {}
    # Whether chains in log space (HMMs) run faster as one sequential
    # forward pass (``extra_ops.logsumexp_scan``) than as a parallel scan.
    scans_chains = False
    # A backend call's overhead, in element operations (numpy's calls are
    # cheap, torch's dear): where a chain of separate factors runs as
    # log-depth rounds (``lowering/rules/chains.rounds_cost_less``).
    call_cost = 2000
    # Whether funsor's default backend is this one (funsor.set_backend is
    # not needed to run this backend's programs).
    is_funsor_default = False
    # Whether ops return scalars, not 0-d arrays, for 0-d results (numpy);
    # programs convert such outputs to arrays.
    returns_scalars = False
    # Whether matmul needs operands of one dtype (torch).
    matmul_needs_one_dtype = False
    # Whether a QR's projections pay for computing them from the QR's
    # factors (jax; numpy's and torch's QRs take about as long either way).
    projects_qrs = False
    # Whether program code is generated when compiled, so that a backend
    # compiler may trace it (torch.jit.trace), rather than on first call.
    prepares_programs = False

    # program_to_fx(program, resolved): the program as a torch.fx.GraphModule
    program_to_fx = None

    def keeps_gradients(self, value):
        """Whether funsor keeps gradients of ``value`` with a DiCE factor
        when sampling (an array of an autograd backend)."""
        return False

    def fast_implementation(self, op_type, params):
        """A faster implementation of ``op_type`` called with its parameter
        values ``params`` (positionally, after the operands), or ``None``."""
        return self.fast_implementations.get(op_type)

    def fast_call(self, op_type, operands, params, dispatched):
        """``(implementation, extra_args, kwargs)`` computing
        ``op_type(*params)(*operands)`` as ``implementation(*operands,
        *extra_args, **kwargs)`` faster than ``dispatched(*operands,
        *params)`` (funsor's implementation for these operands), or
        ``None``. ``operands`` are this backend's arrays (shapes are fixed
        per program, so the choice may depend on them)."""
        impl = self.fast_implementation(op_type, params)
        return None if impl is None else (impl, tuple(params), {})

    def body_context(self, operations, resolved):
        """``(context, resolved)``: a generated body's statements may run
        inside ``with context():`` (a callable, or ``None`` for none), with
        the implementations ``resolved`` (per operation, as
        :func:`~funsor_lowering.runtime.codegen.resolve` gives them) the
        backend may change for it."""
        return None, resolved

    def activate(self):
        """Make sure funsor's op implementations for this backend are registered."""

    # The backend's own array types: a program holds only these as constants.
    native_array_types = ()

    def is_array(self, value):
        """Whether ``value`` is an array of this backend."""
        return isinstance(value, self.native_array_types)

    def native_constant(self, value):
        """``value`` (a program constant) as this backend's array type: a
        numpy array becomes an array of this backend with the dtype this
        backend's ops would give it; other values are returned as they are."""
        return value

    def dtype_kind(self, value):
        """``"real"``, ``"int"`` or ``"bool"`` for an array of this backend."""
        raise NotImplementedError

    def requires_grad(self, value):
        """Whether ``value`` takes part in the backend's autograd as a
        captured value (a torch tensor that requires grad): a program holds
        such a constant by reference, never a copy of it or a value computed
        from it when compiling, which would freeze it."""
        return False

    def has_gradient_graph(self, value):
        """Whether ``value`` was computed by the backend's autograd from
        values that require grad (a torch tensor with a ``grad_fn``)."""
        return False

    def code_type(self, value):
        """The type generated code for ``value`` is specialized for (one
        body serves subclasses that funsor dispatches as their base)."""
        return type(value)

    def body_key(self, value):
        """What a generated body for input array ``value`` is specialized
        for: its :meth:`code_type`, and its dtype where bodies hold
        constants typed like their operands (:meth:`typed_number`)."""
        if self.number_arithmetic:
            return (self.code_type(value), value.dtype)
        return self.code_type(value)

    # Implementations of binary arithmetic whose number operand
    # typed_number passes as a 0-d array of the other operand's dtype, for
    # operands of exact_number_dtypes (whose kernels cast a number to them).
    number_arithmetic = frozenset()
    exact_number_dtypes = ()

    def typed_number(self, number, operand, impl):
        """``number``, a constant operand of the binary elementwise
        implementation ``impl`` beside the array ``operand``, as a constant
        that gives the same results faster, or ``None`` to keep it."""
        if (
            impl in self.number_arithmetic
            and operand.dtype in self.exact_number_dtypes
            and _typable_number(number)
        ):
            return self.zero_d_array(number, operand.dtype)
        return None

    def zero_d_array(self, number, dtype):
        """A 0-d array of ``number`` in ``dtype`` (see :meth:`typed_number`)."""
        raise NotImplementedError

    def as_traceable(self, value):
        """``value`` in a form that keeps its identity when funsor wraps it
        (numpy scalars become 0-d arrays, which ``Tensor`` does not copy)."""
        return value

    def array_literal(self, value):
        """Return ``(source, imports)``: a Python expression that rebuilds
        ``value`` exactly, and the import lines it needs."""
        raise NotImplementedError

    # Whether random draws take an explicit key operand (jax).
    keyed = False

    def from_numpy(self, array):
        """A numpy array as this backend's array (floats in its default dtype)."""
        raise NotImplementedError

    def to_numpy(self, array):
        """An array of this backend as a numpy array (for comparisons)."""
        return np.asarray(array)

    def example_input(self, value_type):
        """An array of zeros of a :class:`~funsor_lowering.ir.program.ValueType`
        (for resolving implementations by type, never as data)."""
        dtype = {"real": np.float64, "int": np.int64, "bool": np.bool_}[value_type.kind]
        return self.from_numpy(np.zeros(value_type.shape, dtype))

    # How programs copy an output that may share memory with one of their
    # constants: a function, and its name in generated source (``np``,
    # ``torch`` imported); None where arrays are immutable (jax).
    copy_function = None
    copy_source = None

    def device_of(self, array):
        """The device ``array`` lives on, or ``None`` where the backend's
        arrays need not share one (numpy, jax: it moves them itself)."""
        return None

    def to_device(self, array, device):
        """``array`` on ``device`` (numpy: the CPU only)."""
        if str(device) != "cpu":
            raise ValueError(
                f"to({device!r}): {self.name} arrays live on the CPU only "
                f"(device 'cpu')"
            )
        return array

    def is_compiling(self):
        """Whether a backend compiler (``torch.compile``) is tracing Python
        now: generated code must then run without generating more."""
        return False

    def preserved_random_state(self):
        """A context restoring the backend's global random state on exit
        (for runs that must not draw for the caller)."""
        return _NumpyRandomState()

    def example_inputs(self, program):
        """Inputs for ``program`` (its input nesting, stand-in arrays)."""
        from ..ir.structure import map_leaves

        def example(value_type):
            dtype = {"real": self.float_dtype, "int": self.int_dtype}.get(
                value_type.kind, np.dtype("bool")
            )
            dtype = self.numpy_dtype(dtype)
            return self.from_stand_in(stand_in(value_type.shape, dtype))

        return {
            name: map_leaves(example, spec)
            for name, spec in program.input_types.items()
        }

    def jit(self, program, compiler=None):
        """The backend compiler of ``program.jit(compiler)``: a function
        taking validated input arrays and returning a compiled function of
        such arrays (positionally) that returns the program's outputs; or
        ``None``, where the program itself is the fastest (numpy has no
        jit)."""
        if compiler is not None:
            raise ValueError(
                f"jit(compiler={compiler!r}) is for torch programs; this one "
                f"runs on {self.name}"
            )
        return None

    # dtypes of random draws (symbolic tracing's shape rules)
    float_dtype = np.dtype("float64")
    int_dtype = np.dtype("int64")

    def abstract_eval(self, fn, args, kwargs, draws=False):
        """``fn(*args, **kwargs)`` where ``args`` hold
        :class:`~funsor_lowering.ops.symbolic.SymbolicArray` s: the
        result with symbolic arrays for arrays, computed on stand-ins
        (:func:`stand_in`, converted by :meth:`from_stand_in`). A random op
        (``draws``) is never run on stand-ins: it would take numbers from
        the backend's global RNG."""
        from ..ops.symbolic import map_symbolic

        if draws:
            raise NotImplementedError(
                f"tracing cannot infer the shape of a random draw on "
                f"{self.name} without drawing from its global RNG; give the "
                f"op a shape rule in funsor_lowering/tracing/abstract.py"
            )

        args, kwargs = map_symbolic(self.stand_in_for, (args, kwargs))
        with np.errstate(all="ignore"):
            return self.as_symbolic(fn(*args, **kwargs))

    def as_symbolic(self, value):
        """An abstract evaluation's result with symbolic arrays for its
        arrays (of this backend; tuples of them too)."""
        from ..ops.symbolic import SymbolicArray

        if self.is_array(value):
            return SymbolicArray(tuple(value.shape), value.dtype)
        if isinstance(value, tuple):
            return tuple(self.as_symbolic(v) for v in value)
        return value

    def stand_in_for(self, symbolic):
        """A :func:`stand_in` array of this backend for a symbolic array."""
        dtype = self.numpy_dtype(symbolic.dtype)
        return self.from_stand_in(stand_in(symbolic.shape, dtype))

    def from_stand_in(self, array):
        """A read-only numpy stand-in as this backend's array."""
        return array

    def numpy_dtype(self, dtype):
        """A dtype of this backend as numpy's."""
        return np.dtype(dtype)

    def tracing_hooks(self):
        """Hook replacements (:mod:`funsor_lowering.ops.hooks`) in effect while
        tracing: route backend calls that funsor makes outside ``funsor.ops``
        (jax's key splitting) through ops."""
        return {}

    def recording_backend_calls(self):
        """A context in effect while tracing that records backend calls on
        captured values taking part in autograd as their ``funsor.ops``
        equivalents (torch: see ``CapturedParameterCalls``)."""
        return contextlib.nullcontext()

    def prepare_funsor_test(self):
        """Before each test of funsor's own suite (the conformance plugin):
        the seeds and dtypes funsor's repository's ``test/conftest.py``
        sets (double precision), beyond numpy's seed, set by the plugin."""


def nested_outputs(program, flat):
    """``flat`` (a function returning the program's output arrays as one
    flat tuple) returning the program's output nesting instead."""
    from ..ir.structure import map_leaves

    counter = itertools.count()
    structure = map_leaves(lambda _: next(counter), program.output)
    if isinstance(structure, int):  # one array

        def single(*arrays):
            return flat(*arrays)[0]

        return single

    def nested(*arrays):
        return map_leaves(flat(*arrays).__getitem__, structure)

    return nested


def signature_of(leaves):
    """Each array's type, shape and dtype."""
    return tuple(
        (type(v), getattr(v, "shape", None), getattr(v, "dtype", None)) for v in leaves
    )


class _NumpyRandomState:
    def __enter__(self):
        self.state = np.random.get_state()

    def __exit__(self, *exc):
        np.random.set_state(self.state)


def stand_in(shape, dtype):
    """A read-only numpy array of ``shape`` and ``dtype`` for abstract
    evaluation: identity matrices where the last two axes are square
    (Cholesky factors, solves and inverses stay defined), else ones; zeros
    for integers and booleans (valid indices).

    Example::

        >>> stand_in((2, 2, 2), np.dtype("float32"))[0]
        array([[1., 0.],
               [0., 1.]], dtype=float32)
    """
    dtype = np.dtype(dtype)
    if not np.issubdtype(dtype, np.inexact):
        base = np.zeros((), dtype)
    elif len(shape) >= 2 and shape[-1] == shape[-2]:
        base = np.eye(shape[-1], dtype=dtype)
    else:
        base = np.ones((), dtype)
    return np.broadcast_to(base, tuple(shape))


def _typable_number(number):
    """Whether a 0-d float32 / float64 array of ``number`` holds what a
    backend kernel makes of ``number`` itself: floats (cast as the kernel
    casts them), integers that float32 holds exactly."""
    return isinstance(number, float) or abs(number) <= 2**24
