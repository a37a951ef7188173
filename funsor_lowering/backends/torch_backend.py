"""torch adapter: array facts, ``torch.jit.trace`` of programs, export to
``torch.fx``."""

import functools
import hashlib
import math
import operator
import statistics
import time
import typing
import warnings

import funsor.torch  # noqa: F401  registers torch implementations of funsor.ops
import numpy as np
import torch
import torch.fx
from funsor import ops

from ..ir.structure import iter_leaves, map_leaves
from ..ops import hooks
from ..ops.dtypes import dtype_kind
from ..ops.extra_ops import (
    LogsumexpScanEmittingOp,
    LogsumexpScanOp,
    VecdotOp,
    categorical_sample,
    relu,
    triangular_solve_vectors,
    vecdot,
)
from ..ops.logspace_einsum import ArrayFunctions, logspace_einsum, logspace_einsum_with
from ..ops.symbolic import BACKEND_FUNCTIONS
from ..runtime.literals import python_literal
from .base import ArrayBackend, nested_outputs, signature_of
from .torch_minipyro import traced_apply_stack

# Abstract evaluation runs ops on CPU stand-ins up to this many elements in
# all (milliseconds of work at most), on ``meta`` tensors above.
STAND_IN_ELEMENTS = 1 << 22


# Reductions ``op(x, axis, keepdims)`` as torch's ``f(x, dim, keepdim=)``.
_TORCH_REDUCTIONS = {
    ops.SumOp: torch.sum,
    ops.AmaxOp: torch.amax,
    ops.AminOp: torch.amin,
    ops.MeanOp: torch.mean,
}


# Arithmetic that wraps a Python number operand in a tensor on every call
# (~2-5 us); a 0-d tensor of the other operand's dtype takes the same
# kernel (a CPU scalar, which torch takes beside tensors on any device)
# with the same results, in ~1.8 us a call. Not for
# float16 / bfloat16, whose kernels take a number in float32.
_NUMBER_ARITHMETIC = frozenset(
    {
        operator.add,
        operator.sub,
        operator.mul,
        operator.truediv,
        torch.add,
        torch.sub,
        torch.mul,
        torch.div,
        torch.true_divide,
    }
)
_EXACT_NUMBER_DTYPES = (torch.float32, torch.float64)


def _linear(input, weight, bias=None):
    result = ops.matmul(input, ops.permute(weight, (1, 0)))
    return result if bias is None else ops.add(result, bias)


def _logsumexp(input, dim, keepdim=False):
    return ops.logsumexp(input, dim, keepdim)


def _relu(input, inplace=False):
    if inplace:  # refused as the function itself would be: no value to write
        return NotImplemented
    return relu(input)


def _arithmetic(op, reflected=False):
    def binary(input, other, **kwargs):
        if kwargs:  # alpha=, rounding_mode=, out=: no exact op
            return NotImplemented
        return op(other, input) if reflected else op(input, other)

    return binary


# torch functions (and Tensor methods torch dispatches as functions) with
# an exact funsor.ops equivalent: recorded as it while tracing, as Pyro's
# funsor code calls them on traced values
BACKEND_FUNCTIONS.update(
    {
        **{
            fn: op
            for name, op in [
                ("exp", ops.exp),
                ("log", ops.log),
                ("log1p", ops.log1p),
                ("sqrt", ops.sqrt),
                ("sigmoid", ops.sigmoid),
                ("tanh", ops.tanh),
                ("abs", ops.abs),
                ("detach", ops.detach),
            ]
            for fn in (getattr(torch, name), getattr(torch.Tensor, name))
        },
        # arithmetic (torch's transforms compute loc + scale * x on
        # parameters); torch passes reflected operators' operands swapped
        **{
            fn: _arithmetic(op)
            for names, op in [
                (("add",), ops.add),
                (("sub",), ops.sub),
                (("mul",), ops.mul),
                (("div", "true_divide"), ops.truediv),
                (("pow",), ops.pow),
            ]
            for name in names
            for fn in (getattr(torch, name), getattr(torch.Tensor, name))
        },
        torch.Tensor.__rsub__: _arithmetic(ops.sub, reflected=True),
        torch.Tensor.__rdiv__: _arithmetic(ops.truediv, reflected=True),
        torch.Tensor.__rpow__: _arithmetic(ops.pow, reflected=True),
        torch.neg: ops.neg,
        torch.Tensor.neg: ops.neg,
        torch.logsumexp: _logsumexp,
        torch.Tensor.logsumexp: _logsumexp,
        torch.matmul: ops.matmul,
        torch.relu: relu,
        torch.Tensor.relu: relu,
        torch.nn.functional.relu: _relu,
        torch.nn.functional.linear: _linear,
    }
)


class CapturedParameterCalls(torch.overrides.TorchFunctionMode):
    """While tracing: a torch function with an exact ``funsor.ops``
    equivalent, called on a captured tensor that requires grad (a param
    store's or module's parameter), runs as that op, so the program
    replays it on every call (minipyro's ``param`` constrains its
    parameter with ``x.exp()``). Other calls run as usual."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        equivalent = BACKEND_FUNCTIONS.get(func)
        if equivalent is not None and any(
            isinstance(a, torch.Tensor) and a.requires_grad
            for a in iter_leaves((args, kwargs))
        ):
            result = equivalent(*args, **kwargs)
            if result is not NotImplemented:
                return result
        return func(*args, **kwargs)


class TorchBackend(ArrayBackend):
    name = "torch"
    array_type_name = "torch.Tensor"
    call_cost = 4000
    copy_function, copy_source = staticmethod(torch.clone), "torch.clone"

    def jit(self, program, compiler=None):
        if compiler is None:
            return FastestCompiler(program)
        if compiler == "trace":
            return functools.partial(traced_function, program)
        if compiler == "compile":
            return functools.partial(compiled_function, program)
        raise ValueError(
            f"jit(compiler={compiler!r}): torch programs support compiler=None "
            f"(the fastest), 'trace' (torch.jit.trace) and 'compile' "
            f"(torch.compile)"
        )

    native_array_types = (torch.Tensor,)

    def native_constant(self, value):
        if isinstance(value, (np.ndarray, np.generic)):
            return torch.as_tensor(np.asarray(value))
        return value

    def requires_grad(self, value):
        return isinstance(value, torch.Tensor) and value.requires_grad

    matmul_needs_one_dtype = True

    def program_to_fx(self, program, resolved):
        return program_to_fx(program, resolved)

    prepares_programs = True

    def keeps_gradients(self, value):
        return getattr(value, "requires_grad", True)

    def tracing_hooks(self):
        return {"minipyro.apply_stack": traced_apply_stack}

    def recording_backend_calls(self):
        return CapturedParameterCalls()

    def prepare_funsor_test(self):
        import pyro

        torch.set_default_dtype(torch.double)
        pyro.set_rng_seed(0)
        pyro.enable_validation(True)

    def has_gradient_graph(self, value):
        return isinstance(value, torch.Tensor) and value.grad_fn is not None

    def code_type(self, value):
        # parameters (Pyro's, nn.Module's) share the tensors' code
        return torch.Tensor if type(value) is torch.nn.Parameter else type(value)

    number_arithmetic = _NUMBER_ARITHMETIC
    exact_number_dtypes = _EXACT_NUMBER_DTYPES

    def zero_d_array(self, number, dtype):
        return torch.tensor(number, dtype=dtype)

    def is_compiling(self):
        return torch.compiler.is_compiling()

    def to_device(self, array, device):
        return array.to(device)

    def device_of(self, array):
        return array.device

    def preserved_random_state(self):
        return torch.random.fork_rng(devices=[])

    def dtype_kind(self, value):
        return dtype_kind(value.dtype)

    def array_literal(self, value):
        dtype = str(value.dtype)  # e.g. "torch.float32"
        data = value.detach().cpu()
        if data.numel() == 0:
            source = f"torch.zeros({tuple(data.shape)!r}, dtype={dtype})"
        else:
            source = f"torch.tensor({python_literal(data.tolist())}, dtype={dtype})"
        return source, ("import torch",)

    def fast_implementation(self, op_type, params):
        if op_type is ops.LogsumexpOp and params:
            return logsumexp  # (x, dim, keepdim), as funsor's wrapper calls it
        if op_type is LogsumexpScanOp:
            return _logsumexp_scan
        if op_type is LogsumexpScanEmittingOp:
            return _logsumexp_scan_emitting
        return None

    def fast_call(self, op_type, operands, params, dispatched):
        # torch's own functions where funsor's wrappers only pick arguments
        # (shapes and dtypes are fixed per body, so the choice is made once)
        if op_type in _TORCH_REDUCTIONS and len(operands) == 1:
            axis, keepdims = params
            if axis is not None:
                return _TORCH_REDUCTIONS[op_type], (axis,), {"keepdim": keepdims}
            if not keepdims:
                return _TORCH_REDUCTIONS[op_type], (), {}
        (x, *_) = operands
        if not isinstance(x, torch.Tensor):
            return super().fast_call(op_type, operands, params, dispatched)
        if op_type is ops.CholeskyOp and x.dim() >= 2 and x.shape[-1] > 1:
            return torch.linalg.cholesky, (), {}
        if op_type is ops.LogOp and x.is_floating_point():
            return torch.log, (), {}
        if op_type is ops.DiagonalOp:
            dim1, dim2 = params
            return torch.diagonal, (), {"dim1": dim1, "dim2": dim2}
        if op_type is ops.NewZerosOp:
            return torch.Tensor.new_zeros, tuple(params), {}
        if op_type is VecdotOp and _same_floating_dtype(*operands):
            return torch.linalg.vecdot, (), {}
        return super().fast_call(op_type, operands, params, dispatched)

    def to_numpy(self, array):
        return array.detach().cpu().numpy()

    @property
    def float_dtype(self):
        return torch.get_default_dtype()

    int_dtype = torch.int64

    def abstract_eval(self, fn, args, kwargs, draws=False):
        """On small CPU stand-ins (:func:`~.base.stand_in`) where the
        symbolic arguments are small and the op draws nothing: microseconds
        where a ``meta`` evaluation takes a millisecond, and the first
        ``meta`` evaluation of an op that torch implements in Python imports
        ``torch._dynamo`` (a second or more). Else on ``meta`` tensors
        (shapes only, no RNG); on stand-ins where an op (not a random one)
        has no meta implementation."""
        from ..ops.symbolic import SymbolicArray

        if not draws:
            size = sum(
                math.prod(a.shape)
                for a in iter_leaves((args, kwargs))
                if isinstance(a, SymbolicArray)
            )
            if size <= STAND_IN_ELEMENTS:
                with torch.no_grad():
                    return super().abstract_eval(fn, args, kwargs, draws)

        def to_meta(value):
            if isinstance(value, SymbolicArray):
                return torch.empty(value.shape, dtype=value.dtype, device="meta")
            if isinstance(value, torch.Tensor):
                return value.to("meta")
            if isinstance(value, (tuple, list)):
                return type(value)(to_meta(v) for v in value)
            return value

        try:
            result = fn(*to_meta(args), **{k: to_meta(v) for k, v in kwargs.items()})
        except (RuntimeError, NotImplementedError):
            return super().abstract_eval(fn, args, kwargs, draws)
        return self.as_symbolic(result)

    def from_stand_in(self, array):
        return torch.from_numpy(np.array(array))

    def numpy_dtype(self, dtype):
        return torch.empty((), dtype=dtype).numpy().dtype

    def from_numpy(self, array):
        if array.dtype.kind == "f":
            return torch.as_tensor(array, dtype=torch.get_default_dtype())
        return torch.as_tensor(array)


def logsumexp(x, dim, keepdim=False):
    """``torch.logsumexp`` whose gradient into a reduction over ``-inf``
    entries only is 0, not NaN (torch's is ``0 * exp(-inf - -inf)``), as
    eager funsor's (Pyro's log-space einsum): an HMM with impossible
    transitions has finite gradients. Its gradient is the softmax of ``x``
    normalized as computed (``exp(x - shift) / sum``, the shift a constant),
    as jax's: torch's ``exp(x - result)`` sums to more than 1 where
    ``result`` rounds to ``max(x)`` (float32 entries over ~1e7 apart from
    ``log n``: 2 for two equal entries of 3.6e15).

    >>> x = torch.tensor([[-math.inf, -math.inf], [0.0, 1.0]], requires_grad=True)
    >>> logsumexp(logsumexp(x, -1), 0).backward()
    >>> x.grad
    tensor([[0.0000, 0.0000],
            [0.2689, 0.7311]])
    """
    if dim is None:
        dim = tuple(range(x.dim()))
    if x.numel() == 0 or not (x.requires_grad and torch.is_grad_enabled()):
        return torch.logsumexp(x, dim, keepdim)  # the same values, faster
    shift = x.detach().amax(dim, keepdim=True)
    dead = shift == -math.inf
    shift = torch.nan_to_num(shift, nan=0.0, posinf=0.0, neginf=0.0)
    # entries <= 0, so torch's gradient exp(shifted - result) sums to 1
    shifted = (x - shift).masked_fill(dead, 0.0)
    result = torch.logsumexp(shifted, dim, keepdim=True) + shift
    result = result.masked_fill(dead, -math.inf)
    return result if keepdim else result.squeeze(dim)


def _logsumexp_scan(alpha, steps, emissions=None):
    for n in range(steps.shape[-3]):
        alpha = logsumexp(alpha.unsqueeze(-1) + steps[..., n, :, :], -2)
        if emissions is not None:
            alpha = alpha + emissions[..., n, :]
    return alpha


def _logsumexp_scan_emitting(parts):
    return _logsumexp_scan(*parts)


def _same_floating_dtype(x, y):
    return isinstance(y, torch.Tensor) and x.dtype is y.dtype and x.is_floating_point()


relu.register(torch.Tensor)(torch.relu)


def _torch_branch(predicate, if_true, if_false):
    # torch.jit.trace records one path of a Python branch: if_true, right
    # either way
    return if_true() if torch.jit.is_tracing() or predicate else if_false()


def _torch_smallest_accurate(x):
    info = torch.finfo(x.dtype)
    return info.tiny / info.eps


_TORCH_FUNCTIONS = ArrayFunctions(
    einsum=torch.einsum,
    matmul=torch.matmul,
    permute=torch.permute,
    amax=lambda x, axes: torch.amax(x, axes, keepdim=True),
    logsumexp=logsumexp,
    where=torch.where,
    isfinite=torch.isfinite,
    exp=torch.exp,
    log=torch.log,
    stop_gradient=torch.Tensor.detach,
    smallest_accurate=_torch_smallest_accurate,
    any=torch.any,
    branch=_torch_branch,
)


@logspace_einsum.register(typing.Tuple[torch.Tensor, ...])  # noqa: UP006
def _logspace_einsum(operands, equation):
    return logspace_einsum_with(_TORCH_FUNCTIONS, operands, equation)


@vecdot.register(torch.Tensor, torch.Tensor)
def _vecdot(x, y):
    if _same_floating_dtype(x, y):
        return torch.linalg.vecdot(x, y)
    return torch.sum(x * y, -1)


@triangular_solve_vectors.register(torch.Tensor, torch.Tensor)
def _triangular_solve_vectors(x, y, upper=False, transpose=False):
    if y.size(-1) == 1:
        return x / y[..., 0]  # as funsor's triangular_solve divides
    if y.dim() == 2 and x.dim() >= 2:
        # the vectors as the rows of one matrix Z: Z yᵀ = X (transpose:
        # Z y = X), one solve from the right without unit axes
        a, a_upper = (y, upper) if transpose else (y.mT, not upper)
        return torch.linalg.solve_triangular(a, x, upper=a_upper, left=False)
    a, a_upper = (y.mT, not upper) if transpose else (y, upper)
    return torch.linalg.solve_triangular(a, x.unsqueeze(-1), upper=a_upper).squeeze(-1)


@categorical_sample.register(typing.Tuple[torch.Tensor, ...])  # noqa: UP006
def _categorical_sample(args, sample_shape=(), keyed=False):
    dist = torch.distributions.Categorical(logits=args[0])
    return dist.sample(tuple(sample_shape))


def traced_function(program, leaves):
    """``program`` through ``torch.jit.trace`` for input arrays like
    ``leaves`` (outputs flattened to a tuple for the tracer, nested again on
    return). Where tracing fails (outputs that are not tensors), the
    program's generated body itself."""
    body = program.specialized(leaves)  # the trace runs the body

    def flat_program(*arrays):
        return tuple(iter_leaves(body(*arrays)))

    try:
        # the trace runs the body once: its draws must not advance the
        # caller's random state (the first call would draw other numbers)
        with program._array_backend.preserved_random_state(), warnings.catch_warnings():
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            # deprecated in favour of torch.compile, which takes tens of
            # seconds to compile a program on CPU; trace still works
            warnings.simplefilter("ignore", DeprecationWarning)
            traced = torch.jit.trace(flat_program, tuple(leaves), check_trace=False)
    except (RuntimeError, TypeError, ValueError) as error:
        warnings.warn(
            f"torch.jit.trace failed ({error}); calling the program uncompiled",
            RuntimeWarning,
            stacklevel=2,
        )
        return body
    return nested_outputs(program, traced)


def compiled_function(program, leaves):
    """``program`` through ``torch.compile`` (inductor: fused kernels) for
    input arrays like ``leaves``, compiled on its first call. Compiling
    takes seconds to minutes on CPU; calls are then several times faster
    than ``torch.jit.trace`` on small arrays."""
    # A function of its own (dynamo caches compilations per code object):
    # compiled for this signature's shapes alone, it stays static without
    # ``dynamic=False``, which, like ``fullgraph=True``, costs microseconds
    # per call.
    body = program.specialized(leaves)
    # fallback_random: random ops call torch's own generators, in program
    # order, so seeded draws equal the program's (inductor's default draws
    # from a generator of its own)
    return torch.compile(
        _own_code(body, _content_digest(program, body, leaves)),
        options={"fallback_random": True},
    )


def _own_code(function, digest):
    """``function`` behind a function with a code object of its own, from a
    file name of its own: dynamo keys what it learns of a function's input
    shapes (automatic dynamic shapes; across processes too, given a
    ``torch.compiler.config.job_id``) by file name, line and name, so a
    shared name would make a later program's compile dynamic-shaped. The
    name holds ``digest``, which only an equal body and signature share."""
    namespace = {"function": function}
    filename = f"<funsor_lowering torch.compile {digest}>"
    source = "def program(*arrays):\n    return function(*arrays)\n"
    exec(compile(source, filename, "exec"), namespace)
    return namespace["program"]


def _content_digest(program, body, leaves):
    """A digest of the generated ``body``, its input signature and the
    program's constants' shapes and dtypes."""
    constants = [
        (tuple(c.shape), c.dtype) if isinstance(c, torch.Tensor) else type(c)
        for c in program.constants
    ]
    text = repr((body.__source__, signature_of(leaves), constants))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def body_function(program, leaves):
    """The program's generated body for input arrays like ``leaves`` (no
    compiler: the fastest on tiny programs)."""
    return program.specialized(leaves)


class FastestCompiler:
    """Whichever of ``torch.jit.trace``, ``torch.compile`` and the program's
    own body runs a call fastest, for each input signature: each is
    compiled, warmed up and timed (interleaved rounds, medians; drawing
    nothing from the caller's random state), and the fastest is kept.
    Rounds stop early once timing has taken :attr:`TIMING_BUDGET` seconds
    (large programs). ``chosen`` maps each input signature to the name of
    the one kept."""

    CANDIDATES = {
        "trace": traced_function,
        "compile": compiled_function,
        "program": body_function,
    }
    WARM_UP_CALLS = 2
    ROUNDS = 3
    CALLS_PER_ROUND = 5
    TIMING_BUDGET = 0.5

    def __init__(self, program):
        self.program = program
        self.chosen = {}

    def __call__(self, leaves):
        functions = {}
        with self.program._array_backend.preserved_random_state():
            for name, make in self.CANDIDATES.items():
                try:
                    function = make(self.program, leaves)
                    for _ in range(self.WARM_UP_CALLS):  # the first compiles
                        function(*leaves)
                except Exception:  # noqa: BLE001 - that compiler cannot
                    continue
                functions[name] = function
            samples = {name: [] for name in functions}
            for _ in range(self.ROUNDS):
                for name, function in functions.items():
                    for _ in range(self.CALLS_PER_ROUND):
                        start = time.perf_counter()
                        function(*leaves)
                        samples[name].append(time.perf_counter() - start)
                if sum(map(sum, samples.values())) > self.TIMING_BUDGET:
                    break
        name = min(samples, key=lambda k: statistics.median(samples[k]))
        self.chosen[signature_of(leaves)] = name
        return functions[name]


def program_to_fx(program, resolved):
    """``program`` as a ``torch.fx.GraphModule`` whose ``forward`` takes the
    input leaves (by their value names) and returns the output nesting. Each
    operation is a ``call_function`` node calling its implementation in
    ``resolved`` (``(impl, extra_args, kwargs)`` per operation, as
    ``codegen.evaluate`` resolves them); constants are buffers."""
    root = torch.nn.Module()
    graph = torch.fx.Graph()
    names = program.value_names
    nodes = []
    for i, value in enumerate(program.constants):
        if isinstance(value, torch.Tensor):
            root.register_buffer(names[i], value)
            nodes.append(graph.get_attr(names[i]))
        else:
            nodes.append(value)  # Python numbers are literal arguments
    for i in range(len(program.constants), program.first_operation):
        nodes.append(graph.placeholder(names[i]))
    for operation, (impl, extra, kwargs) in zip(program.operations, resolved):
        args = [nodes[a] for a in operation.args]
        if operation.packed:
            args = [tuple(args)]
        node = graph.call_function(impl, tuple(args) + tuple(extra), dict(kwargs))
        nodes.append(node)
    graph.output(_plain_keys(map_leaves(lambda i: nodes[i], program.output)))
    return torch.fx.GraphModule(root, graph, class_name="OpProgramModule")


def _plain_keys(structure):
    """The output nesting with dict keys as plain ``str`` / ``int`` (torch.fx
    writes keys with ``repr``: ``numpy.str_`` or ``IntEnum`` keys would not
    parse); equal keys, so lookups by the original keys still work."""
    if isinstance(structure, (tuple, list)):
        return type(structure)(_plain_keys(item) for item in structure)
    if isinstance(structure, dict):
        plain = {}
        for key, item in structure.items():
            if isinstance(key, str):
                key = str(key)
            elif isinstance(key, int) and not isinstance(key, bool):
                key = int(key)
            else:
                raise TypeError(
                    f"to_fx(): output dict key {key!r} ({type(key).__name__}) "
                    f"cannot be written in a torch.fx graph; use str or int keys"
                )
            plain[key] = _plain_keys(item)
        return plain
    return structure


BACKEND = TorchBackend()
hooks.install_minipyro_hooks()
