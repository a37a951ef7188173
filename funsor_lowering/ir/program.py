"""``OpProgram``: a straight-line program of ``funsor.ops`` applications.

Values are numbered in one sequence: constants first, then inputs, then one
value per operation. An operation only reads values numbered before it, and
the program's output is a nesting of tuples, lists and dicts of value numbers.

Example::

    >>> import numpy as np
    >>> from funsor import ops
    >>> from funsor.domains import Reals
    >>> program = OpProgram(
    ...     constants=[1.0],
    ...     inputs={"x": Reals[3]},
    ...     operations=[Operation(ops.mul, (1, 1)), Operation(ops.add, (2, 0))],
    ...     output=3,
    ... )
    >>> print(program)
    OpProgram(x: real[3]) on numpy:
      c0: real[] = 1.0
      mul = mul(x, x)
      add = add(mul, c0)
      return add
    >>> program(x=np.array([1.0, 2.0, 3.0]))
    array([ 2.,  5., 10.])
"""

import numbers

import numpy as np
from funsor.domains import Domain
from funsor.util import get_backend

from ..ops.dtypes import dtype_kind
from .naming import ENTRY_NAMES, Namespace
from .structure import iter_leaves, iter_paths, lookup, map_leaves, path_suffix


class Operation:
    """One op application: ``op(*values)``, or ``op(tuple(values))`` when
    ``packed`` (funsor's finitary ops such as ``ops.cat`` take one tuple).

    :param funsor.ops.Op op: the op, with its parameters (``op.defaults``).
    :param tuple args: value numbers of the arguments.
    :param bool packed: pass the arguments as one tuple.
    """

    # A class with __slots__ is lighter and faster to build than a namedtuple
    # with methods, and programs hold many of these.
    __slots__ = ("op", "args", "packed")

    def __init__(self, op, args, packed=False):
        self.op = op
        self.args = tuple(args)
        self.packed = bool(packed)

    def replace(self, **changes):
        """A copy with some fields changed."""
        fields = {"op": self.op, "args": self.args, "packed": self.packed}
        fields.update(changes)
        return Operation(**fields)

    def _key(self):
        return (self.op, self.args, self.packed)

    def __eq__(self, other):
        return isinstance(other, Operation) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        packed = ", packed=True" if self.packed else ""
        return f"Operation({self.op!r}, {self.args!r}{packed})"

    def __getstate__(self):
        return self._key()

    def __setstate__(self, state):
        self.op, self.args, self.packed = state


class ValueType:
    """Shape and dtype kind (``"real"``, ``"int"``, ``"bool"``) of a value.

    Example::

        >>> from funsor.domains import Reals
        >>> ValueType.from_domain(Reals[2, 3])
        ValueType((2, 3), 'real')
    """

    __slots__ = ("shape", "kind")

    def __init__(self, shape, kind):
        # int(): under torch.jit.trace, sizes computed by user code can be
        # 0-d tensors; a ValueType's shape is always plain ints.
        self.shape = tuple(map(int, shape))
        self.kind = kind

    @staticmethod
    def from_domain(domain):
        if domain.dtype == "real":
            return ValueType(domain.shape, "real")
        return ValueType(domain.shape, "int")

    def __eq__(self, other):
        return isinstance(other, ValueType) and (self.shape, self.kind) == (
            other.shape,
            other.kind,
        )

    def __hash__(self):
        return hash((self.shape, self.kind))

    def __repr__(self):
        return f"ValueType({self.shape!r}, {self.kind!r})"

    def __str__(self):
        return "{}[{}]".format(self.kind, ",".join(map(str, self.shape)))

    def __getstate__(self):
        return (self.shape, self.kind)

    def __setstate__(self, state):
        self.shape, self.kind = state


def value_type_of(value, backend=None):
    """The :class:`ValueType` of a constant or traced value, or ``None`` if
    unknown. Arrays not of ``backend`` are recognized by their ``shape`` and
    ``dtype``."""
    if isinstance(value, bool):
        return ValueType((), "bool")
    if isinstance(value, numbers.Integral):
        return ValueType((), "int")
    if isinstance(value, numbers.Real):
        return ValueType((), "real")
    if backend is not None and backend.is_array(value):
        return ValueType(tuple(value.shape), backend.dtype_kind(value))
    if hasattr(value, "shape") and hasattr(value, "dtype"):  # symbolic arrays too
        return ValueType(tuple(value.shape), dtype_kind(value.dtype))
    return None


def _nbytes(value):
    return int(getattr(value, "nbytes", 8))  # arrays; 8 for Python numbers


def as_value_type(spec):
    """A ValueType, or a nesting of tuples, lists and dicts of them."""
    if isinstance(spec, ValueType):
        return spec
    if isinstance(spec, Domain):
        return ValueType.from_domain(spec)
    if isinstance(spec, (tuple, list, dict)):
        return map_leaves(as_value_type, spec)
    raise TypeError(f"expected a ValueType or funsor domain, got {spec!r}")


# What a program calls in the layers above the IR: how it runs (``runtime/``:
# ``Runtime``, ``JitEntry``, ``check_nesting``, ``vmap``, codegen's ``evaluate``,
# ``format_dot``, ``format_listing``, ``generate_module_source``) and its
# backend's array facts (``backends/``: ``array_backend``,
# ``usable_array_backend``). The package's ``__init__`` connects them
# (:func:`connect`) on its first import, before any program exists (also
# an unpickled one: unpickling imports the package first); this module
# imports neither layer.
_ABOVE = {}


def connect(**parts):
    """Give programs the parts of the layers above the IR (see ``_ABOVE``)."""
    _ABOVE.update(parts)


def _above(name):
    try:
        return _ABOVE[name]
    except KeyError:
        raise RuntimeError(
            f"{name} is not connected: programs run after funsor_lowering's "
            f"__init__ connects the runtime and backends to the IR"
        ) from None


def array_backend(name):
    """The :class:`~funsor_lowering.backends.base.ArrayBackend` of backend
    ``name`` (its array facts; passes read them through this function)."""
    return _above("array_backend")(name)


def _native_constants(constants, backend):
    """``constants`` with numpy arrays converted to ``backend``'s arrays:
    a program holds only its backend's array type (and Python numbers)."""
    constants = tuple(constants)
    if any(isinstance(c, (np.ndarray, np.generic)) for c in constants):
        native = array_backend(backend).native_constant
        constants = tuple(native(c) for c in constants)
    return constants


def _constant_fault(value, backend):
    """Why ``value`` may not be a constant of a ``backend`` program, or ``None``.

    Python numbers are weakly typed (they take their operands' dtype, as in
    eager funsor); arrays must be the backend's own type."""
    if type(value) in (bool, int, float):
        return None
    if isinstance(value, array_backend(backend).native_array_types):
        return None
    return (
        f"a {backend} program holds only Python numbers and {backend} arrays "
        f"as constants"
    )


def _new_instance(cls):
    # unpickling: an instance of cls, before __setstate__
    return cls.__new__(cls)


class OpProgram:
    """A straight-line program of ``funsor.ops`` applications.

    :param constants: values embedded in the program (backend arrays or
        Python numbers), numbered ``0 .. C-1``.
    :param dict inputs: input name -> funsor domain (or :class:`ValueType`)
        that the input array must have exactly; numbered ``C .. C+I-1``.
    :param operations: :class:`Operation` s; operation ``k`` defines value
        ``C + I + k``.
    :param output: a value number, or a nesting of tuples, lists and dicts of
        value numbers.
    :param value_types: optional :class:`ValueType` (or ``None``) of each
        operation's value, shown by ``print(program)``.
    :param str backend: the funsor backend whose arrays the program runs on;
        defaults to ``funsor.get_backend()``.
    """

    def __init__(
        self, constants, inputs, operations, output, *, value_types=None, backend=None
    ):
        self.backend = get_backend() if backend is None else backend
        self.constants = _native_constants(constants, self.backend)
        self.input_types = {
            name: as_value_type(spec) for name, spec in dict(inputs).items()
        }
        self.operations = tuple(operations)
        self.output = output
        if value_types is None:
            value_types = (None,) * len(self.operations)
        self._operation_types = tuple(value_types)
        self._init_derived()
        self.check()

    def _init_derived(self):
        # (name, path, ValueType) of every input array, in order: an input
        # may be a nesting of tuples, lists and dicts of arrays.
        self._input_leaves = tuple(
            (name, path, leaf)
            for name, spec in self.input_types.items()
            for path, leaf in iter_paths(spec)
        )
        self._backend_adapter = None  # resolved on first use (see _array_backend)
        self._runtime = _above("Runtime")(self)
        self._names = None

    @property
    def _array_backend(self):
        """The :class:`~funsor_lowering.backends.ArrayBackend` of the
        program's backend, imported on first use (never while unpickling:
        funsor 0.4.8 cannot load jax beside another active backend)."""
        adapter = self._backend_adapter
        if adapter is None:
            adapter = self._backend_adapter = _above("usable_array_backend")(
                self.backend
            )
        return adapter

    # ----------------------------------------------------------------- layout
    @property
    def inputs(self):
        """Input names, in order."""
        return tuple(self.input_types)

    @property
    def num_values(self):
        return len(self.constants) + len(self._input_leaves) + len(self.operations)

    @property
    def first_operation(self):
        """The value number of the first operation's result."""
        return len(self.constants) + len(self._input_leaves)

    @property
    def value_types(self):
        """The :class:`ValueType` (or ``None``) of every value, by number."""
        constants = tuple(value_type_of(c) for c in self.constants)
        inputs = tuple(leaf for _, _, leaf in self._input_leaves)
        return constants + inputs + self._operation_types

    @property
    def value_names(self):
        """Readable, unique Python identifiers for every value, by number."""
        if self._names is None:
            namespace = Namespace(reserved=ENTRY_NAMES)
            names = [
                namespace.create("_".join([name, *map(str, path)]))
                for name, path, _ in self._input_leaves
            ]
            names = [
                namespace.create(f"c{i}") for i in range(len(self.constants))
            ] + names
            names += [namespace.create(o.op.name) for o in self.operations]
            self._names = tuple(names)
        return self._names

    def check(self):
        """Check that operations read only earlier values and the output
        refers to existing values; raise ``ValueError`` naming the fault."""
        if len(self._operation_types) != len(self.operations):
            raise ValueError(
                f"value_types has {len(self._operation_types)} entries, "
                f"expected one per operation ({len(self.operations)})"
            )
        for k, value in enumerate(self.constants):
            fault = _constant_fault(value, self.backend)
            if fault:
                raise ValueError(f"constant c{k} ({type(value).__name__}): {fault}")
        start = self.first_operation
        for k, operation in enumerate(self.operations):
            if not isinstance(operation, Operation):
                raise ValueError(f"operation {k} is not an Operation: {operation!r}")
            for arg in operation.args:
                if not (isinstance(arg, int) and 0 <= arg < start + k):
                    raise ValueError(
                        f"operation {k} ({operation!r}) reads value {arg!r}, "
                        f"which is not defined before it"
                    )
        for leaf in iter_leaves(self.output):
            if not (isinstance(leaf, int) and 0 <= leaf < self.num_values):
                raise ValueError(f"output refers to undefined value {leaf!r}")

    # ---------------------------------------------------------------- calling
    def __call__(self, *args, **kwargs):
        """``program(**arrays)``: the generated entry point (see
        :class:`Runtime`)."""
        return self._runtime.entry(*args, **kwargs)

    def _install_entry(self, entry):
        """Make the generated ``entry`` (taking the program first) this
        program's ``__call__``, so that ``program(**arrays)`` runs it with no
        call in between (the forwarding above costs about as much as the
        entry's checks). Python looks ``__call__`` up on the type: the
        program gets a subclass of its own, pickled as its class. Classes
        with their own ``__call__`` keep it."""
        cls = type(self)
        if "_own_entry" not in vars(cls):
            if cls.__call__ is not OpProgram.__call__:
                return
            namespace = {"_own_entry": cls, "__module__": cls.__module__}
            namespace["__qualname__"] = cls.__qualname__
            cls = type(cls.__name__, (cls,), namespace)
            self.__class__ = cls
        cls.__call__ = entry

    def __reduce_ex__(self, protocol):
        cls = vars(type(self)).get("_own_entry", type(self))
        if cls.__reduce__ is not object.__reduce__:  # its own (VmappedProgram)
            return self.__reduce__()
        return _new_instance, (cls,), self.__getstate__()

    def vmap(self, in_axes):
        """This program mapped over a new leading batch axis: ``in_axes``
        maps each input name to ``0`` (the input gets the axis) or ``None``
        (shared by every member). Returns a
        :class:`~funsor_lowering.runtime.vmap.VmappedProgram`: one operation
        per operation, for any batch size (not a loop)."""
        return _above("vmap")(self, in_axes)

    def to(self, device):
        """This program with its array constants on ``device`` (a torch
        device or device name; a jax ``Device``); numpy programs take
        ``"cpu"`` only. Inputs must be on ``device`` too: a call with inputs
        elsewhere fails with the backend's error naming both devices."""
        backend = self._array_backend
        constants = [
            backend.to_device(c, device) if backend.is_array(c) else c
            for c in self.constants
        ]
        return OpProgram(
            constants,
            self.input_types,
            self.operations,
            self.output,
            value_types=self._operation_types,
            backend=self.backend,
        )

    def prepare(self, inputs=None):
        """Generate the program's code for its backend's own arrays now, as
        its first call would, running it once on ``inputs`` (a dict as for a
        call; by default stand-ins) without drawing from the global random
        state; returns the program. Then
        ``torch.compile(program)`` (or a function calling it) can trace a
        call without graph breaks: a compiler's tracer cannot generate
        code. ``compile_funsor``, ``compile_function`` and
        ``trace_function`` prepare torch programs."""
        backend = self._array_backend
        values = self.validate(
            backend.example_inputs(self) if inputs is None else inputs
        )
        with backend.preserved_random_state():
            self._runtime.body(values)
        return self

    def specialized(self, leaves):
        """The generated body for the types of validated input ``leaves``:
        a function of the leaves, positionally (what ``torch.jit.trace``
        traces, with its own tracer types)."""
        return self._runtime.body(leaves)[0]

    def run_leaves(self, leaves):
        """The outputs for validated input ``leaves`` of any array type (what
        ``jax.jit`` traces): where the body for their types is generated now,
        the outputs its generation computed, so the program runs once."""
        body, outputs = self._runtime.body(leaves)
        return body(*leaves) if outputs is None else outputs

    def cache_info(self):
        """Sizes of the call caches: ``signatures`` seen and generated
        ``bodies`` (see :mod:`funsor_lowering.runtime.entry`)."""
        return self._runtime.cache_info()

    def validate(self, kwargs):
        """The input arrays (leaves, in order) of a call, checked against the
        program's inputs: names, nesting, array types, shapes and dtypes."""
        if len(kwargs) != len(self.input_types) or not all(
            name in kwargs for name in self.input_types
        ):
            missing = [name for name in self.input_types if name not in kwargs]
            unexpected = [name for name in kwargs if name not in self.input_types]
            problems = []
            if missing:
                problems.append(f"missing input(s) {', '.join(map(repr, missing))}")
            if unexpected:
                problems.append(
                    f"unexpected input(s) {', '.join(map(repr, unexpected))}"
                )
            raise TypeError(
                f"{'; '.join(problems)}; this program takes "
                f"({', '.join(f'{n!r}: {t}' for n, t in self.input_types.items())})"
            )
        for name, spec in self.input_types.items():
            _above("check_nesting")(name, spec, kwargs[name])
        values = []
        for name, path, _ in self._input_leaves:
            value = kwargs[name]
            for key in path:
                value = lookup(value, key, name, path)
            values.append(value)
        return self.validate_leaves(values)

    def validate_leaves(self, leaves):
        """Input arrays ``leaves`` (in order, as :meth:`validate` returns
        them) checked for array type, shape and dtype: a compiler tracing
        the program for a new input signature checks its operands with this
        (``jax.jit``)."""
        backend = self._array_backend
        for (name, path, expected), value in zip(self._input_leaves, leaves):
            label = repr(name) + path_suffix(path)
            if not backend.is_array(value):
                raise TypeError(
                    f"input {label}: expected a {backend.array_type_name} "
                    f"(the program was built on the {backend.name} backend), "
                    f"got {type(value).__module__}.{type(value).__qualname__}"
                )
            shape = tuple(value.shape)
            if shape != expected.shape:
                raise ValueError(
                    f"input {label}: expected shape {expected.shape}, got {shape}"
                )
            kind = backend.dtype_kind(value)
            if kind != expected.kind:
                raise TypeError(
                    f"input {label}: expected a {expected.kind} array "
                    f"({expected}), got dtype {value.dtype}"
                )
        self._check_devices(leaves)
        return leaves

    def _check_devices(self, leaves):
        """torch: the input arrays and the program's array constants on one
        device, else a ``ValueError`` naming the input that differs (0-d
        arrays are exempt: torch takes a 0-d CPU tensor beside any)."""
        backend = self._array_backend
        placed = [
            (repr(name) + path_suffix(path), backend.device_of(value))
            for (name, path, _), value in zip(self._input_leaves, leaves)
            if len(value.shape)
        ]
        if not placed or placed[0][1] is None:
            return
        arrays = [c for c in self.constants if backend.is_array(c) and len(c.shape)]
        if arrays:
            placed.insert(0, ("the program's constants", backend.device_of(arrays[0])))
        first, device = placed[0]
        for label, other in placed[1:]:
            if other != device:
                raise ValueError(
                    f"input {label}: on device {other}, but {first} on "
                    f"{device}: a program runs on one device (move the "
                    f"inputs with .to(device), or the program with "
                    f"program.to(device))"
                )

    # ------------------------------------------------------------ jit, export
    def jit(self, compiler=None):
        """A jit-compiled callable with the program's signature and outputs:
        ``jax.jit`` on jax, the program itself on numpy. On torch, by
        default, the fastest of ``torch.jit.trace``, ``torch.compile`` and
        the program itself (fastest on tiny programs), each compiled and
        timed on the first call per input shapes and dtypes;
        ``compiler="trace"`` or ``compiler="compile"`` picks one
        (``torch.compile`` takes seconds to minutes to compile on CPU, and
        runs small arrays several times faster). Calls go through a
        generated entry, as the program's own do
        (:class:`~funsor_lowering.runtime.entry.JitEntry`; on jax, with
        array inputs, the generated entry function itself, which calls
        ``jax.jit``'s function directly). ``cache_info()`` counts the input
        signatures compiled for."""
        compiler = self._array_backend.jit(self, compiler)
        if compiler is None:
            return self
        entry = _above("JitEntry")(self, compiler)
        return entry.direct or entry

    def to_fx(self):
        """An equivalent ``torch.fx.GraphModule`` (torch backend only): one
        ``call_function`` node per operation, calling the implementation the
        program's generated code calls; constants are module buffers."""
        backend = self._array_backend
        if backend.program_to_fx is None:
            raise NotImplementedError(
                f"to_fx() needs a program built on the torch backend; this one "
                f"runs on {self.backend}"
            )
        examples = [backend.example_input(t) for _, _, t in self._input_leaves]
        _, resolved = _above("evaluate")(self, examples)
        return backend.program_to_fx(self, resolved)

    def to_dot(self):
        """Graphviz (dot) source drawing the program: inputs, constants,
        operations (with their value types) and outputs."""
        return _above("format_dot")(self)

    def stats(self):
        """Counts: ``operations``, ``backend_calls`` (operations that call
        the backend: all but taking an item of a tuple result, which is
        Python indexing), ``by_op`` (op name -> count), ``inputs``,
        ``constants`` and ``constant_bytes`` (bytes held by constants).
        ``benchmarks/calls.py`` counts the calls of a run instead, in the
        backend's own terms (where one op is several calls)."""
        from ..ops.extra_ops import TupleItemOp

        by_op = {}
        for operation in self.operations:
            by_op[operation.op.name] = by_op.get(operation.op.name, 0) + 1
        python = sum(isinstance(o.op, TupleItemOp) for o in self.operations)
        return {
            "operations": len(self.operations),
            "backend_calls": len(self.operations) - python,
            "by_op": dict(sorted(by_op.items(), key=lambda kv: (-kv[1], kv[0]))),
            "inputs": len(self._input_leaves),
            "constants": len(self.constants),
            "constant_bytes": sum(_nbytes(c) for c in self.constants),
        }

    # --------------------------------------------------------------- printing
    def as_code(self, name="program"):
        """Python source defining ``name(**inputs)``, equivalent to this
        program and exec-able in a fresh namespace (constants are written as
        literals that round-trip exactly)."""
        return _above("generate_module_source")(self, name)

    def __str__(self):
        return _above("format_listing")(self)

    def __repr__(self):
        return (
            f"<OpProgram({', '.join(self.inputs)}) on {self.backend}: "
            f"{len(self.constants)} constants, {len(self.operations)} operations>"
        )

    # --------------------------------------------------------------- pickling
    def __getstate__(self):
        return {
            "constants": self.constants,
            "input_types": self.input_types,
            "operations": self.operations,
            "output": self.output,
            "operation_types": self._operation_types,
            "backend": self.backend,
        }

    def __setstate__(self, state):
        self.constants = state["constants"]
        self.input_types = state["input_types"]
        self.operations = state["operations"]
        self.output = state["output"]
        self._operation_types = state["operation_types"]
        self.backend = state["backend"]
        self._init_derived()


__all__ = ["OpProgram", "Operation", "ValueType"]
