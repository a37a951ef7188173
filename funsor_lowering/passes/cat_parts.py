"""Slices and gathers of large concatenations, taken from their parts.

funsor's Gaussian algebra lays out block matrices by concatenating blocks,
many of them zeros, and then slices or gathers the rows it eliminates and
keeps: ``x = cat([a, b], -1)`` then ``x[..., rows, :]``. Where ``x`` is large
(:data:`LARGE` elements or more) these rules (run by
:func:`~funsor_lowering.passes.pipeline.simplify`) select from the parts
instead, so the program copies only what it selects, autograd's backward
pass slices gradients where it would scatter them into a zero-filled array,
and zero blocks stay visible as ``new_zeros``:

- a slice of a ``cat`` that spans several parts (or slices other axes): the
  ``cat`` of the parts' slices;
- a gather (``getitem`` with a constant index vector) of a ``cat`` along
  another axis: the ``cat`` of the parts' gathers; along the ``cat`` axis,
  at positions that run through a few parts: the ``cat`` of their slices.

Always (they only drop work): a slice of ``new_zeros`` is a smaller
``new_zeros``; adjacent ``new_zeros`` parts of a ``cat`` are one.

Example::

    >>> import numpy as np
    >>> from funsor import ops
    >>> from funsor_lowering import trace_function
    >>> def rows(a):  # rows 250:350 of [[a], [0]]
    ...     block = ops.cat((a, ops.new_zeros(a, (300, 300))), -2)
    ...     return ops.getslice(block, (slice(250, 350),))
    >>> print(trace_function(rows, {"a": np.ones((300, 300))}))
    OpProgram(a: real[300,300]) on numpy:
      getslice: real[50,300] = getslice(a, index=slice(250, 300, 1))
      new_zeros: real[50,300] = new_zeros(a, shape=(50, 300))
      cat: real[100,300] = cat((getslice, new_zeros))
      return cat
"""

import math

import numpy as np
from funsor import ops

from ..ir.program import ValueType
from ..ops.extra_ops import getslice_op
from .basic_index import expand_index, is_int, is_whole, sliced_shape

# Concatenations this large (in elements) are sliced through their parts.
LARGE = 1 << 16

# The most parts a gather along the concatenation axis may become.
MAX_RUNS = 8


def slice_of_cat_parts(editor, index, cat, value_type):
    """``cat(parts)[index]`` as the ``cat`` of the parts' slices, for a
    large ``cat`` and a basic ``index`` taking a step-1 range (or all) of
    its axis; else ``None``."""
    types = _large_cat_types(editor, cat)
    if types is None or value_type is None:
        return None
    ndim = len(types[0].shape)
    axis = cat.op.defaults["axis"] % ndim
    parts = expand_index(index, ndim)
    if parts is None or any(p is None for p in parts) or is_int(parts[axis]):
        return None
    total = sum(t.shape[axis] for t in types)
    start, stop, step = parts[axis].indices(total)
    if step != 1 or stop <= start:
        return None
    pieces, offset = [], 0
    for ref, t in zip(cat.args, types):
        low, high = max(start, offset), min(stop, offset + t.shape[axis])
        if low < high:
            piece = list(parts)
            piece[axis] = slice(low - offset, high - offset, 1)
            pieces.append(_sliced(editor, ref, t, piece))
        offset += t.shape[axis]
    if len(pieces) < 2:
        return None  # within one part: cat_slices.slice_of_cat's case
    result_axis = sum(1 for p in parts[:axis] if not is_int(p))
    return _cat(editor, pieces, result_axis, value_type)


def gather_of_cat_parts(editor, gather, args, positions, value_type):
    """``getitem(cat(parts), c)`` (``gather``: the getitem op, ``args``: its
    refs, ``positions``: the value of the constant ``c``, a numpy int
    vector) as the ``cat`` of the parts' gathers (along another axis) or
    of their slices (along the ``cat`` axis, where ``positions`` run
    through at most :data:`MAX_RUNS` ranges of parts); else ``None``."""
    source, constant = args
    cat = editor.producer(source, ops.CatOp)
    types = _large_cat_types(editor, cat)
    if types is None or value_type is None:
        return None
    ndim = len(types[0].shape)
    axis = cat.op.defaults["axis"] % ndim
    dim = gather.defaults["offset"]
    if dim >= ndim:
        return None
    if dim != axis:
        pieces = []
        for ref, t in zip(cat.args, types):
            shape = list(t.shape)
            shape[dim] = len(positions)
            pieces.append(
                editor.emit(
                    gather,
                    (ref, constant),
                    False,
                    ValueType(tuple(shape), t.kind),
                )
            )
        return _cat(editor, pieces, axis, value_type)
    runs = _runs(positions, [t.shape[axis] for t in types])
    if runs is None or len(runs) > MAX_RUNS:
        return None
    pieces = []
    for k, low, high in runs:
        piece = [slice(None)] * ndim
        piece[axis] = slice(low, high, 1)
        pieces.append(_sliced(editor, cat.args[k], types[k], piece))
    return _cat(editor, pieces, axis, value_type)


def slice_of_zeros(editor, zeros, value_type):
    """A slice of ``new_zeros(x)``: ``new_zeros(x)`` of the slice's shape."""
    if value_type is None:
        return None
    op = ops.NewZerosOp(shape=tuple(value_type.shape))
    return editor.emit(op, zeros.args, False, value_type)


def merge_zero_parts(editor, cat, args, value_type):
    """``cat(args)`` with adjacent ``new_zeros`` parts (of one prototype)
    as one, else ``None``."""
    if value_type is None or not value_type.shape:
        return None
    axis = cat.defaults["axis"] % len(value_type.shape)
    merged, changed = [], False
    for ref in args:
        last = merged[-1] if merged else None
        zeros = _zeros_prototype(editor, ref)
        if zeros is not None and last is not None and last[1] is zeros:
            shape = list(last[2])
            shape[axis] += editor.value_type(ref).shape[axis]
            merged[-1] = (None, zeros, tuple(shape))
            changed = True
            continue
        shape = None if zeros is None else editor.value_type(ref).shape
        merged.append((ref, zeros, shape))
    if not changed:
        return None
    refs = []
    for ref, zeros, shape in merged:
        if ref is None:
            kind = value_type.kind
            op = ops.NewZerosOp(shape=shape)
            ref = editor.emit(op, (zeros,), False, ValueType(shape, kind))
        refs.append(ref)
    if len(refs) == 1:
        return refs[0]
    return editor.emit(cat, refs, True, value_type)


def _zeros_prototype(editor, ref):
    """The prototype of ``new_zeros`` ``ref`` (of known shape), else ``None``."""
    producer = editor.producer(ref, ops.NewZerosOp)
    if producer is None:
        return None
    if producer.packed or editor.value_type(ref) is None:
        return None
    return producer.args[0]


def _large_cat_types(editor, cat):
    """The value types of packed ``cat``'s parts (a ``cat`` operation, or
    ``None``) where it is large, else ``None``."""
    if cat is None or not cat.packed:
        return None
    types = [editor.value_type(a) for a in cat.args]
    if any(t is None or not t.shape for t in types):
        return None
    axis = cat.op.defaults["axis"] % len(types[0].shape)
    shape = list(types[0].shape)
    shape[axis] = sum(t.shape[axis] for t in types)
    return types if math.prod(shape) >= LARGE else None


def _sliced(editor, ref, ref_type, parts):
    """``ref[parts]`` (``parts``: one slice or int per dim), or ``ref``
    itself where ``parts`` take it whole."""
    if all(is_whole(p, n) for p, n in zip(parts, ref_type.shape)):
        return ref
    value_type = ValueType(sliced_shape(parts, ref_type.shape), ref_type.kind)
    return editor.emit(getslice_op(tuple(parts)), (ref,), False, value_type)


def _cat(editor, pieces, axis, value_type):
    return editor.emit(ops.CatOp(axis=axis), pieces, True, value_type)


def _runs(positions, sizes):
    """``positions`` (into the concatenation of parts of ``sizes``) as
    ``(part, start, stop)`` ranges in order, else ``None`` (out of bounds)."""
    total = sum(sizes)
    if not ((-total <= positions) & (positions < total)).all():
        return None  # the gather raises, as it should
    bounds = np.cumsum([0] + list(sizes))
    runs = []
    for position in (positions % total).tolist():
        k = int(np.searchsorted(bounds, position, side="right")) - 1
        local = position - int(bounds[k])
        if runs and runs[-1][0] == k and runs[-1][2] == local:
            runs[-1][2] = local + 1
        else:
            runs.append([k, local, local + 1])
        if len(runs) > MAX_RUNS:
            return None
    return [tuple(run) for run in runs]


__all__ = [
    "LARGE",
    "gather_of_cat_parts",
    "merge_zero_parts",
    "slice_of_cat_parts",
    "slice_of_zeros",
]
