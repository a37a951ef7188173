"""Concatenations of slices, simplified.

funsor's Gaussian algebra aligns block matrices by slicing them into their
variables' blocks and concatenating the blocks in a new order, often
unchanged: ``cat([x[0:2], x[2:4]])`` is ``x[0:4]``, and
``cat([x[4:6], x[0:4]])`` is one gather ``x[[4, 5, 0, 1, 2, 3]]``.
These rules (run by :func:`~funsor_lowering.passes.pipeline.simplify`)
compute such slices and concatenations with fewer operations:

- a slice of a ``cat`` within one part is a slice of that part;
- adjacent parts slicing consecutive ranges of one array are one slice;
- a concatenation of slices of one array (taking its other dims whole) is
  one ``getitem`` with a constant index array; a slice of such a gather is
  a gather of fewer positions, or a slice where they are a range.

Example::

    >>> import numpy as np
    >>> from funsor import ops
    >>> from funsor_lowering.ops.extra_ops import getslice_op
    >>> from funsor_lowering.ir.program import OpProgram, Operation, ValueType
    >>> from funsor_lowering.passes.pipeline import optimize
    >>> rows = [getslice_op((slice(4, 6),)), getslice_op((slice(0, 2),)),
    ...         getslice_op((slice(2, 4),))]
    >>> p = OpProgram(
    ...     [],
    ...     {"x": ValueType((6, 3), "real")},
    ...     [Operation(rows[0], (0,)), Operation(rows[1], (0,)),
    ...      Operation(rows[2], (0,)), Operation(ops.CatOp(axis=0), (1, 2, 3), True)],
    ...     4,
    ...     value_types=[ValueType((2, 3), "real")] * 3 + [ValueType((6, 3), "real")],
    ... )
    >>> print(optimize(p))
    OpProgram(x: real[6,3]) on numpy:
      c0: int[6] = array
      getitem: real[6,3] = getitem(x, c0)
      return getitem
"""

import numpy as np
from funsor import ops

from ..ir.program import ValueType, array_backend
from ..ops.extra_ops import getslice_op
from .basic_index import (
    canonical_index,
    expand_index,
    is_int,
    is_whole,
    sliced_shape,
    unit_slices,
)
from .cat_parts import gather_of_cat_parts


class _Piece:
    """A part of a concatenation that is ``source[index]``, slicing
    ``source``'s dim ``dim`` (the concatenation axis) as ``start:stop``."""

    __slots__ = ("source", "parts", "dim", "start", "stop")

    def __init__(self, source, parts, dim, start, stop):
        self.source, self.parts, self.dim = source, parts, dim
        self.start, self.stop = start, stop

    def follows(self, other):
        """Whether this piece continues ``other``'s range of one array."""
        same = self.source == other.source and self.dim == other.dim
        rest = [p for k, p in enumerate(self.parts) if k != self.dim]
        other_rest = [p for k, p in enumerate(other.parts) if k != other.dim]
        return same and rest == other_rest and self.start == other.stop

    def emit(self, editor):
        """Emit ``source[index]`` for this piece's range."""
        parts = list(self.parts)
        parts[self.dim] = slice(self.start, self.stop, 1)
        source_type = editor.value_type(self.source)
        value_type = ValueType(sliced_shape(parts, source_type.shape), source_type.kind)
        return editor.emit(getslice_op(tuple(parts)), (self.source,), False, value_type)


def _piece(editor, ref, axis):
    """``ref`` as a :class:`_Piece` along result ``axis``, or ``None``."""
    producer = editor.producer(ref, ops.GetsliceOp)
    if producer is None:
        return None
    (source,) = producer.args
    source_type = editor.value_type(source)
    if source_type is None:
        return None
    shape = source_type.shape
    parts = expand_index(producer.op.defaults["index"], len(shape))
    if parts is not None:
        parts = unit_slices(parts, shape)  # x[k, None] is x[k:k + 1]
    if parts is None or any(p is None for p in parts):
        return None
    kept = [k for k, p in enumerate(parts) if not is_int(p)]
    if axis >= len(kept):
        return None
    dim = kept[axis]
    start, stop, step = parts[dim].indices(shape[dim])
    if step != 1 or stop <= start:
        return None
    parts = [p % shape[k] if is_int(p) else p for k, p in enumerate(parts)]
    for k, p in enumerate(parts):  # other slices in a canonical form
        if isinstance(p, slice) and k != dim:
            parts[k] = slice(*p.indices(shape[k]))
    return _Piece(source, parts, dim, start, stop)


def simplify_cat(editor, cat, args, value_type, backend):
    """A ref equal to ``cat(args)`` (``cat``: the op) computed with fewer
    operations, or ``None``."""
    if value_type is None or not value_type.shape:
        return None
    axis = cat.defaults["axis"] % len(value_type.shape)
    merged = []  # (ref, piece or None)
    for ref in args:
        piece = _piece(editor, ref, axis)
        last = merged[-1][1] if merged else None
        if piece is not None and last is not None and piece.follows(last):
            last.stop = piece.stop
            merged[-1] = (None, last)  # to be emitted
            continue
        merged.append((ref, piece))
    pieces = [piece for _, piece in merged]
    if len(merged) > 1 and all(p is not None for p in pieces):
        gathered = _gather(editor, pieces, value_type, backend)
        if gathered is not None:
            return gathered
    if len(merged) == len(args):
        return None
    refs = [ref if ref is not None else piece.emit(editor) for ref, piece in merged]
    if len(refs) == 1:
        return refs[0]
    return editor.emit(cat, refs, True, value_type)


def _gather(editor, pieces, value_type, backend):
    """``cat`` of slices of one array taking its other dims whole: one
    ``getitem`` with a constant index, or ``None``."""
    source, dim = pieces[0].source, pieces[0].dim
    shape = editor.value_type(source).shape
    for piece in pieces:
        if piece.source != source or piece.dim != dim:
            return None
        for k, p in enumerate(piece.parts):
            if k != dim and not is_whole(p, shape[k]):
                return None
    index = np.concatenate([np.arange(p.start, p.stop) for p in pieces])
    constant = editor.add_constant(backend.from_numpy(index.astype(np.int64)))
    return editor.emit(ops.GetitemOp(offset=dim), (source, constant), False, value_type)


def slice_of_cat(editor, index, cat, value_type):
    """``cat(parts)[index]`` as ``part[index']`` where ``index`` takes a
    range of the concatenation axis within one part."""
    types = [editor.value_type(a) for a in cat.args]
    if any(t is None for t in types):
        return None
    shape = list(types[0].shape)
    axis = cat.op.defaults["axis"] % len(shape)
    parts = expand_index(index, len(shape))
    if parts is None or any(p is None for p in parts):
        return None
    total = sum(t.shape[axis] for t in types)
    part = parts[axis]
    if is_int(part):
        first = part % total if -total <= part < total else None
        last = first
    else:
        start, stop, step = part.indices(total)
        if step < 0:
            return None
        taken = range(start, stop, step)
        first, last = (taken[0], taken[-1]) if taken else (None, None)
    if first is None:
        return None
    offset = 0
    for ref, t in zip(cat.args, types):
        size = t.shape[axis]
        if offset <= first and last < offset + size:
            if is_int(part):
                parts[axis] = first - offset
            else:
                parts[axis] = slice(first - offset, last - offset + 1, step)
            # in the one spelling simplify gives slices (all of a part: itself)
            index = canonical_index(tuple(parts), t.shape)
            if index == () and value_type is not None and t.shape == value_type.shape:
                return ref
            index = index or tuple(parts)
            return editor.emit(getslice_op(index), (ref,), False, value_type)
        offset += size
    return None


def slice_of_gather(editor, index, gather, value_type, backend):
    """``getitem(x, c)[index]`` (``gather``: the getitem, ``c`` a constant
    index vector) where ``index`` slices only the gathered dim: one
    ``getitem`` with ``c`` sliced, or a slice of ``x`` (new axes kept)
    where that counts up evenly or takes one member; else ``None``."""
    if value_type is None:
        return None
    source, positions = gather.args
    positions = _index_vector(editor, positions, backend)
    source_type = editor.value_type(source)
    if positions is None or source_type is None:
        return None
    dim = gather.op.defaults["offset"]
    shape = list(source_type.shape)
    if dim >= len(shape):
        return None
    shape[dim] = len(positions)
    parts = expand_index(index, len(shape))
    if parts is None:
        return None
    axes = [k for k, part in enumerate(parts) if part is not None]  # of x
    if len(axes) != len(shape):
        return None
    if not all(
        is_whole(parts[a], n) for k, (a, n) in enumerate(zip(axes, shape)) if k != dim
    ):
        return None
    part = parts[axes[dim]]
    if is_int(part):  # one member: x at its position
        size = source_type.shape[dim]
        if not -len(positions) <= part < len(positions):
            return None
        if not -size <= positions[part] < size:
            return None  # out of bounds: the gather raises, as it should
        parts[axes[dim]] = int(positions[part]) % size
        return editor.emit(getslice_op(tuple(parts)), (source,), False, value_type)
    if not isinstance(part, slice):
        return None
    taken = positions[part] % source_type.shape[dim]
    strided = as_slice(taken)
    if strided is not None:
        parts[axes[dim]] = strided
        return editor.emit(getslice_op(tuple(parts)), (source,), False, value_type)
    if len(parts) != len(shape):  # new axes: a gather and a reshape, as now
        return None
    constant = editor.add_constant(backend.from_numpy(taken.astype(np.int64)))
    return editor.emit(gather.op, (source, constant), False, value_type)


def as_slice(positions):
    """The slice taking ``positions`` (non-negative ints) in order, where
    they count up evenly, else ``None``.

    >>> as_slice(np.array([3, 5, 7])), as_slice(np.array([3, 4, 6]))
    (slice(3, 8, 2), None)
    """
    if not len(positions):
        return None
    steps = np.diff(positions)
    step = int(steps[0]) if len(steps) else 1
    if step <= 0 or (steps != step).any():
        return None
    return slice(int(positions[0]), int(positions[-1]) + 1, step)


def gather_as_slice(editor, gather, args, value_type, backend):
    """``getitem(x, c)`` for a constant index vector ``c`` that counts up
    evenly: a strided slice of ``x`` (a view, where a gather copies; under
    ``jax.jit``, a slice XLA fuses); ``getitem(x, k)`` for an int ``k``:
    the basic index ``x[..., k]`` (that composes with the slices and
    gathers it reads); else ``None``."""
    source, positions = args
    constant = editor.constant_value(positions)
    source_type = editor.value_type(source)
    dim = gather.defaults["offset"]
    if source_type is None or dim >= len(source_type.shape):
        return None
    size = source_type.shape[dim]
    if is_int(constant) and -size <= constant < size:
        index = (slice(None),) * dim + (constant % size,)
        return editor.emit(getslice_op(index), (source,), False, value_type)
    positions = _index_vector(editor, positions, backend)
    if positions is None:
        return None
    if not ((-size <= positions) & (positions < size)).all():
        return None  # out of bounds: the gather raises, as it should
    strided = as_slice(positions % size)
    if strided is None:
        return None
    index = (slice(None),) * dim + (strided,)
    return editor.emit(getslice_op(index), (source,), False, value_type)


def _index_vector(editor, ref, backend):
    """The value of constant ``ref`` as a numpy vector of ints, else ``None``."""
    constant = editor.constant_value(ref)
    if not backend.is_array(constant):
        return None
    positions = np.asarray(backend.to_numpy(constant))
    if positions.ndim != 1 or positions.dtype.kind not in "iu":
        return None
    return positions


def cat_simplifier(program):
    """:func:`simplify_cat`, :func:`slice_of_gather` and
    :func:`gather_as_slice` (else :func:`~funsor_lowering.passes.cat_parts.
    gather_of_cat_parts`) for ``program``'s backend."""
    backend = array_backend(program.backend)

    def simplify(editor, cat, args, value_type):
        return simplify_cat(editor, cat, args, value_type, backend)

    def simplify_slice(editor, index, gather, value_type):
        return slice_of_gather(editor, index, gather, value_type, backend)

    def simplify_gather(editor, gather, args, value_type):
        simpler = gather_as_slice(editor, gather, args, value_type, backend)
        if simpler is None:
            positions = _index_vector(editor, args[1], backend)
            if positions is not None:
                simpler = gather_of_cat_parts(
                    editor, gather, args, positions, value_type
                )
        return simpler

    return simplify, simplify_slice, simplify_gather


__all__ = [
    "as_slice",
    "cat_simplifier",
    "gather_as_slice",
    "simplify_cat",
    "slice_of_cat",
    "slice_of_gather",
]
