"""Funsor distribution terms compile to one op calling the backend
distribution's log_prob; checked against funsor's eager evaluation.
(torch and jax only: funsor has no numpy distributions.)"""

import importlib
from collections import OrderedDict

import funsor
import numpy as np
import pytest
from funsor import ops
from funsor.cnf import Contraction
from funsor.delta import Delta
from funsor.domains import Bint, Real, Reals
from funsor.tensor import Tensor
from funsor.terms import Variable

if funsor.get_backend() == "numpy":
    pytest.skip("funsor has no numpy distributions", allow_module_level=True)

from funsor_lowering import compile_function, compiling, trace_function  # noqa: E402
from funsor_lowering.tracing.tracer import RANDOM_OPS

from .helpers import (
    assert_matches,
    data_of,
    evaluate,
    from_numpy,
    run_three_ways,
    to_numpy,
)

dist = importlib.import_module(f"funsor.{funsor.get_backend()}.distributions")
rng = np.random.RandomState(0)


def real(*shape):
    return from_numpy(np.asarray(rng.randn(*shape), dtype=np.float32))


def positive(x):
    return x.exp()


def simplex(x):
    return x.exp() / x.exp().sum()


# name -> (model over Variables, input domains, arrays)
CASES = {
    "Normal": (
        lambda loc, s, y: dist.Normal(loc["i"], positive(s), y),
        {"loc": Reals[3], "s": Real, "y": Real},
        lambda: {"loc": real(3), "s": real(), "y": real()},
    ),
    "MultivariateNormal": (
        lambda loc, L, y: dist.MultivariateNormal(loc["i"], L, y),
        {"loc": Reals[2, 3], "L": Reals[3, 3], "y": Reals[3]},
        lambda: {
            "loc": real(2, 3),
            "L": from_numpy(
                np.tril(rng.rand(3, 3)).astype(np.float32)
                + 2 * np.eye(3, dtype=np.float32)
            ),
            "y": real(3),
        },
    ),
    "Categorical": (
        lambda logits: dist.Categorical(simplex(logits["i"]), Variable("k", Bint[4])),
        {"logits": Reals[2, 4]},
        lambda: {"logits": real(2, 4)},
    ),
    "Bernoulli": (
        lambda p, y: dist.Bernoulli(probs=p["i"].sigmoid(), value=y),
        {"p": Reals[3], "y": Real},
        lambda: {"p": real(3), "y": from_numpy(np.array(1.0, dtype=np.float32))},
    ),
    "Poisson": (
        lambda r, y: dist.Poisson(positive(r["i"]), y),
        {"r": Reals[3], "y": Real},
        lambda: {"r": real(3), "y": from_numpy(np.array(2.0, dtype=np.float32))},
    ),
    "Gamma": (
        lambda c, r, y: dist.Gamma(positive(c["i"]), positive(r), y),
        {"c": Reals[3], "r": Real, "y": Real},
        lambda: {
            "c": real(3),
            "r": real(),
            "y": from_numpy(np.array(1.5, dtype=np.float32)),
        },
    ),
    "Beta": (
        # (both batched: funsor's own Beta cannot broadcast a scalar parameter)
        lambda a, b, y: dist.Beta(positive(a["i"]), positive(b["i"]), y),
        {"a": Reals[3], "b": Reals[3], "y": Real},
        lambda: {
            "a": real(3),
            "b": real(3),
            "y": from_numpy(np.array(0.3, dtype=np.float32)),
        },
    ),
    "Dirichlet": (
        lambda c, y: dist.Dirichlet(positive(c["i"]), y),
        {"c": Reals[2, 3], "y": Reals[3]},
        lambda: {
            "c": real(2, 3),
            "y": from_numpy(np.array([0.2, 0.3, 0.5], dtype=np.float32)),
        },
    ),
}


def compile_in_block(fn, **domains):
    with compiling as interp:
        result = fn(**{k: Variable(k, d) for k, d in domains.items()})
    return interp.compile(result, inputs=domains)


@pytest.mark.parametrize("route", [compile_function, compile_in_block])
@pytest.mark.parametrize("name", CASES)
def test_log_prob_compiles(name, route):
    model, domains, make_arrays = CASES[name]
    program = route(model, **domains)
    symbolic = model(**{k: Variable(k, d) for k, d in domains.items()})
    arrays = make_arrays()
    expected = data_of(evaluate(symbolic, arrays))
    for actual in run_three_ways(program, arrays):
        assert_matches(actual, expected, rtol=1e-4, atol=1e-5)


def test_joint_log_density_of_a_model():
    """A small model's joint log-density built from funsor distributions."""

    def joint(mu, log_sigma, x):
        prior = dist.Normal(0.0, 1.0, mu)
        likelihood = dist.Normal(mu, log_sigma.exp(), x["n"]).reduce(ops.add, "n")
        return {"joint": prior + likelihood, "parts": (prior, likelihood)}

    domains = OrderedDict(mu=Real, log_sigma=Real, x=Reals[5])
    program = compile_function(joint, **domains)
    symbolic = joint(**{k: Variable(k, d) for k, d in domains.items()})
    arrays = {"mu": real(), "log_sigma": real(), "x": real(5)}
    expected = {
        "joint": data_of(evaluate(symbolic["joint"], arrays)),
        "parts": tuple(data_of(evaluate(p, arrays)) for p in symbolic["parts"]),
    }
    for actual in run_three_ways(program, arrays):
        assert_matches(actual, expected, rtol=1e-4, atol=1e-5)


# ------------------------------------------- sampling, traced (live draws)
def sampler(dist_fn, value, n):
    """A function of arrays that draws n samples of ``value`` with funsor."""

    def fn(key=None, **params):
        d = dist_fn(**{k: Tensor(v) for k, v in params.items()})
        draw = d.sample(frozenset({value}), OrderedDict(n=Bint[n]), rng_key=key)
        # a Delta, or (with a score-function factor) a sum holding one
        parts = draw.terms if isinstance(draw, Contraction) else (draw,)
        (delta,) = [t for t in parts if isinstance(t, Delta)]
        return delta.terms[0][1][0].data  # the Delta's point

    return fn


def draw_twice(fn, params):
    """Trace ``fn`` and call the program twice (jax: with two keys)."""
    if funsor.get_backend() == "jax":
        import jax

        keys = [jax.random.PRNGKey(k) for k in (0, 1)]
        program = trace_function(fn, dict(params, key=keys[0]))
        first = program(**params, key=keys[0])
        assert_matches(program(**params, key=keys[0]), first)  # same key, same draw
        return program, first, program(**params, key=keys[1])
    program = trace_function(fn, params)
    return program, program(**params), program(**params)


def test_poisson_samples_are_live_with_the_right_moments():
    # Poisson has no rsample: the draw is detached and a score-function
    # factor is added, as funsor's sampler does.
    fn = sampler(lambda r: dist.Poisson(r, "x"), "x", 4000)
    program, first, second = draw_twice(
        fn, {"r": from_numpy(np.array(4.0, np.float32))}
    )
    assert any(isinstance(o.op, RANDOM_OPS) for o in program.operations)
    first = np.asarray(to_numpy(first))
    assert first.shape == (4000,) and not np.array_equal(first, to_numpy(second))
    # mean 4 and variance 4: 5 standard errors of the mean is 0.16
    assert abs(first.mean() - 4.0) < 0.16
    assert abs(first.var() - 4.0) < 0.6


def test_gamma_reparametrized_samples_match_moments():
    fn = sampler(lambda c, r: dist.Gamma(c, r, "x"), "x", 4000)
    params = {
        "c": from_numpy(np.array(3.0, np.float32)),
        "r": from_numpy(np.array(2.0, np.float32)),
    }
    program, first, second = draw_twice(fn, params)
    first = np.asarray(to_numpy(first))
    assert not np.allclose(first, np.asarray(to_numpy(second)))
    # mean 1.5, std sqrt(3)/2 ~ 0.87: 5 standard errors of the mean ~ 0.07
    assert abs(first.mean() - 1.5) < 0.07
    assert abs(first.std() - np.sqrt(3) / 2) < 0.07


# funsor's test_generic_sample cases whose samplers failed compiled on jax:
# name -> (backend distribution of numpy arrays, funsor value domain, a
# check of one draw). Multinomial and Binomial need concrete total counts
# under jax's tracing, Beta.to_event builds a validated Dirichlet, Delta's
# log_density has the batch shape only.
def _raw_cases():
    raw = importlib.import_module(
        "pyro.distributions"
        if funsor.get_backend() == "torch"
        else "numpyro.distributions"
    )
    array = from_numpy
    probs = rng.rand(5, 4) + 0.1
    probs /= probs.sum(-1, keepdims=True)
    counts = np.full((5,), 6)
    return {
        "Multinomial": (
            lambda: raw.Multinomial(int(counts[0]), probs=array(probs)),
            Reals[4],
            lambda x: np.allclose(x.sum(-1), counts[0]) and (x >= 0).all(),
        ),
        "Binomial": (
            lambda: raw.Binomial(array(counts), probs=array(probs[:, 0])),
            Real,
            lambda x: ((0 <= x) & (x <= counts)).all(),
        ),
        "Beta.to_event": (
            lambda: raw.Beta(array(probs + 1), array(probs + 2)).to_event(1),
            Reals[4],
            lambda x: ((0 < x) & (x < 1)).all(),
        ),
        "Delta": (
            lambda: raw.Delta(array(probs), array(counts), event_dim=1),
            Reals[4],
            lambda x: np.allclose(x, probs),
        ),
    }


@funsor.interpretations.CallableInterpretation
def _distributions_kept(cls, *args):
    """Eager, except that a distribution of an unbound value stays a term
    (funsor's test converts under such an interpretation, so that its
    sampler, not an eager pattern, is tested)."""
    if issubclass(cls, funsor.distribution.Distribution) and not isinstance(
        args[-1], Tensor
    ):
        return funsor.interpretations.reflect.interpret(cls, *args)
    return funsor.interpretations.eager.interpret(cls, *args)


@pytest.mark.parametrize("sample_shape", [(), (3,)], ids=str)
@pytest.mark.parametrize("name", list(_raw_cases()))
def test_samplers_of_funsors_generic_sample_cases(name, sample_shape):
    # funsor's test_generic_sample: a backend distribution converted with its
    # batch dim named, then Funsor.sample run compiled by jit
    from funsor.montecarlo import extract_samples
    from funsor.terms import Funsor

    from funsor_lowering import jit

    make, domain, check = _raw_cases()[name]
    with _distributions_kept:
        term = funsor.to_funsor(make(), output=Real, dim_to_name={-1: "i"})
    assert isinstance(term, funsor.distribution.Distribution)
    sample_inputs = OrderedDict(s=Bint[3]) if sample_shape else OrderedDict()
    key = None if funsor.get_backend() == "torch" else np.array([0, 0], np.uint32)
    args = (term, frozenset(["value"]), sample_inputs)
    expected = Funsor.sample(*args, rng_key=key)
    actual = jit(Funsor.sample)(*args, rng_key=key)
    assert actual.inputs == expected.inputs and actual.output == expected.output
    point = extract_samples(actual)["value"]
    assert point.output == domain
    names = ("s", "i") if sample_shape else ("i",)
    assert check(np.asarray(to_numpy(point.align(names).data)))


@pytest.mark.parametrize("reparametrized", [True, False], ids=["reparam", "nonrepa"])
def test_draws_are_funsors_own_numbers(reparametrized):
    # funsor's test_gamma_sample: a Gamma over two batch inputs sampled with
    # sample inputs; funsor's sampler lays the batch out last input first, and
    # so does the compiled draw: from the same RNG state (torch's global one,
    # jax's key) both give the same numbers in the same places
    from funsor.terms import Funsor

    from funsor_lowering import jit

    inputs = OrderedDict(i=Bint[2], j=Bint[3])
    concentration = Tensor(from_numpy(rng.rand(2, 3) + 0.5), inputs)
    rate = Tensor(from_numpy(rng.rand(2, 3) + 0.5), inputs)
    gamma = dist.Gamma if reparametrized else dist.NonreparameterizedGamma
    term = gamma(concentration, rate, Variable("value", Real))
    args = (term, frozenset(["value"]), OrderedDict(ii=Bint[4], jj=Bint[5]))
    sample = jit(Funsor.sample)

    def drawn(fn):
        if funsor.get_backend() == "torch":
            import torch

            torch.manual_seed(0)
            return fn(*args)
        return fn(*args, rng_key=np.array([0, 7], np.uint32))

    expected = drawn(Funsor.sample)
    sample(*args) if funsor.get_backend() == "torch" else None  # compiles
    actual = drawn(sample)
    assert actual.inputs == expected.inputs
    point, expected_point = (
        funsor.montecarlo.extract_samples(r)["value"] for r in (actual, expected)
    )
    assert tuple(point.inputs) == tuple(expected_point.inputs)
    assert_matches(point.data, expected_point.data)


def _transformed_case(name):
    # two of funsor's test_generic_sample cases, and a chain (pyro is
    # imported here: the jax env has none)
    import pyro.distributions as raw
    import torch

    rate = torch.as_tensor(rng.rand(5) + 0.5)
    loc = torch.as_tensor(rng.randn(2, 3, 3))
    low = torch.as_tensor(rng.rand(2, 3))
    if name == "Exponential^0.5":
        return raw.TransformedDistribution(
            raw.Exponential(rate=rate), raw.transforms.PowerTransform(0.5)
        )
    if name == "Haar(Normal)":
        return raw.TransformedDistribution(
            raw.Normal(loc=loc, scale=1.0).to_event(1),
            raw.transforms.HaarTransform(dim=-1),
        )
    assert name == "exp(tanh(Normal))"
    return raw.TransformedDistribution(
        raw.Normal(loc=low, scale=low + 1.0),
        [raw.transforms.TanhTransform(), raw.transforms.ExpTransform()],
    )


@pytest.mark.skipif(
    funsor.get_backend() != "torch",
    reason="funsor samples transformed distributions on torch only",
)
@pytest.mark.parametrize("sample_shape", [(), (2,)], ids=str)
@pytest.mark.parametrize(
    "name", ["Exponential^0.5", "Haar(Normal)", "exp(tanh(Normal))"]
)
def test_transformed_distributions_draw_funsors_own_numbers(name, sample_shape):
    # funsor's test_generic_sample over a TransformedDistribution: funsor's
    # term is the base distribution of transform(value); the compiled draw
    # is a base draw through the transforms, the same numbers as funsor's
    import torch
    from funsor.terms import Funsor

    from funsor_lowering import jit

    raw = _transformed_case(name)
    names = ("a", "b")[: len(raw.batch_shape)]
    dim_to_name = {d - len(names): n for d, n in enumerate(names)}
    with _distributions_kept:
        term = funsor.to_funsor(raw, output=Real, dim_to_name=dim_to_name)
    sample_inputs = OrderedDict(s=Bint[2]) if sample_shape else OrderedDict()
    args = (term, frozenset(["value"]), sample_inputs)
    sample = jit(Funsor.sample)
    draws = []
    for fn in (Funsor.sample, sample):
        torch.manual_seed(0)
        draws.append(fn(*args))
    expected, actual = draws
    assert actual.inputs == expected.inputs
    point, expected_point = (
        funsor.montecarlo.extract_samples(r)["value"] for r in (actual, expected)
    )
    assert tuple(point.inputs) == tuple(expected_point.inputs)
    assert point.output == expected_point.output == Reals[raw.event_shape]
    assert_matches(point.data, expected_point.data)
    assert "distribution_sample" in str(sample.program(*args))  # a base draw
