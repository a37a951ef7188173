"""Op applications: Unary, Binary, Finitary, and Tuple.

Arguments with different named batch inputs are aligned by name (funsor's
``align_tensors``, resolved at compile time); ops with axis parameters are
rewritten by :func:`~funsor_lowering.ops.batching.batch_op` to skip batch axes.
"""

from funsor import ops
from funsor.ops import BinaryOp, FinitaryOp, GetsliceOp, MatmulOp, UnaryOp
from funsor.terms import Binary, Finitary, Funsor, Tuple, Unary

from ...errors import UnsupportedTermError
from ...ops.batching import batch_op, is_pointwise
from ...ops.shapes import broadcast_shape
from ..driver import Lowered, LoweredTuple, lowering_rule
from ..layout import (
    align,
    align_expanded,
    apply,
    apply_finitary,
    combine,
    reshape,
    union_batch,
)

# Reductions that leave a single value unchanged.
_IDEMPOTENT_ON_SCALARS = (
    ops.SumOp,
    ops.ProdOp,
    ops.LogsumexpOp,
    ops.AmaxOp,
    ops.AminOp,
    ops.AllOp,
    ops.AnyOp,
    ops.MeanOp,
)


def require_values(term, *args):
    for arg in args:
        if isinstance(arg, LoweredTuple):
            raise UnsupportedTermError(term, "a Tuple used as an op argument")


@lowering_rule(Unary, UnaryOp, Funsor)
def lower_unary(term, op, arg):
    require_values(term, arg)
    if isinstance(op, _IDEMPOTENT_ON_SCALARS) and term.output == term.arg.output:
        return arg  # reduces no axis (a scalar event): backends disagree on axis=()
    batched = batch_op(op, arg.batch_shape, len(arg.event_shape))
    if batched is None:
        raise UnsupportedTermError(
            term, f"no batch rule for {op!r} (see funsor_lowering/batching.py)"
        )
    return Lowered(apply(batched, arg.expr), arg.batch)


@lowering_rule(Binary, BinaryOp, Funsor, Funsor)
def lower_binary(term, op, lhs, rhs):
    """Pointwise binary ops broadcast by name over batch inputs and by
    position (numpy rules) over event shapes."""
    require_values(term, lhs, rhs)
    if not (lhs.batch or rhs.batch):
        return Lowered(apply(op, lhs.expr, rhs.expr))
    if not is_pointwise(op):
        raise UnsupportedTermError(
            term, f"no batch rule for binary {op!r} (see funsor_lowering/batching.py)"
        )
    return combine(op, lhs, rhs)


@lowering_rule(Binary, MatmulOp, Funsor, Funsor)
def lower_matmul(term, op, lhs, rhs):
    """Matrix products broadcast over batch axes; vector operands get a
    unit axis (numpy's matmul rules) that is dropped again afterwards."""
    require_values(term, lhs, rhs)
    if not (lhs.batch or rhs.batch):
        return Lowered(apply(op, lhs.expr, rhs.expr))
    batch = union_batch(lhs, rhs)
    left, right = lhs.event_shape, rhs.event_shape
    x = align(lhs, batch, implicit_leading=False)
    y = align(rhs, batch, implicit_leading=False)
    if len(left) == 1:
        x = reshape(x, x.output.shape[:-1] + (1,) + left)
        left = (1,) + left
    if len(right) == 1:
        y = reshape(y, y.output.shape + (1,))
        right = right + (1,)
    # Pad the event parts to one rank so leading (batch) axes line up.
    rank = max(len(left), len(right))
    nb = len(batch)
    x = reshape(x, x.output.shape[:nb] + (1,) * (rank - len(left)) + left)
    y = reshape(y, y.output.shape[:nb] + (1,) * (rank - len(right)) + right)
    result = apply(op, x, y)
    shape = tuple(d.size for d in batch.values()) + term.output.shape
    return Lowered(reshape(result, shape), batch)


def _unbatched(term, op, args):
    """``op`` of ``args`` where none has batch inputs, else ``None``."""
    require_values(term, *args)
    if any(arg.batch for arg in args):
        return None
    return Lowered(apply_finitary(op, tuple(arg.expr for arg in args)))


@lowering_rule(Finitary, FinitaryOp, tuple)
def lower_finitary(term, op, args):
    unbatched = _unbatched(term, op, args)
    if unbatched is not None:
        return unbatched
    batch = union_batch(*args)
    event_shape = broadcast_shape(*(arg.event_shape for arg in args))
    exprs = [align_expanded(a, batch, event_shape) for a in args]
    return _batched_finitary(term, op, exprs, batch, len(event_shape))


@lowering_rule(Finitary, ops.CatOp, tuple)
def lower_cat(term, op, args):
    unbatched = _unbatched(term, op, args)
    if unbatched is not None:
        return unbatched
    # cat joins along one axis: other axes must agree, not broadcast.
    batch = union_batch(*args)
    exprs = [align_expanded(a, batch, a.event_shape) for a in args]
    event_rank = max(len(a.event_shape) for a in args)
    return _batched_finitary(term, op, exprs, batch, event_rank)


def _batched_finitary(term, op, exprs, batch, event_rank):
    batched = batch_op(op, tuple(d.size for d in batch.values()), event_rank)
    if batched is None:
        raise UnsupportedTermError(term, f"no batch rule for {op!r}")
    return Lowered(apply_finitary(batched, exprs), batch)


@lowering_rule(Finitary, ops.EinsumOp, tuple)
def lower_einsum(term, op, args):
    unbatched = _unbatched(term, op, args)
    if unbatched is not None:
        return unbatched
    batch = union_batch(*args)
    return Lowered(_batched_einsum(op, args, batch), batch)


def _batched_einsum(op, args, batch):
    inputs, output = op.defaults["equation"].split("->")
    used = set(op.defaults["equation"])
    letters = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"]
    batch_letters = "".join([c for c in letters if c not in used][: len(batch)])
    equation = ",".join(batch_letters + i for i in inputs.split(","))
    equation += "->" + batch_letters + output
    exprs = [align_expanded(a, batch, a.event_shape) for a in args]
    return apply_finitary(ops.EinsumOp(equation=equation), exprs)


@lowering_rule(Tuple, tuple)
def lower_tuple(term, args):
    return LoweredTuple(args)


@lowering_rule(Unary, GetsliceOp, Tuple)
def lower_getslice_tuple(term, op, arg):
    """``Tuple(...)[k]`` selects an item at compile time."""
    index = op.defaults["index"]
    if not isinstance(index, int):
        raise UnsupportedTermError(term, f"Tuple indexed by {index!r}, expected an int")
    return arg.items[index]
