"""Slices and gathers of large concatenations taken from their parts
(:mod:`funsor_lowering.passes.cat_parts`): traced programs equal the
functions they trace (run eagerly with ``funsor.ops``), select from the
parts without materializing the large concatenation, and leave small
ones as they were."""

from unittest import mock

import numpy as np
import pytest
from funsor import ops
from hypothesis import given, settings
from hypothesis import strategies as st

from funsor_lowering import trace_function
from funsor_lowering.passes import cat_parts

from .helpers import assert_matches, backend_randn, from_numpy


def _names(program):
    return [type(o.op).__name__ for o in program.operations]


def _block(a, b):
    """``[[a, 0], [0, b]]``, as funsor's Gaussians lay out two factors."""
    top = ops.cat((a, ops.new_zeros(a, (a.shape[0], b.shape[1]))), -1)
    bottom = ops.cat((ops.new_zeros(b, (b.shape[0], a.shape[1])), b), -1)
    return ops.cat((top, bottom), -2)


def _gathered_rows(a, b):
    n = a.shape[0]  # the first rows of each block
    rows = from_numpy(np.array([0, 1, n, n + 2], dtype=np.int64))
    return ops.GetitemOp(offset=0)(_block(a, b), rows)


def _sliced_rows(a, b):
    return ops.getslice(_block(a, b), (slice(250, 350),))


def _gathered_columns(a, b):
    columns = from_numpy(np.array([5, a.shape[1] + 100, 7], dtype=np.int64))
    return ops.GetitemOp(offset=1)(_block(a, b), columns)


@pytest.mark.parametrize("fn", [_gathered_rows, _sliced_rows, _gathered_columns])
def test_large_block_matrices_are_selected_from_their_blocks(fn):
    arrays = {"a": backend_randn(300, 300), "b": backend_randn(300, 300)}
    program = trace_function(fn, arrays, allow_constants=True)
    big = [t for t in program.value_types[program.first_operation :] if t is not None]
    assert all(np.prod(t.shape) < 600 * 600 for t in big), program
    assert "GetitemOp" not in _names(program) or fn is _gathered_columns, program
    assert_matches(program(**arrays), fn(**arrays))


def test_small_concatenations_are_left_as_they_are():
    arrays = {"a": backend_randn(3, 3), "b": backend_randn(3, 3)}
    program = trace_function(_gathered_rows, arrays, allow_constants=True)
    assert _names(program).count("CatOp") <= 3, program
    assert "GetitemOp" in _names(program), program
    assert_matches(program(**arrays), _gathered_rows(**arrays))


def test_adjacent_zero_blocks_are_one_and_slices_of_zeros_are_zeros():
    def fn(a):
        zeros = ops.new_zeros(a, (2, 3))
        padded = ops.cat((zeros, ops.new_zeros(a, (4, 3)), a), -2)
        return padded, ops.getslice(zeros, (slice(0, 1),))

    arrays = {"a": backend_randn(5, 3)}
    program = trace_function(fn, arrays)
    names = _names(program)
    assert names.count("NewZerosOp") == 2 and "GetsliceOp" not in names, program
    assert_matches(program(**arrays), fn(**arrays))


@st.composite
def selections(draw):
    """Part sizes of a concatenation along ``axis`` of ``(rows, columns)``
    arrays (some of them zeros), and a slice or gather of it along
    ``dim``."""
    axis, dim = draw(st.sampled_from([0, 1])), draw(st.sampled_from([0, 1]))
    sizes = draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    zeros = draw(st.lists(st.booleans(), min_size=len(sizes), max_size=len(sizes)))
    other = draw(st.integers(1, 3))
    total = sum(sizes) if dim == axis else other
    if draw(st.booleans()):
        start = draw(st.integers(0, total - 1))
        stop = draw(st.integers(start + 1, total))
        selection = slice(start, stop, draw(st.sampled_from([1, 1, 2])))
    else:
        selection = draw(
            st.lists(st.integers(-total, total - 1), min_size=1, max_size=6)
        )
    return axis, dim, sizes, zeros, other, selection


@settings(max_examples=60, deadline=None)
@given(selections())
def test_selections_from_concatenations_equal_eager(spec):
    axis, dim, sizes, zeros, other, selection = spec

    def fn(x):
        parts, start = [], 0
        for size, zero in zip(sizes, zeros):
            index = [slice(None), slice(None)]
            index[axis] = slice(start, start + size)
            part = ops.getslice(x, tuple(index))
            parts.append(ops.new_zeros(part, tuple(part.shape)) if zero else part)
            start += size
        whole = ops.cat(tuple(parts), axis)
        if isinstance(selection, slice):
            index = [slice(None), slice(None)]
            index[dim] = selection
            return ops.getslice(whole, tuple(index))
        positions = from_numpy(np.array(selection, dtype=np.int64))
        return ops.GetitemOp(offset=dim)(whole, positions)

    shape = [other, other]
    shape[axis] = sum(sizes)
    arrays = {"x": backend_randn(*shape)}
    with mock.patch.object(cat_parts, "LARGE", 1):  # every cat is large
        program = trace_function(fn, arrays, allow_constants=True)
    assert_matches(program(**arrays), fn(**arrays))
