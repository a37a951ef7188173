"""Batch rules: how an op written for event-shaped values applies to values
with leading batch axes.

``batch_op(op, batch_shape, event_rank)`` returns an op that, applied to an
array of shape ``batch_shape + event_shape`` (``len(event_shape) ==
event_rank``), computes ``op`` on every event slice, or ``None`` when no rule
is known. Ops acting elementwise or on trailing axes need no change; ops with
axis parameters get them rewritten relative to the end (negative), so the
leading batch axes are never touched.

Example::

    >>> from funsor import ops
    >>> batch_op(ops.SumOp(axis=0), batch_shape=(5,), event_rank=2)
    ops.sum
    >>> batch_op(ops.SumOp(axis=0), (5,), 2).defaults
    {'axis': -2, 'keepdims': False}
"""

import functools

from funsor import domains, ops

from .extra_ops import SplitKeyOp, getslice_op
from .shapes import package_rule

# funsor's shape rules for ops that act elementwise (or on trailing axes
# only, like cholesky) and keep leading axes as they are.
_POINTWISE_RULES = tuple(
    getattr(domains, name)
    for name in (
        "_find_domain_pointwise_unary_generic",
        "_find_domain_log_exp",
        "_find_domain_pointwise_binary_generic",
        "_find_domain_associative_generic",
        "_find_domain_comparison",
        "_find_domain_floordiv",
        "_find_domain_mod",
    )
    if hasattr(domains, name)
)
# Op parameters that name axes; an op with any of these needs its own rule.
AXIS_PARAMS = frozenset(
    {"axis", "dim", "dims", "dim1", "dim2", "axis1", "axis2", "shape", "index"}
)


# Matrix ops whose operands' leading (batch) axes broadcast, as numpy's
# broadcasting does for pointwise ops.
_BATCHED_MATRIX_OPS = (ops.TriangularSolveOp,)


def is_pointwise(op):
    """Whether ``op`` broadcasts over leading axes with no axis parameters."""
    if isinstance(op, _BATCHED_MATRIX_OPS):
        return True
    if package_rule(type(op)) is not None:
        return False
    rule = domains.find_domain.dispatch(type(op))
    return rule in _POINTWISE_RULES and not (AXIS_PARAMS & set(op.defaults))


@functools.singledispatch
def batch_op(op, batch_shape, event_rank):
    return op if is_pointwise(op) else None


@batch_op.register(SplitKeyOp)
def _batch_split_key(op, batch_shape, event_rank):
    return None if batch_shape else op  # one key, never batched


def _negative(axis, rank):
    if not -rank <= axis < rank:
        raise ValueError(f"axis {axis} out of range for rank {rank}")
    return axis - rank if axis >= 0 else axis


@batch_op.register(ops.ReductionOp)
@batch_op.register(ops.ArgmaxOp)
@batch_op.register(ops.ArgminOp)
def _batch_reduction(op, batch_shape, event_rank):
    params = dict(op.defaults)
    axis = params.get("axis")
    if axis is None:
        if isinstance(op, (ops.ArgmaxOp, ops.ArgminOp)) and event_rank != 1:
            return None  # argmax over a flattened event has no batched form
        axis = tuple(range(-event_rank, 0))
    elif isinstance(axis, int):
        axis = (_negative(axis, event_rank),)
    else:
        axis = tuple(_negative(a, event_rank) for a in axis)
    if len(axis) == 1:
        axis = axis[0]  # a plain int is what every backend's reductions accept
    params["axis"] = axis
    return type(op)(**params)


@batch_op.register(ops.GetsliceOp)
def _batch_getslice(op, batch_shape, event_rank):
    index = op.defaults["index"]
    if not isinstance(index, tuple):
        index = (index,)
    return getslice_op((slice(None),) * len(batch_shape) + index)


@batch_op.register(ops.ReshapeOp)
def _batch_reshape(op, batch_shape, event_rank):
    return ops.ReshapeOp(shape=tuple(batch_shape) + tuple(op.defaults["shape"]))


@batch_op.register(ops.ExpandOp)
def _batch_expand(op, batch_shape, event_rank):
    shape = tuple(op.defaults["shape"])
    if len(shape) != event_rank:
        return None  # new leading event axes would land between batch axes
    return ops.ExpandOp(shape=tuple(batch_shape) + shape)


@batch_op.register(ops.PermuteOp)
def _batch_permute(op, batch_shape, event_rank):
    nb = len(batch_shape)
    dims = tuple(range(nb)) + tuple(nb + (d % event_rank) for d in op.defaults["dims"])
    return ops.PermuteOp(dims=dims)


# Ops whose axis parameters count from the end once made negative, with the
# rank each counts in beyond the event rank (unsqueeze and stack add an axis).
_AXIS_PARAMS = {
    ops.TransposeOp: {"axis1": 0, "axis2": 0},
    ops.FlipOp: {"axis": 0},
    ops.DiagonalOp: {"dim1": 0, "dim2": 0},
    ops.CatOp: {"axis": 0},
    ops.UnsqueezeOp: {"dim": 1},
    ops.StackOp: {"dim": 1},
}


def _batch_negative_axes(op, batch_shape, event_rank):
    params = dict(op.defaults)
    for name, extra in _AXIS_PARAMS[type(op)].items():
        axis, rank = params[name], event_rank + extra
        if isinstance(axis, tuple):
            params[name] = tuple(_negative(a, rank) for a in axis)
        else:
            params[name] = _negative(axis, rank)
    return type(op)(**params)


for _op_type in _AXIS_PARAMS:
    batch_op.register(_op_type)(_batch_negative_axes)
