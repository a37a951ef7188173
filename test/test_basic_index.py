"""Composed basic indices equal numpy's indexing applied twice, for random
shapes and indices (ints, slices with any bounds and steps, None, ...)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from funsor_lowering.program.basic_index import compose_indices


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
