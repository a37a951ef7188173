"""Composing basic indices (ints, slices, ``None``, ``...``): one
``getslice`` equal to two, so that chains of them run as one indexing.

Example::

    >>> import numpy as np
    >>> x = np.arange(24).reshape(2, 3, 4)
    >>> first, second = (Ellipsis, slice(1, 3)), (0, None, slice(None, None, -1))
    >>> compose_indices(first, second, x.shape) is None  # a negative step
    True
    >>> second = (0, None, slice(1, None))
    >>> both = compose_indices(first, second, x.shape)
    >>> both
    (0, None, slice(1, 3, 1), slice(1, 3, 1))
    >>> bool((x[first][second] == x[both]).all())
    True
"""

import numbers


def is_int(part):
    return isinstance(part, numbers.Integral) and not isinstance(part, bool)


def _is_basic(part):
    return part is None or part is Ellipsis or is_int(part) or isinstance(part, slice)


def expand_index(index, rank):
    """``index`` (a basic index into ``rank`` axes) as a list with ``...``
    expanded and trailing full slices added; ``None`` if not basic."""
    index = index if isinstance(index, tuple) else (index,)
    if not all(_is_basic(p) for p in index):
        return None
    ellipses = sum(p is Ellipsis for p in index)
    consumed = sum(1 for p in index if p is not None and p is not Ellipsis)
    if consumed > rank or ellipses > 1:
        return None
    parts = []
    for p in index:
        parts += [slice(None)] * (rank - consumed) if p is Ellipsis else [p]
    if not ellipses:
        parts += [slice(None)] * (rank - consumed)
    return parts


def unit_slices(parts, shape):
    """Expanded index ``parts`` into an array of ``shape`` with each integer
    that a new axis follows written as a slice of one: ``x[k, None]`` is
    ``x[k:k + 1]``.

    >>> unit_slices([3, None, slice(None)], (5, 2))
    [slice(3, 4, None), slice(None, None, None)]
    """
    result, axis = [], 0
    for part in parts:
        if part is None and result and is_int(result[-1]):
            k = result[-1] % shape[axis - 1]
            result[-1] = slice(k, k + 1)
            continue
        result.append(part)
        axis += part is not None
    return result


def is_whole(part, size):
    """Whether ``part`` of an index is a slice taking all of a dim of
    ``size``, in order.

    >>> is_whole(slice(None), 3), is_whole(slice(0, 5), 3), is_whole(slice(1, 3), 3)
    (True, True, False)
    """
    return isinstance(part, slice) and part.indices(size) == (0, size, 1)


def sliced_shape(parts, shape):
    """The shape of ``x[parts]`` for ``x`` of ``shape``, ``parts`` one int or
    slice per dim.

    >>> sliced_shape([1, slice(0, 4, 2)], (3, 5))
    (2,)
    """
    return tuple(
        len(range(*p.indices(n))) for p, n in zip(parts, shape) if not is_int(p)
    )


def keeps_order(index, shape):
    """Whether ``x[index]`` (``x`` of ``shape``) is all of ``x``'s elements
    in order, reshaped: new axes, whole slices, and ints only into axes of
    size one.

    >>> keeps_order((slice(None), None, Ellipsis, 0), (4, 2, 1))
    True
    >>> keeps_order((0,), (2, 3)), keeps_order((slice(None, None, -1),), (2,))
    (False, False)
    """
    parts = expand_index(index, len(shape))
    if parts is None:
        return False
    dims = [p for p in parts if p is not None]
    return all(
        is_whole(p, n) or (is_int(p) and n == 1 and p in (0, -1))
        for p, n in zip(dims, shape)
    )


def takes_all(index, shape):
    """Whether ``x[index]`` is all of ``x`` (of ``shape``), unchanged.

    >>> takes_all((Ellipsis, slice(0, 3)), (2, 3)), takes_all((None,), (2, 3))
    (True, False)
    """
    parts = expand_index(index, len(shape))
    if parts is None or len(parts) != len(shape):  # new axes
        return False
    return all(is_whole(p, n) for p, n in zip(parts, shape))


def compose_indices(first, second, shape):
    """A basic index ``c`` with ``x[c] == x[first][second]`` for arrays ``x``
    of ``shape``, or ``None`` where one is not written so simply (negative
    steps, a slice of a new axis that may be empty, advanced indices)."""
    parts = expand_index(first, len(shape))
    if parts is None:
        return None
    normalized = _normalized_parts(parts, shape)
    if normalized is None:
        return None
    normal, axes = normalized
    later = expand_index(second, len(axes))
    if later is None:
        return None
    applied = _apply_later(normal, axes, later)
    if applied is None:
        return None
    composed, inserts = applied
    return _written(composed, inserts, axes)


def _normalized_parts(parts, shape):
    """``(normal, axes)`` for the expanded index ``parts`` into ``shape``:
    per part a non-negative int, ``None`` (a new axis) or ``(start, step)``
    of a slice; and per axis of the result, its ``(position in normal,
    length)``. ``None`` for an out-of-range int or a negative step."""
    axes, axis, normal = [], 0, []
    for p in parts:
        if p is None:
            axes.append((len(normal), 1))
            normal.append(None)
            continue
        size = shape[axis]
        axis += 1
        if is_int(p):
            if not -size <= p < size:
                return None
            normal.append(p % size)
            continue
        start, stop, step = p.indices(size)
        if step < 0:
            return None
        axes.append((len(normal), len(range(start, stop, step))))
        normal.append((start, step))
    return normal, axes


def _apply_later(normal, axes, later):
    """``(composed, inserts)``: ``normal`` with the second index's parts
    ``later`` applied to the axes they index ("drop" for an axis an int
    removes), and per position the new axes inserted before it; ``None``
    where that is not a basic index."""
    composed = list(normal)
    inserts = {}  # position in composed -> Nones inserted before it
    k = 0
    for p in later:
        if p is None:
            position = axes[k][0] if k < len(axes) else len(composed)
            inserts[position] = inserts.get(position, 0) + 1
            continue
        position, length = axes[k]
        k += 1
        here = composed[position]
        if is_int(p):
            if not -length <= p < length:
                return None
            i = p % length
            composed[position] = "drop" if here is None else here[0] + i * here[1]
            continue
        start, stop, step = p.indices(length)
        if step < 0:
            return None
        count = len(range(start, stop, step))
        if here is None:
            if count != 1:
                return None  # an empty slice of a new axis
            continue
        new_start, new_step = here[0] + start * here[1], here[1] * step
        composed[position] = slice(new_start, new_start + count * new_step, new_step)
    return composed, inserts


def _written(composed, inserts, axes):
    """The composed index as a tuple of ints, slices and ``None`` s."""
    result = []
    for position, part in enumerate(composed):
        result += [None] * inserts.get(position, 0)
        if isinstance(part, tuple):  # a slice of first the second kept whole
            start, step = part
            length = next(n for pos, n in axes if pos == position)
            part = slice(start, start + length * step, step)
        if part != "drop":
            result.append(part)
    result += [None] * inserts.get(len(composed), 0)
    return tuple(result)


def canonical_index(index, shape):
    """The one spelling of basic ``index`` into arrays of ``shape`` that
    every index selecting the same elements shares (so that common
    subexpression elimination sees equal slices as equal): no ``...``, ints
    non-negative, whole slices as ``:``, other slices with explicit start,
    stop and step, no trailing ``:``. ``None`` where ``index`` is not
    basic or steps backwards.

    >>> canonical_index((Ellipsis, slice(2, None), slice(None)), (4, 4))
    (slice(2, 4, 1),)
    >>> canonical_index((slice(2, 4, 1), slice(None)), (4, 4))
    (slice(2, 4, 1),)
    >>> canonical_index((-1, None, Ellipsis, slice(0, 9)), (3, 4))
    (2, None)
    """
    composed = compose_indices(index, (), shape)
    if composed is None:
        return None
    parts, axis = [], 0
    for part in composed:
        if isinstance(part, slice):
            part = slice(None) if is_whole(part, shape[axis]) else part
        parts.append(part)
        axis += part is not None
    while parts and parts[-1] == slice(None):
        parts.pop()
    return tuple(parts)


__all__ = [
    "canonical_index",
    "compose_indices",
    "expand_index",
    "is_int",
    "is_whole",
    "takes_all",
]
