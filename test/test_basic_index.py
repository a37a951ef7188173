"""Composed basic indices equal numpy's indexing applied twice, for random
shapes and indices (ints, slices with any bounds and steps, None, ...); every
spelling of a selection has one canonical form."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from funsor_lowering.passes.basic_index import canonical_index, compose_indices


def _parts(draw, sizes):
    """One int or slice per axis of ``sizes``, with Nones in between."""
    parts = []
    for size in sizes:
        while draw(st.integers(0, 4)) == 0:
            parts.append(None)
        if size and draw(st.booleans()):  # (an empty axis takes slices only)
            parts.append(draw(st.integers(-size, size - 1)))
        else:
            bound = st.one_of(st.none(), st.integers(-size - 2, size + 2))
            step = draw(st.one_of(st.none(), st.integers(-3, 3).filter(bool)))
            parts.append(slice(draw(bound), draw(bound), step))
    return parts


@st.composite
def basic_indices(draw, shape):
    """Parts for some leading axes, maybe ``...``, parts for some trailing."""
    lead = draw(st.integers(0, len(shape)))
    trail = draw(st.integers(0, len(shape) - lead))
    parts = _parts(draw, shape[:lead])
    if draw(st.booleans()):
        parts.append(Ellipsis)
        parts += _parts(draw, shape[len(shape) - trail :])
    if draw(st.booleans()):
        parts.append(None)
    return tuple(parts)


@settings(max_examples=400, deadline=None)
@given(data=st.data(), shape=st.lists(st.integers(1, 4), min_size=0, max_size=4))
def test_composed_index_equals_indexing_twice(data, shape):
    x = np.arange(int(np.prod(shape))).reshape(shape)
    first = data.draw(basic_indices(tuple(shape)))
    once = x[first]
    second = data.draw(basic_indices(once.shape))
    expected = once[second]
    composed = compose_indices(first, second, tuple(shape))
    if composed is None:  # declined: negative steps or a new axis sliced away
        assert any(
            isinstance(p, slice) and (p.step or 1) < 0 for p in first + second
        ) or any(p is None for p in first)
        return
    np.testing.assert_array_equal(x[composed], expected)
    assert x[composed].shape == expected.shape


@st.composite
def respelled_indices(draw):
    """``(shape, index, other)``: a basic index and another spelling of the
    same selection (negative ints, open or overlong slice ends, ``...``
    and trailing ``:`` added or dropped)."""
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=4)))
    index, other, whole = [], [], []  # whole: other's part takes all its axis
    for size in shape:
        kind = draw(st.sampled_from(["int", "slice", "all", "new"]))
        if kind == "new":
            index.append(None)
            other.append(None)
            whole.append(False)
            kind = draw(st.sampled_from(["int", "slice", "all"]))
        if kind == "int":
            i = draw(st.integers(0, size - 1))
            index.append(i)
            other.append(i - size)
        elif kind == "slice":
            start = draw(st.integers(0, size - 1))
            step = draw(st.integers(1, 3))
            stop = draw(st.integers(start, size))
            index.append(slice(start, stop, step))
            end = size + 2 if stop == size else stop
            other.append(slice(start or None, end, step if step > 1 else None))
        else:
            index.append(slice(None))
            other.append(slice(0, size + 1, 1))
        whole.append(kind == "all")
    if draw(st.booleans()):  # the trailing whole parts written as ``...``
        while whole and whole[-1]:
            whole.pop()
            other.pop()
        other.append(Ellipsis)
    return shape, tuple(index), tuple(other)


@given(respelled_indices())
def test_every_spelling_of_a_basic_index_has_one_canonical_form(case):
    shape, index, other = case
    x = np.arange(int(np.prod(shape))).reshape(shape)
    canonical = canonical_index(index, shape)
    assert canonical == canonical_index(other, shape)
    assert canonical_index(canonical, shape) == canonical
    np.testing.assert_array_equal(x[canonical], x[index])
    np.testing.assert_array_equal(x[canonical], x[other])
