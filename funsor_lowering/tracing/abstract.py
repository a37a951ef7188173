"""Abstract evaluation: the shape and dtype of an op's result on symbolic
arrays, computed without their values and without touching any RNG.

Each backend evaluates the op on stand-ins of the symbolic arguments
(:meth:`~funsor_lowering.backends.base.ArrayBackend.abstract_eval`): jax
under ``jax.eval_shape``, numpy (and torch, for arguments up to
``torch_backend.STAND_IN_ELEMENTS`` elements) on read-only broadcast arrays
whose values keep linear algebra defined
(:func:`~funsor_lowering.backends.base.stand_in`), torch on ``meta``
tensors above that. Random ops of backends whose draws use a global RNG
(numpy, torch), and ``cat``, ``einsum`` (leading ellipses) and basic
``getslice`` have shape rules here instead; ``full_like`` on every
backend; a distribution's draw on jax where ``jax.eval_shape`` fails
(NumPyro samplers that need concrete parameters) falls back to its rule.

Example::

    >>> import numpy as np
    >>> from funsor import ops
    >>> from funsor_lowering.backends import array_backend
    >>> from funsor_lowering.ops.hooks import original
    >>> x = SymbolicArray((4, 3, 3), np.dtype("float64"))
    >>> numpy, call = array_backend("numpy"), original("Op.__call__")
    >>> abstract_result(ops.cholesky, (x,), {}, numpy, call)
    SymbolicArray(shape=(4, 3, 3), dtype=float64)
"""

import numpy as np
from funsor import ops

from ..ir.structure import call_signature
from ..ops.extra_ops import (
    RANDOM_OP_TYPES,
    CategoricalSampleOp,
    DistributionLogProbOp,
    DistributionSampleOp,
    RandnWithKeyOp,
    backend_distribution,
)
from ..ops.symbolic import SymbolicArray
from ..runtime.codegen import bind_call


def abstract_result(op, args, kwargs, backend, call):
    """``call(op, *args, **kwargs)``'s result, with symbolic arrays for
    arrays: a :class:`SymbolicArray` or a tuple of them. Results are
    remembered per op and argument shapes and dtypes (a traced recipe
    applies few distinct ops to few distinct shapes, many times)."""
    if isinstance(op, ops.FinfoOp):  # a function of the dtype alone
        args = [
            backend.stand_in_for(a) if isinstance(a, SymbolicArray) else a for a in args
        ]
        return call(op, *args, **kwargs)
    key = _cache_key(op, args, kwargs, backend)
    types = _RESULT_TYPES.get(key) if key is not None else None
    if types is None:
        result = _evaluate(op, args, kwargs, backend, call)
        if key is None:
            return result
        types = _types_of(result)
        if len(_RESULT_TYPES) >= _CACHE_SIZE:
            _RESULT_TYPES.clear()
        _RESULT_TYPES[key] = types
    if isinstance(types, list):
        return tuple(SymbolicArray(*t) for t in types)
    return SymbolicArray(*types)


_RESULT_TYPES = {}  # op and argument signature -> result (shape, dtype)s
_CACHE_SIZE = 1 << 14


def _cache_key(op, args, kwargs, backend):
    """A hashable key of everything the result's shape and dtype depend on,
    or ``None`` (an argument that is no array, number or tuple of them)."""

    def is_array(value):
        return isinstance(value, SymbolicArray) or backend.is_array(value)

    try:
        signature = tuple(call_signature(a, is_array) for a in args)
        signature += tuple((k, call_signature(v, is_array)) for k, v in kwargs.items())
        key = (op, backend.name, signature)
        hash(key)
    except TypeError:
        return None
    return key


def _types_of(result):
    if isinstance(result, tuple):
        return [(r.shape, r.dtype) for r in result]
    return (result.shape, result.dtype)


def _evaluate(op, args, kwargs, backend, call):
    draws = isinstance(op, RANDOM_OP_TYPES)
    rule = _RULES.get(type(op))
    if rule is not None and (not backend.keyed or type(op) in _KEYED_RULES):
        result = rule(bind_call(op, args, kwargs).arguments, backend)
        if result is not None:
            return result
    try:
        result = backend.abstract_eval(
            lambda *a, **k: call(op, *a, **k), args, kwargs, draws=draws
        )
    except Exception:
        fallback = _FALLBACK_RULES.get(type(op))
        result = fallback and fallback(bind_call(op, args, kwargs).arguments, backend)
        if result is None:
            raise
    if isinstance(result, tuple):
        return tuple(_symbolic(op, r) for r in result)
    return _symbolic(op, result)


def _symbolic(op, value):
    if isinstance(value, SymbolicArray):
        return value
    raise TypeError(
        f"{op!r} on a traced value returned a {type(value).__name__}, not an "
        f"array: its value would depend on the inputs' values, which tracing "
        f"does not know; compute it with funsor.ops on arrays"
    )


def _randn_shape(arguments, backend):
    return SymbolicArray(tuple(arguments["shape"]), backend.float_dtype)


def _categorical_shape(arguments, backend):
    logits = arguments["args"][0]
    shape = tuple(arguments["sample_shape"]) + tuple(logits.shape[:-1])
    return SymbolicArray(shape, backend.int_dtype)


def stand_in_distribution(
    dist_class, names, params, event_rank, backend, on_ones=False
):
    """The backend distribution built on stand-ins of its symbolic
    parameters, unvalidated (stand-ins hold no meaningful values); on ones
    where asked (``on_ones``) or where a stand-in fails a check the
    distribution makes anyway (NumPyro's Beta validates the Dirichlet it
    builds)."""

    def build(fill):
        values = tuple(fill(a) if isinstance(a, SymbolicArray) else a for a in params)
        return backend_distribution(
            dist_class, names, values, event_rank, validate=False
        )

    def ones(symbolic):
        dtype = backend.numpy_dtype(symbolic.dtype)
        return backend.from_stand_in(np.ones(symbolic.shape, dtype))

    if on_ones:
        return build(ones)
    try:
        return build(backend.stand_in_for)
    except Exception:  # noqa: BLE001 - retried on ones, which raise if invalid
        return build(ones)


def _unvalidated_distribution(arguments, params, backend, on_ones=False):
    """The backend distribution of a distribution op on stand-ins."""
    return stand_in_distribution(
        arguments["dist_class"],
        arguments["names"],
        params,
        arguments["event_rank"],
        backend,
        on_ones,
    )


def _distribution_log_prob_shape(arguments, backend):
    """The log density of a stand-in value under the unvalidated
    distribution of stand-in parameters; ``None`` (evaluate) if it fails."""
    *params, value = arguments["args"]
    if isinstance(value, SymbolicArray):
        value = backend.stand_in_for(value)
    try:
        dist = _unvalidated_distribution(arguments, params, backend)
        with np.errstate(all="ignore"):
            return backend.as_symbolic(dist.log_prob(value))
    except Exception:  # noqa: BLE001 - no rule: evaluation reports
        return None


def _distribution_sample_shape(arguments, backend):
    """``sample_shape + batch_shape + event_shape`` of the distribution
    built on stand-ins of its parameters (unvalidated: stand-ins hold no
    meaningful values); the dtype of one draw from it, taken with the
    backend's global random state restored afterwards (the caller's draws
    are unchanged). ``None`` (evaluate) if the stand-ins cannot be drawn
    from."""
    params, key = arguments["args"], ()
    if arguments["keyed"]:
        params, key = params[:-1], (backend.stand_in_for(params[-1]),)
    try:
        dist = _unvalidated_distribution(arguments, params, backend)
        with backend.preserved_random_state():
            try:
                draw = dist.sample(*key)
            except Exception:  # noqa: BLE001 - e.g. a zero total count
                dist = _unvalidated_distribution(arguments, params, backend, True)
                draw = dist.sample(*key)
    except Exception:  # noqa: BLE001 - no rule: evaluation reports
        return None
    shape = tuple(arguments["sample_shape"]) + tuple(dist.batch_shape)
    shape += tuple(dist.event_shape)
    return SymbolicArray(shape, backend.as_symbolic(draw).dtype)


def _full_like_shape(arguments, backend):
    """The prototype's shape and dtype (funsor's jax ``full_like`` fills a
    numpy array, which a jax tracer cannot become)."""
    prototype = arguments["prototype"]
    if not isinstance(prototype, SymbolicArray):
        return None
    return SymbolicArray(tuple(prototype.shape), prototype.dtype)


def _cat_shape(arguments, backend):
    """Parts of one dtype, joined along ``axis``; ``None`` (evaluate) for
    anything else. A rule: no array work at all, and torch's ``meta`` cat
    (for arguments too large for stand-ins) imports ``torch._dynamo`` on
    its first call, seconds of a process's first trace."""
    parts, axis = arguments["parts"], arguments["axis"]
    if not parts or not all(isinstance(p, SymbolicArray) for p in parts):
        return None
    first = parts[0]
    rank = len(first.shape)
    if rank == 0 or not -rank <= axis < rank:
        return None
    axis %= rank
    shape = list(first.shape)
    for part in parts[1:]:
        if part.dtype != first.dtype or len(part.shape) != rank:
            return None
        if any(a != b for i, (a, b) in enumerate(zip(part.shape, shape)) if i != axis):
            return None
        shape[axis] += part.shape[axis]
    return SymbolicArray(tuple(shape), first.dtype)


def _einsum_shape(arguments, backend):
    """Operands of one dtype and an explicit equation whose ellipses lead
    (funsor's Gaussians write ``...ij,...jk->...ik``); ``None`` (evaluate)
    for anything else, e.g. letters of unequal sizes, which broadcast."""
    operands, equation = arguments["operands"], arguments["equation"]
    if not operands or not all(isinstance(o, SymbolicArray) for o in operands):
        return None
    if len({o.dtype for o in operands}) != 1:
        return None
    inputs, arrow, output = equation.replace(" ", "").partition("->")
    specs = inputs.split(",")
    if not arrow or len(specs) != len(operands):
        return None
    if any("..." in spec[3:] for spec in specs + [output]):
        return None  # an ellipsis that does not lead
    sizes, batches = {}, []
    for spec, operand in zip(specs, operands):
        letters = spec.removeprefix("...")
        rank = len(operand.shape) - len(letters)
        if rank < 0 or (rank and not spec.startswith("...")):
            return None
        for letter, size in zip(letters, operand.shape[rank:]):
            if sizes.setdefault(letter, size) != size:
                return None
        batches.append(tuple(operand.shape[:rank]))
    try:
        batch = np.broadcast_shapes(*batches)
    except ValueError:
        return None
    letters = output.removeprefix("...")
    if len(set(letters)) != len(letters) or not set(letters) <= set(sizes):
        return None
    if not all(letter.isalpha() for letter in sizes):
        return None
    if batch and not output.startswith("..."):
        return None  # the ellipsis summed out
    shape = tuple(batch) + tuple(sizes[letter] for letter in letters)
    return SymbolicArray(shape, operands[0].dtype)


def _getslice_shape(arguments, backend):
    """Basic indexing (integers, slices of positive steps, ``None``,
    ``...``): the shape numpy gives a view of no data; ``None`` (evaluate)
    for anything else."""
    x, index = arguments["x"], arguments["index"]
    if not isinstance(x, SymbolicArray):
        return None
    parts = index if isinstance(index, tuple) else (index,)
    for part in parts:
        if isinstance(part, slice):
            if not all(
                v is None or (isinstance(v, int) and not isinstance(v, bool))
                for v in (part.start, part.stop, part.step)
            ) or (part.step is not None and part.step <= 0):
                return None
        elif not (
            part is None
            or part is Ellipsis
            or (isinstance(part, int) and not isinstance(part, bool))
        ):
            return None
    try:
        view = np.broadcast_to(np.zeros((), np.int8), tuple(x.shape))[index]
    except IndexError:
        return None
    return SymbolicArray(tuple(view.shape), x.dtype)


# Ops evaluated by rule on jax too: funsor's jax full_like fills a numpy
# array, which jax's eval_shape tracers cannot become.
_KEYED_RULES = {ops.FullLikeOp}

# Rules for ops whose evaluation on jax's tracers fails where a draw on
# concrete stand-ins works: NumPyro's samplers that need concrete parameters
# (Multinomial's total count, Binomial's and NegativeBinomial's loops).
_FALLBACK_RULES = {DistributionSampleOp: _distribution_sample_shape}

# Ops evaluated by rule (numpy, torch): random ops, whose draws use a global
# RNG there, and ops whose abstract evaluation is slow (torch evaluates on
# materialized stand-ins); a rule's ``None`` falls back to evaluation.
_RULES = {
    ops.RandnOp: _randn_shape,
    RandnWithKeyOp: _randn_shape,
    CategoricalSampleOp: _categorical_shape,
    DistributionSampleOp: _distribution_sample_shape,
    DistributionLogProbOp: _distribution_log_prob_shape,
    ops.CatOp: _cat_shape,
    ops.FullLikeOp: _full_like_shape,
    ops.EinsumOp: _einsum_shape,
    ops.GetsliceOp: _getslice_shape,
}
