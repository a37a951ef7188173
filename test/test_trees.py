"""Trees of separate factors in log space (``rules/trees.py``): a root
factor and one factor per edge to a child, as tree-structured models and
per-node Pyro sites give, summed by funsor's ``sum_product`` as a user calls
it. The compiled program stacks the edge factors once and takes a few
operations per depth, O(log T) for a balanced tree of T factors, and equals
funsor's eager elimination of the same factors, with equal gradients."""

import math

import numpy as np
import pytest
from funsor import ops
from funsor.domains import Reals
from funsor.sum_product import partial_sum_product, sum_product
from funsor.tensor import Tensor
from hypothesis import given, settings
from hypothesis import strategies as st

from funsor_lowering import compile_function

from .conftest import BACKEND
from .helpers import (
    assert_gradients_match,
    assert_matches,
    from_numpy,
    random_arrays,
)

STATES = 3


def tree_model(parents, unary=(0,), flipped=(), kept=None, partial=False):
    """A tree over ``v0 .. v{T}``, node ``i``'s parent ``parents[i - 1]``
    (smaller than ``i``): ``(model, domains, eager)``. ``model`` sums, by
    ``sum_product``, a factor ``u{i}[v{i}]`` for each node in ``unary`` and a
    separate factor ``e{k}`` per edge, laid out ``(child, parent)`` for ``k``
    in ``flipped``, else ``(parent, child)``; every node but ``kept`` is
    reduced (by ``partial_sum_product`` if ``partial``). ``eager(arrays)``
    is funsor's eager evaluation of the same factors, one variable
    eliminated at a time from the last node (its eager ``sum_product`` of so
    many factors would broadcast them all)."""
    nodes = len(parents) + 1
    reduced = [f"v{i}" for i in range(nodes) if i != kept]

    def factors(inputs, wrap):
        result = [wrap(inputs[f"u{i}"])[f"v{i}"] for i in unary]
        for k, p in enumerate(parents):
            pair = (f"v{k + 1}", f"v{p}") if k in flipped else (f"v{p}", f"v{k + 1}")
            result.append(wrap(inputs[f"e{k}"])[pair])
        return result

    def model(**inputs):
        args = (factors(inputs, lambda x: x), frozenset(reduced), frozenset())
        if partial:
            (result,) = partial_sum_product(ops.logaddexp, ops.add, *args)
            return result
        return sum_product(ops.logaddexp, ops.add, *args)

    def eager(arrays):
        remaining = factors(arrays, Tensor)
        for name in reversed(reduced):
            joined = [f for f in remaining if name in f.inputs]
            remaining = [f for f in remaining if name not in f.inputs]
            total = joined[0]
            for f in joined[1:]:
                total = total + f
            remaining.append(total.reduce(ops.logaddexp, name))
        total = remaining[0]
        for f in remaining[1:]:
            total = total + f
        return total.data

    domains = {f"u{i}": Reals[STATES] for i in unary}
    domains.update({f"e{k}": Reals[STATES, STATES] for k in range(len(parents))})
    return model, domains, eager


def star(size):
    return [0] * size


def balanced(size):
    return [i // 2 for i in range(size)]


@pytest.mark.parametrize(
    "size, partial", [(10, False), (100, False), (1000, False), (100, True)]
)
@pytest.mark.parametrize("shape", [star, balanced])
def test_separate_factor_trees_compile_by_levels(shape, size, partial):
    """Stacked once, then a few operations per depth: a star is one level,
    a balanced tree ``log2 T``; a contraction per variable took 2T. The
    same through ``partial_sum_product``."""
    parents = shape(size)
    model, domains, eager = tree_model(parents, partial=partial)
    program = compile_function(model, **domains)
    levels = 1 if shape is star else math.ceil(math.log2(size + 2)) - 1
    bound = 6 * levels + 6
    assert len(program.operations) <= bound, (len(program.operations), bound)
    arrays = random_arrays(domains)
    assert_matches(program(**arrays), eager(arrays))


@st.composite
def trees(draw):
    size = draw(st.integers(4, 40))
    parents = [draw(st.integers(0, i)) for i in range(size)]
    nodes = st.integers(0, size)
    return dict(
        parents=parents,
        unary=sorted(draw(st.sets(nodes))),
        flipped=draw(st.sets(st.integers(0, size - 1))),
        kept=draw(st.none() | nodes),
    )


@settings(max_examples=30, deadline=None)
@given(trees())
def test_trees_compile_to_what_funsor_computes(spec):
    """Any shape, unary factors on any nodes, edge factors in either
    layout, at most one node kept."""
    model, domains, eager = tree_model(**spec)
    program = compile_function(model, **domains)
    arrays = random_arrays(domains)
    assert_matches(program(**arrays), eager(arrays))


@pytest.mark.skipif(BACKEND == "numpy", reason="numpy has no autodiff")
def test_tree_gradients_are_funsors():
    # in the suite's float dtype (FUNSOR_FLOAT_DTYPE), over wide ranges
    parents = [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 0, 5, 8, 8, 8]
    model, domains, eager = tree_model(parents, unary=(0, 3, 8, 9), flipped={2, 7})
    program = compile_function(model, **domains)
    rng = np.random.RandomState(2)
    arrays = {k: from_numpy(rng.randn(*d.shape) * 20) for k, d in domains.items()}
    assert_gradients_match(lambda a: program(**a), eager, arrays)
