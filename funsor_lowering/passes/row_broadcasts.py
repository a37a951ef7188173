"""Reductions of column broadcasts as reductions of row broadcasts.

A log-space chain step lowered by name adds the messages to each transition
as a column and reduces the rows, ``logsumexp(alpha[:, None] + trans[t],
0)``: a reshape, a slice, an add and a reduction per step. A hand-written
forward pass transposes the transitions once and adds the messages as a
row, ``logsumexp(alpha + trans_t[t], 1)``. Two rewrites give programs the
same form:

- :func:`row_reduction`: a reduction over the next-to-last axis of
  ``reshape(x, (n, 1)) + y`` (``x`` a vector, ``y`` of shape ``(..., n,
  m)``) as the reduction over the last axis of ``x + swap(y)``, where
  ``swap`` transposes the last two axes: no reshape;
- :func:`swap_of_slice`: ``swap(y[index])``, for an index of leading axes
  only, as ``swap(y)[index]``: the slices of one array share one transpose
  (common subexpression elimination).

Example::

    >>> import numpy as np
    >>> from funsor import ops
    >>> from funsor_lowering import trace_function
    >>> def forward(alpha, trans):
    ...     for t in range(3):
    ...         alpha = ops.logsumexp(alpha[:, None] + trans[t], 0)
    ...     return alpha
    >>> arrays = {"alpha": np.zeros(2), "trans": np.zeros((3, 2, 2))}
    >>> print(trace_function(forward, arrays))  # doctest: +ELLIPSIS
    OpProgram(alpha: real[2], trans: real[3,2,2]) on numpy:
      transpose: real[3,2,2] = transpose(trans, axis1=-1, axis2=-2)
      getslice: real[2,2] = getslice(transpose, index=...)
      add: real[2,2] = add(alpha, getslice)
      logsumexp: real[2] = logsumexp(add, axis=1)
      getslice_1: real[2,2] = getslice(transpose, index=...)
      add_1: real[2,2] = add(logsumexp, getslice_1)
      logsumexp_1: real[2] = logsumexp(add_1, axis=1)
      getslice_2: real[2,2] = getslice(transpose, index=...)
      add_2: real[2,2] = add(logsumexp_1, getslice_2)
      logsumexp_2: real[2] = logsumexp(add_2, axis=1)
      return logsumexp_2
"""

from funsor import ops

from ..ir.program import ValueType
from ..ops.extra_ops import getslice_op
from .qr_algebra import SWAP_LAST_TWO

# Reductions with (axis, keepdims) parameters whose result does not depend
# on the layout of the reduced axis.
ROW_REDUCTIONS = (ops.LogsumexpOp, ops.SumOp)


def row_reduction(editor, op, args, value_type, add_read_once):
    """The reduction ``op`` of ``args[0]`` (read only here where
    ``add_read_once``) over the last axis of a row broadcast, where it
    reduces the next-to-last axis of a column broadcast; else ``None``."""
    axis, keepdims = op.defaults.get("axis"), op.defaults.get("keepdims")
    summed = editor.value_type(args[0])
    if keepdims or not isinstance(axis, int) or summed is None or value_type is None:
        return None
    rank = len(summed.shape)
    if rank < 2 or axis % rank != rank - 2 or not add_read_once:
        return None
    add = editor.producer(args[0], ops.AddOp)
    if add is None or add.packed or len(add.args) != 2:
        return None
    n, m = summed.shape[-2:]
    for k in (0, 1):
        vector, other = _column(editor, add.args[k], n), add.args[1 - k]
        other_type = editor.value_type(other)
        if vector is None or other_type is None or other_type.shape != summed.shape:
            continue
        swapped_shape = summed.shape[:-2] + (m, n)
        swapped = editor.emit(
            SWAP_LAST_TWO, [other], False, ValueType(swapped_shape, other_type.kind)
        )
        terms = [vector, swapped] if k == 0 else [swapped, vector]
        rows = editor.emit(ops.add, terms, False, ValueType(swapped_shape, summed.kind))
        reduce = type(op)(axis=rank - 1, keepdims=False)
        return editor.emit(reduce, [rows], False, value_type)
    return None


def _column(editor, ref, n):
    """``x`` where ``ref`` is ``reshape(x, (n, 1))`` of a vector ``x``."""
    producer = editor.producer(ref, ops.ReshapeOp)
    if producer is None or producer.packed:
        return None
    vector = editor.value_type(producer.args[0])
    shape = tuple(producer.op.defaults["shape"])
    if vector is None or vector.shape != (n,) or shape != (n, 1):
        return None
    return producer.args[0]


def swap_of_slice(editor, args, value_type):
    """``swap(y)[index]`` for ``swap(y[index])`` (``args[0]`` is
    ``y[index]``) where the index leaves the last two axes whole; else
    ``None``."""
    producer = editor.producer(args[0], ops.GetsliceOp)
    if producer is None or producer.packed or value_type is None:
        return None
    source = editor.value_type(producer.args[0])
    index = producer.op.defaults["index"]
    if source is None or not _leading_only(index, source.shape):
        return None
    swapped_shape = source.shape[:-2] + source.shape[:-3:-1]
    swapped = editor.emit(
        SWAP_LAST_TWO,
        producer.args,
        False,
        ValueType(swapped_shape, source.kind),
    )
    # the entries of the leading axes only: a whole slice of a last axis,
    # such as 0:50 of 50, would take part of the other after the swap
    entries = index if isinstance(index, tuple) else (index,)
    leading = tuple(entries[: len(source.shape) - 2])
    if not leading:
        return swapped
    return editor.emit(getslice_op(leading), [swapped], False, value_type)


def _leading_only(index, shape):
    """Whether a basic ``index`` of an array of ``shape`` selects along
    axes before the last two only (ints and slices, the last two whole)."""
    entries = index if isinstance(index, tuple) else (index,)
    if len(shape) < 3 or len(entries) > len(shape):
        return False
    for axis, entry in enumerate(entries):
        if axis >= len(shape) - 2:
            if not (
                isinstance(entry, slice)
                and entry.indices(shape[axis]) == (0, shape[axis], 1)
            ):
                return False
        elif not isinstance(entry, (int, slice)) or isinstance(entry, bool):
            return False
    return True
