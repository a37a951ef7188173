"""Positional layouts of lowered values, decided at compile time.

A :class:`~funsor_lowering.lowering.driver.Lowered` value keeps its named batch
inputs as leading axes. Before two values meet in an op, each is *aligned*:
its batch axes permuted into a common order, size-1 axes inserted for batch
names it lacks, and its event shape padded on the left, exactly as funsor's
``align_tensors`` does at run time, but emitted once as ``ops.permute`` /
``ops.reshape`` / ``ops.expand``. Layout ops on constants are computed at
compile time instead of emitted.

Example::

    >>> from collections import OrderedDict
    >>> from funsor.domains import Bint, Reals
    >>> from funsor.terms import Variable
    >>> from funsor_lowering.lowering.driver import Lowered
    >>> f = Lowered(Variable("f", Reals[3, 2]), OrderedDict(i=Bint[3]))
    >>> align(f, ("j", "i"), event_rank=2).output  # j implicit, event padded
    Reals[3,1,2]
"""

import functools
from collections import OrderedDict

import funsor.tensor
import numpy as np
from funsor import ops
from funsor.tensor import Tensor
from funsor.terms import Binary, Finitary, Number, Unary

from ..backends import array_backend
from ..errors import IntermediateTooLargeError
from ..ops.extra_ops import getslice_op
from ..ops.shapes import find_domain
from .driver import Lowered, build


def is_constant(expr):
    """Whether a lowered funsor is a constant (its data is known)."""
    return isinstance(expr, (Tensor, Number)) and not expr.inputs


def constant(data, dtype):
    """A lowered constant holding ``data``."""
    if isinstance(data, (bool, int, float)):
        return build(Number, data, dtype)
    return build(Tensor, data, (), dtype)


def positions(indices):
    """A lowered constant: the integer array ``indices`` (nested lists or a
    numpy array) on the current backend, bounded by its largest entry."""
    data = np.asarray(indices, dtype=np.int64)
    backend = array_backend(funsor.get_backend())
    return constant(backend.from_numpy(data), int(data.max()) + 1)


def apply(op, *args):
    """``op(*args)`` on lowered funsors: a Unary or Binary term, or a
    constant computed now when every argument is a constant."""
    if all(is_constant(a) for a in args):
        dtype = find_domain(op, *(a.output for a in args)).dtype
        return constant(op(*(a.data for a in args)), dtype)
    if len(args) == 1:
        return _checked_size(build(Unary, op, args[0]))
    return _checked_size(build(Binary, op, *args))


def apply_finitary(op, args):
    """``op(args)`` for a finitary op (``cat``, ``stack``, ``einsum``); these
    take arrays only, so Number arguments become 0-d arrays."""
    args = tuple(_as_array(a) for a in args)
    if all(is_constant(a) for a in args):
        dtype = find_domain(op, tuple(a.output for a in args)).dtype
        return constant(op(tuple(a.data for a in args)), dtype)
    return _checked_size(build(Finitary, op, args))


# The largest array a program may compute, in elements (2 GiB of float64).
# The lowering plans sum-products so that no step needs more; a term that
# cannot be computed without a larger array raises instead of dying at run
# time.
MAX_INTERMEDIATE_ELEMENTS = 1 << 28


def _checked_size(expr):
    shape = expr.output.shape
    size = 1
    for n in shape:
        size *= n
    if size > MAX_INTERMEDIATE_ELEMENTS:
        raise IntermediateTooLargeError(shape, MAX_INTERMEDIATE_ELEMENTS)
    return expr


def _as_array(expr):
    """A Number constant as a 0-d backend array, so layout ops apply to it."""
    if isinstance(expr, Number):
        prototype = funsor.tensor.get_default_prototype()
        return constant(ops.new_full(prototype, (), expr.data), expr.dtype)
    return expr


@functools.lru_cache(maxsize=4096)
def _parametrized(op_type, params):
    return op_type(**dict(params))


def parametrized(op_type, **params):
    """``op_type(**params)`` (funsor cons-hashes parametrized ops, at ~16 us
    a construction): cached, for hashable parameter values."""
    return _parametrized(op_type, tuple(sorted(params.items())))


def _is_op(expr, op_type):
    return isinstance(expr, Unary) and isinstance(expr.op, op_type)


def permute(expr, dims):
    """``ops.permute``, skipped when the identity, composed with an inner
    permute."""
    dims = tuple(dims)
    if _is_op(expr, ops.PermuteOp):
        inner = expr.op.defaults["dims"]
        expr, dims = expr.arg, tuple(inner[d] for d in dims)
    if dims == tuple(range(len(dims))):
        return expr
    return apply(parametrized(ops.PermuteOp, dims=dims), expr)


def reshape(expr, shape):
    """``ops.reshape``, skipped when the shape is unchanged, replacing an
    inner reshape, and merged into an inner ``getslice`` when it only adds
    unit axes (``x[2]`` then ``(5, 5, 1)`` becomes ``x[2, :, :, None]``)."""
    shape = tuple(shape)
    if _is_op(expr, ops.ReshapeOp):
        expr = expr.arg
    if expr.output.shape == shape:
        return expr
    if _is_op(expr, ops.GetsliceOp):
        tokens = _unit_axis_tokens(expr.output.shape, shape)
        index = _merge_index(expr.op.defaults["index"], expr.arg.output.shape, tokens)
        if index is not None:
            return apply(getslice_op(index), expr.arg)
    return apply(parametrized(ops.ReshapeOp, shape=shape), _as_array(expr))


def _unit_axis_tokens(old, new):
    """How ``new`` arises from ``old`` by inserting unit axes: a list of
    ``"keep"`` / ``"new"`` per axis of ``new``, or ``None``."""
    tokens, i = [], 0
    for size in new:
        if i < len(old) and old[i] == size:
            tokens.append("keep")
            i += 1
        elif size == 1:
            tokens.append("new")
        else:
            return None
    return tokens if i == len(old) else None


def _merge_index(index, source_shape, tokens):
    """The basic index equal to ``x[index]`` followed by inserting unit axes
    per ``tokens``; ``None`` unless ``index`` is ints and slices only."""
    if tokens is None:
        return None
    index = index if isinstance(index, tuple) else (index,)
    if not all(isinstance(e, (int, slice)) for e in index) or len(index) > len(
        source_shape
    ):
        return None
    entries = list(index) + [slice(None)] * (len(source_shape) - len(index))
    merged, pending = [], list(tokens)
    for entry in entries:
        if isinstance(entry, int):
            merged.append(entry)
            continue
        while pending and pending[0] == "new":
            merged.append(None)
            pending.pop(0)
        if not pending:
            return None
        pending.pop(0)  # "keep": this slice's axis
        merged.append(entry)
    if any(t != "new" for t in pending):
        return None
    merged += [None] * len(pending)
    return tuple(merged)


def expand(expr, shape):
    shape = tuple(shape)
    if expr.output.shape == shape:
        return expr
    return apply(parametrized(ops.ExpandOp, shape=shape), _as_array(expr))


def union_batch(*lowereds):
    """The batch inputs of several lowered values, in order of appearance."""
    batch = OrderedDict()
    for lowered in lowereds:
        for name, domain in lowered.batch.items():
            if batch.setdefault(name, domain) != domain:
                raise ValueError(f"batch input {name!r} has two domains")
    return batch


def align(lowered, names, event_rank=None, *, implicit_leading=True):
    """``lowered.expr`` laid out as the batch ``names`` (size 1 where
    ``lowered`` lacks a name) followed by its event shape, padded on the
    left with size-1 axes to ``event_rank``; leading size-1 axes that stand
    for missing names or padding are left implicit (numpy broadcasting)."""
    own = list(lowered.batch)
    missing = [name for name in own if name not in names]
    if missing:
        raise ValueError(f"cannot align batch {tuple(own)} to {tuple(names)}")
    event_shape = lowered.event_shape
    if event_rank is None:
        event_rank = len(event_shape)
    order = [own.index(name) for name in names if name in lowered.batch]
    nb = len(own)
    expr = permute(lowered.expr, order + list(range(nb, nb + len(event_shape))))
    # (size, synthesized) per axis; leading synthesized size-1 axes are left
    # implicit, as broadcasting adds them.
    axes = [
        (lowered.batch[n].size, False) if n in lowered.batch else (1, True)
        for n in names
    ]
    axes += [(1, True)] * (event_rank - len(event_shape))
    axes += [(n, False) for n in event_shape]
    while implicit_leading and axes and axes[0][1]:
        axes.pop(0)
    return reshape(expr, tuple(size for size, _ in axes))


def combine(op, lhs, rhs):
    """``op(lhs, rhs)`` for lowered values, broadcasting by name (laid out in
    the order of the operand with more batch axes, which then needs no
    permute)."""
    first, second = (rhs, lhs) if len(rhs.batch) > len(lhs.batch) else (lhs, rhs)
    batch = union_batch(first, second)
    rank = max(len(lhs.event_shape), len(rhs.event_shape))
    return Lowered(apply(op, align(lhs, batch, rank), align(rhs, batch, rank)), batch)


def align_expanded(lowered, batch, event_shape):
    """``lowered.expr`` laid out as exactly ``batch`` + ``event_shape``
    (materialized with ``ops.expand`` where it broadcasts)."""
    expr = align(lowered, tuple(batch), len(event_shape))
    shape = tuple(d.size for d in batch.values()) + tuple(event_shape)
    return expand(expr, shape)
