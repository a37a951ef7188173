"""funsor.recipes' forward_filter_backward_rsample / _precondition traced into
single programs with nested outputs ``(samples: dict, log_prob)``, on factor
graphs shaped like AutoGaussian's (chain, plate, tree). References: the same
recipe run by funsor eagerly on the same arrays, with the same noise: the
same seed (numpy, torch) or key (jax) for rsample; the same ``aux`` input
for precondition."""

from collections import OrderedDict
from unittest import mock

import funsor
import numpy as np
import pytest
from funsor.domains import Bint, Real, Reals
from funsor.gaussian import Gaussian
from funsor.recipes import (
    forward_filter_backward_precondition,
    forward_filter_backward_rsample,
)
from funsor.tensor import Tensor
from hypothesis import given, settings
from hypothesis import strategies as st

from funsor_lowering import trace_function

from .helpers import assert_matches, from_numpy, to_numpy

BACKEND = funsor.get_backend()

# name -> (inputs of its Gaussian factor); eliminate = all names + plates
GRAPHS = {
    "chain": {
        "a": OrderedDict(a=Reals[2]),
        "b": OrderedDict(a=Reals[2], b=Real),
        "c": OrderedDict(b=Real, c=Reals[2]),
    },
    "plate": {
        "a": OrderedDict(a=Reals[2]),
        "b": OrderedDict(i=Bint[3], a=Reals[2], b=Real),
    },
    "tree": {
        "a": OrderedDict(a=Real),
        "b": OrderedDict(a=Real, b=Reals[2]),
        "c": OrderedDict(a=Real, c=Real),
    },
}
PLATES = {"chain": frozenset(), "plate": frozenset({"i"}), "tree": frozenset()}


def factor_arrays(graph, seed):
    rng = np.random.default_rng(seed)
    arrays = {}
    for name, inputs in GRAPHS[graph].items():
        batch = tuple(d.size for d in inputs.values() if d.dtype != "real")
        dim = sum(d.num_elements for d in inputs.values() if d.dtype == "real")
        prec_sqrt = rng.standard_normal(batch + (dim, dim)) + 2 * np.eye(dim)
        arrays[f"w_{name}"] = from_numpy(rng.standard_normal(batch + (dim,)))
        arrays[f"P_{name}"] = from_numpy(prec_sqrt)
    return arrays


def factors(graph, arrays):
    return {
        name: Gaussian(
            white_vec=arrays[f"w_{name}"], prec_sqrt=arrays[f"P_{name}"], inputs=inputs
        )
        for name, inputs in GRAPHS[graph].items()
    }


def rsample_recipe(graph):
    def fn(rng_key=None, **arrays):
        eliminate = frozenset(GRAPHS[graph]) | PLATES[graph]
        samples, log_prob = forward_filter_backward_rsample(
            factors(graph, arrays),
            eliminate,
            PLATES[graph],
            {"particle": Bint[4]},
            rng_key=rng_key,
        )
        return {k: v.data for k, v in samples.items()}, log_prob.data

    return fn


def precondition_recipe(graph):
    def fn(aux, **arrays):
        eliminate = frozenset(GRAPHS[graph]) | PLATES[graph]
        samples, log_prob = forward_filter_backward_precondition(
            factors(graph, arrays), eliminate, PLATES[graph]
        )
        subs = {"aux": Tensor(aux)}
        return {k: v(**subs).data for k, v in samples.items()}, log_prob(**subs).data

    return fn


def seeded(fn, seed, arrays):
    """``fn(**arrays)`` with the backend's random state set by ``seed``."""
    if BACKEND == "jax":
        import jax

        return fn(rng_key=jax.random.PRNGKey(seed), **arrays)
    if BACKEND == "torch":
        import torch

        torch.manual_seed(seed)
    else:
        np.random.seed(seed)
    return fn(**arrays)


@pytest.mark.parametrize("graph", sorted(GRAPHS))
def test_rsample_recipe_is_one_program_equal_to_eager(graph):
    fn = rsample_recipe(graph)
    example = factor_arrays(graph, 0)
    if BACKEND == "jax":
        import jax

        example["rng_key"] = jax.random.PRNGKey(0)
    program = trace_function(fn, example)
    arrays = factor_arrays(graph, 1)
    expected = seeded(fn, 3, arrays)
    actual = seeded(program, 3, arrays)
    assert_matches(actual, expected, rtol=1e-4, atol=1e-5)
    samples, log_prob = actual
    assert set(samples) == set(GRAPHS[graph]) and to_numpy(log_prob).shape == (4,)
    # live: another draw differs
    other = seeded(program, 4, arrays)
    assert not np.allclose(to_numpy(other[1]), to_numpy(log_prob))
    if BACKEND == "jax":  # jitted, the same key splits and draws, compiled
        assert_matches(seeded(program.jit(), 3, arrays), expected, rtol=1e-4, atol=1e-5)
    if BACKEND == "torch":  # jitted, the same draws from the first call on
        jitted = [program.jit(compiler="trace")]
        if graph == "chain":  # (inductor takes seconds per program)
            jitted += [program.jit(compiler="compile"), program.jit()]
        for fn_ in jitted:
            for _ in range(2):
                assert_matches(seeded(fn_, 3, arrays), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("graph", sorted(GRAPHS))
def test_precondition_recipe_is_one_program_equal_to_eager(graph):
    fn = precondition_recipe(graph)
    arrays = factor_arrays(graph, 0)
    dim = sum(
        d.num_elements * (3 if graph == "plate" and name == "b" else 1)
        for name in GRAPHS[graph]
        for k, d in GRAPHS[graph][name].items()
        if k == name
    )
    aux = from_numpy(np.random.default_rng(5).standard_normal(dim))
    program = trace_function(fn, dict(arrays, aux=aux))
    fresh = factor_arrays(graph, 1)
    fresh_aux = from_numpy(np.random.default_rng(6).standard_normal(dim))
    assert_matches(
        program(aux=fresh_aux, **fresh),
        fn(aux=fresh_aux, **fresh),
        rtol=1e-4,
        atol=1e-5,
    )


@st.composite
def gaussian_trees(draw):
    """A tree of Gaussian factors as AutoGaussian builds them: variable
    ``v{i}``'s factor (keyed by its name) couples it to an earlier one
    (random order of inputs), with a square or wider square root; and the
    Bint sample inputs of the draw."""
    graph = {}
    for i in range(draw(st.integers(1, 4))):
        size = draw(st.integers(1, 3))
        domain = Real if size == 1 and draw(st.booleans()) else Reals[size]
        inputs = OrderedDict([(f"v{i}", domain)])
        if i:
            parent = f"v{draw(st.integers(0, i - 1))}"
            inputs[parent] = graph[parent][parent]
            if draw(st.booleans()):
                inputs.move_to_end(f"v{i}")
        graph[f"v{i}"] = inputs
    # at most twice as wide as high (wider: funsor compresses it to a
    # Gaussian + Tensor, a factor its recipe cannot take alone)
    extra_ranks = {
        name: draw(st.integers(0, min(2, sum(d.num_elements for d in inputs.values()))))
        for name, inputs in graph.items()
    }
    sample_inputs = draw(
        st.sampled_from(
            [{}, {"particle": Bint[3]}, {"particle": Bint[2], "chain": Bint[3]}]
        )
    )
    return graph, extra_ranks, sample_inputs


def tree_arrays(graph, extra_ranks, seed):
    rng = np.random.default_rng(seed)
    arrays = {}
    for name, inputs in graph.items():
        dim = sum(d.num_elements for d in inputs.values())
        rank = dim + extra_ranks[name]
        arrays[f"w_{name}"] = from_numpy(rng.standard_normal(rank))
        prec_sqrt = rng.standard_normal((dim, rank)) + 2 * np.eye(dim, rank)
        arrays[f"P_{name}"] = from_numpy(prec_sqrt)
    return arrays


@given(gaussian_trees(), st.booleans())
@settings(max_examples=20)
def test_rsample_recipe_of_gaussian_trees_equals_eager(tree, dense):
    # plate-free Gaussian factors: one dense draw from the joint posterior
    # (one Cholesky factorization) with funsor's own noise, or (the dense
    # draw forced off) funsor's recipe group by group; both equal to eager
    from funsor_lowering.tracing import dense_ffbs

    graph, extra_ranks, sample_inputs = tree

    def fn(rng_key=None, **arrays):
        factors = {
            name: Gaussian(
                white_vec=arrays[f"w_{name}"],
                prec_sqrt=arrays[f"P_{name}"],
                inputs=inputs,
            )
            for name, inputs in graph.items()
        }
        samples, log_prob = forward_filter_backward_rsample(
            factors, frozenset(graph), frozenset(), sample_inputs, rng_key=rng_key
        )
        return {k: v.data for k, v in samples.items()}, log_prob.data

    example = tree_arrays(graph, extra_ranks, 0)
    if BACKEND == "jax":
        import jax

        example["rng_key"] = jax.random.PRNGKey(0)
    with mock.patch.object(dense_ffbs, "MAX_DIM", dense_ffbs.MAX_DIM if dense else 0):
        program = trace_function(fn, example)
    choleskys = program.stats()["by_op"].get("cholesky", 0)
    if dense:
        assert choleskys == 1, program
    arrays = tree_arrays(graph, extra_ranks, 1)
    expected = seeded(fn, 3, arrays)
    assert_matches(seeded(program, 3, arrays), expected, rtol=1e-4, atol=1e-5)


def test_rsample_recipe_with_plates_is_funsors_group_by_group():
    # plates: the dense draw does not apply (funsor's recipe is traced)
    program = trace_function(rsample_recipe("plate"), seeded_example("plate"))
    assert program.stats()["by_op"]["cholesky"] > 1, program


def seeded_example(graph):
    example = factor_arrays(graph, 0)
    if BACKEND == "jax":
        import jax

        example["rng_key"] = jax.random.PRNGKey(0)
    return example


@pytest.mark.skipif(BACKEND != "torch", reason="torch autograd")
@pytest.mark.parametrize("graph", ["plate", "chain"])
def test_rsample_recipe_gradients_equal_eager(graph):
    import torch

    fn = rsample_recipe(graph)
    program = trace_function(fn, factor_arrays(graph, 0))
    arrays = factor_arrays(graph, 1)

    def grads(run):
        leaves = {k: v.clone().requires_grad_() for k, v in arrays.items()}
        torch.manual_seed(7)
        samples, log_prob = run(**leaves)
        loss = log_prob.sum() + sum(s.sum() for s in samples.values())
        loss.backward()
        return {k: v.grad for k, v in leaves.items()}

    assert_matches(grads(program), grads(fn), rtol=1e-4, atol=1e-5)
