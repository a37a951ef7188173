"""Sampling (``MonteCarlo``, ``.sample``) and funsor's adjoint tape
(``forward_backward``, ``AdjointTape``), which funsor 0.4.8 runs on concrete
arrays only, compiled two ways: by ``compile_function`` and inside a ``with
compiling:`` block (both run such steps as segments traced on example arrays,
see interpretations/segments.py). References: the same function run by funsor
eagerly on Tensors of fresh arrays. Draws must stay live: two calls differ,
and their statistics match the distribution and funsor's eager draws."""

import importlib
import pickle
import warnings
from collections import OrderedDict

import funsor
import funsor.interpreter
import numpy as np
import pytest
from funsor import ops
from funsor.adjoint import AdjointTape, forward_backward
from funsor.delta import Delta
from funsor.domains import Bint, Real, Reals
from funsor.gaussian import Gaussian
from funsor.integrate import Integrate
from funsor.interpretations import memoize, reflect
from funsor.montecarlo import MonteCarlo
from funsor.optimizer import apply_optimizer
from funsor.sum_product import sum_product
from funsor.tensor import Tensor
from funsor.terms import Variable
from funsor.testing import randn
from hypothesis import given, settings
from hypothesis import strategies as st

from funsor_lowering import compile_function, compile_funsor, compiling
from funsor_lowering.lowering.interpretations.recording import current_recording
from funsor_lowering.lowering.interpretations.segments import Segment
from funsor_lowering.ops.concretization import ConcretizationError
from funsor_lowering.tracing.tracer import RANDOM_OPS

from .helpers import (
    assert_matches,
    backend_exp,
    from_numpy,
    random_arrays,
    run_in_fresh_process,
    run_three_ways,
    to_numpy,
)

BACKEND = funsor.get_backend()
# a backend call's error names the user's line: backend_exp in test/helpers.py
AT_HELPERS = r"traced value.* at \S*helpers.py:\d+"


def compile_in_block(fn, **domains):
    """``fn`` run inside ``with compiling:`` on Variables, then compiled."""
    with compiling as interp:
        result = fn(**{name: Variable(name, d) for name, d in domains.items()})
    return interp.compile(result, inputs=domains)


def compile_in_legacy_block(fn, **domains):
    """The same, entered as ``funsor.interpreter.interpretation(compiling)``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with funsor.interpreter.interpretation(compiling):
            result = fn(**{name: Variable(name, d) for name, d in domains.items()})
    return compiling.compile(result, inputs=domains)


ROUTES = {
    "compile_function": compile_function,
    "with_compiling": compile_in_block,
    "interpretation": compile_in_legacy_block,
}


@pytest.fixture(params=list(ROUTES))
def compile_with(request):
    return ROUTES[request.param]


def eager_reference(fn, arrays):
    result = fn(**{k: Tensor(v) for k, v in arrays.items()})
    return _data(result)


def _data(value):
    if isinstance(value, dict):
        return {k: _data(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(_data(v) for v in value)
    return value.data


# ------------------------------------------------------------------ adjoint
def plated_marginals(f, g, h):
    """funsor.adjoint's tape over a plated sum-product: the partition
    function and every factor's adjoint, as a dict."""
    factors = [f["x"], g["x", "y"], h["y", "z", "i"]]
    with AdjointTape() as tape:
        z = sum_product(
            ops.logaddexp, ops.add, factors, frozenset("xyz"), frozenset("i")
        )
    adjoints = tape.adjoint(ops.logaddexp, ops.add, z, targets=factors)
    return {"z": z, "marginals": {n: adjoints[t] for n, t in zip("fgh", factors)}}


def lazy_forward_backward(f, g, h):
    """forward_backward over a lazily built sum-product (funsor's recipes
    build theirs this way); marginals looked up by factor."""
    factors = [f["x"], g["x", "y"], h["y", "z"]]
    with reflect:
        log_z = sum_product(ops.logaddexp, ops.add, factors, frozenset("xyz"))
        log_z = apply_optimizer(log_z)
    forward, backward = forward_backward(ops.logaddexp, ops.add, log_z)
    return forward, [backward[t] for t in factors]


def chain_forward_backward(f, g, h):
    """funsor.adjoint.forward_backward over an eagerly built sum (funsor
    eager reinterprets a value: the adjoint of the root alone)."""
    expr = f["a"] + g["a", "b"] + h["b", "c"]
    forward, backward = forward_backward(ops.logaddexp, ops.add, expr)
    return forward, [backward[k] for k in sorted(backward, key=str)]


def memoized_marginals(f, g):
    with memoize():
        factors = [f["x"], g["x", "y"]]
        with AdjointTape() as tape:
            z = sum_product(ops.logaddexp, ops.add, factors, frozenset("xy"))
        again = sum_product(ops.logaddexp, ops.add, factors, frozenset("xy"))
    adjoints = tape.adjoint(ops.logaddexp, ops.add, z, targets=factors)
    return (z, again), [adjoints[t] for t in factors]


ADJOINT_CASES = {
    "plated_marginals": (
        plated_marginals,
        dict(f=Reals[2], g=Reals[2, 3], h=Reals[3, 4, 2]),
    ),
    "lazy_forward_backward": (
        lazy_forward_backward,
        dict(f=Reals[2], g=Reals[2, 3], h=Reals[3, 4]),
    ),
    "chain_forward_backward": (
        chain_forward_backward,
        dict(f=Reals[3], g=Reals[3, 2], h=Reals[2, 4]),
    ),
    "memoized_marginals": (memoized_marginals, dict(f=Reals[3], g=Reals[3, 2])),
}


@pytest.mark.parametrize("case", list(ADJOINT_CASES))
def test_adjoint_compiles_and_matches_eager(compile_with, case):
    fn, domains = ADJOINT_CASES[case]
    program = compile_with(fn, **domains)
    assert program.inputs == tuple(domains)
    for _ in range(2):  # fresh arrays, not the example ones it was traced on
        arrays = random_arrays(domains)
        expected = eager_reference(fn, arrays)
        for actual in run_three_ways(program, arrays):
            assert_matches(actual, expected, rtol=1e-4, atol=1e-5)


def test_backward_is_keyed_by_the_blocks_terms():
    # forward_backward's dict is keyed by the terms of the block's expression,
    # and each marginal has the inputs funsor's eager one has
    domains = {"f": Reals[2], "g": Reals[2, 3]}
    with compiling as interp:
        factors = [Variable("f", Reals[2])["x"], Variable("g", Reals[2, 3])["x", "y"]]
        _, backward = forward_backward(ops.logaddexp, ops.add, _lazy_log_z(*factors))
        assert all(factor in backward for factor in factors)
        marginals = [backward[factor] for factor in factors]
    program = interp.compile(marginals)
    arrays = random_arrays(domains)
    eager_factors = [Tensor(arrays["f"])["x"], Tensor(arrays["g"])["x", "y"]]
    _, eager = forward_backward(ops.logaddexp, ops.add, _lazy_log_z(*eager_factors))
    for marginal, factor, actual in zip(marginals, eager_factors, program(**arrays)):
        expected = eager[factor]
        batch = tuple(k for k, d in marginal.inputs.items() if d.dtype != "real")
        assert set(batch) == set(expected.inputs)
        assert_matches(actual, expected.align(batch).data, rtol=1e-4)


def _lazy_log_z(*factors):
    with reflect:
        return sum_product(ops.logaddexp, ops.add, list(factors), frozenset("xy"))


def test_a_tape_entered_outside_a_block_records_it():
    # the tape, below compiling on the stack, gets the block's calls
    # (as in eager funsor, factors indexed inside a tape would be on it)
    domains = OrderedDict(f=Reals[2], g=Reals[2, 3], h=Reals[3, 4, 2])
    factors = [
        Variable("f", Reals[2])["x"],
        Variable("g", Reals[2, 3])["x", "y"],
        Variable("h", Reals[3, 4, 2])["y", "z", "i"],
    ]
    with AdjointTape() as tape:
        with compiling as interp:
            z = sum_product(
                ops.logaddexp, ops.add, factors, frozenset("xyz"), frozenset("i")
            )
    adjoints = tape.adjoint(ops.logaddexp, ops.add, z, targets=factors)
    program = interp.compile(
        {"z": z, "marginals": {n: adjoints[t] for n, t in zip("fgh", factors)}},
        inputs=domains,
    )
    arrays = random_arrays(domains)
    expected = eager_reference(plated_marginals, arrays)
    assert_matches(program(**arrays), expected, rtol=1e-4, atol=1e-5)


def test_a_tapes_adjoint_taken_after_its_block():
    with compiling as interp:
        f, g = Variable("f", Reals[2])["x"], Variable("g", Reals[2])["x"]
        with AdjointTape() as tape:
            log_z = (f + g).reduce(ops.logaddexp, "x")
    message = tape.adjoint(ops.logaddexp, ops.add, log_z, (f,))[f]
    program = interp.compile(message)
    arrays = random_arrays({"f": Reals[2], "g": Reals[2]})
    f_, g_ = Tensor(arrays["f"])["x"], Tensor(arrays["g"])["x"]
    with AdjointTape() as eager_tape:
        eager_log_z = (f_ + g_).reduce(ops.logaddexp, "x")
    expected = eager_tape.adjoint(ops.logaddexp, ops.add, eager_log_z, (f_,))[f_]
    assert program.inputs == ("g",)  # f's backward message is g
    assert_matches(program(g=arrays["g"]), expected.data)


def test_memoize_entered_outside_a_block():
    with memoize():
        program = compile_in_block(memoized_marginals, f=Reals[3], g=Reals[3, 2])
    arrays = random_arrays({"f": Reals[3], "g": Reals[3, 2]})
    expected = eager_reference(memoized_marginals, arrays)
    assert_matches(program(**arrays), expected, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------- sampling
N = 4000


def draw(program, arrays, key):
    """Call a sampling program (on jax with an rng_key input)."""
    if BACKEND == "jax":
        import jax

        return program(**arrays, rng_key=jax.random.PRNGKey(key))
    return program(**arrays)


def categorical_expectation(logits):
    """E[logits[k]] under k ~ softmax(logits), by Monte Carlo (funsor's
    discrete sampler: Tensor._sample)."""
    f = logits["k"]
    with MonteCarlo(particle=Bint[N]):
        estimate = Integrate(f - f.reduce(ops.logaddexp, "k"), f, frozenset({"k"}))
    return {"mean": estimate.reduce(ops.mean, "particle"), "draws": estimate}


LOGITS = np.array([0.0, 1.0, 2.0])


def check_categorical_draws(program):
    assert any(isinstance(o.op, RANDOM_OPS) for o in program.operations)
    assert ("rng_key" in program.inputs) == (BACKEND == "jax")
    arrays = {"logits": from_numpy(LOGITS)}
    first, second = draw(program, arrays, 0), draw(program, arrays, 1)
    a, b = to_numpy(first["draws"]), to_numpy(second["draws"])
    assert a.shape == (N,) and not np.array_equal(a, b)
    # the draws take the values logits[k] with softmax frequencies
    probs = np.exp(LOGITS) / np.exp(LOGITS).sum()
    freqs = np.array([np.mean(np.isclose(a, v)) for v in LOGITS])
    stderr = np.sqrt(probs * (1 - probs) / N)
    assert np.all(np.abs(freqs - probs) < 5 * stderr)
    exact = (probs * LOGITS).sum()
    assert abs(float(to_numpy(first["mean"])) - exact) < 5 * a.std() / np.sqrt(N)
    if BACKEND != "jax":  # funsor's eager jax sampler needs a key we cannot pass
        eager = to_numpy(eager_reference(categorical_expectation, arrays)["draws"])
        stderr = np.sqrt(a.var() / N + eager.var() / N)
        assert abs(a.mean() - eager.mean()) < 5 * stderr


def test_discrete_sampler_is_live_and_matches_eager_statistics(compile_with):
    check_categorical_draws(compile_with(categorical_expectation, logits=Reals[3]))


def test_montecarlo_entered_outside_the_block_applies_inside():
    with MonteCarlo(particle=Bint[N]):
        with compiling as interp:
            f = Variable("logits", Reals[3])["k"]
            estimate = Integrate(f - f.reduce(ops.logaddexp, "k"), f, "k")
    program = interp.compile(
        {"mean": estimate.reduce(ops.mean, "particle"), "draws": estimate}
    )
    check_categorical_draws(program)


def test_sample_in_a_block_keeps_inputs_and_draws_once_per_call():
    with compiling as interp:
        logits = Variable("logits", Reals[3])["k"]
        sample = logits.sample("k", OrderedDict(particle=Bint[N]))
        points = funsor.montecarlo.extract_samples(sample)["k"]
        expected = {"logits": Reals[3], "k": Bint[3], "particle": Bint[N]}
        if BACKEND == "jax":  # draws take their key from the program's input
            expected["rng_key"] = Reals[2]
        assert dict(sample.inputs) == expected
        # the point and its one-hot log-density come from one draw
        log_density = sample.reduce(ops.logaddexp, "k")
    program = interp.compile((points, log_density, sample))
    arrays = {"logits": from_numpy(LOGITS)}
    points, log_density, dense = (to_numpy(v) for v in draw(program, arrays, 3))
    if list(sample.inputs).index("k") < list(sample.inputs).index("particle"):
        dense = dense.T  # the output layout follows sample.inputs
    assert points.shape == (N,) and dense.shape == (N, 3)
    # dense[p, k] is finite exactly at k == points[p]
    assert np.array_equal(np.argmax(dense, -1), points)
    assert np.isfinite(log_density).all()


def test_sampling_program_pickles(compile_with):
    program = pickle.loads(
        pickle.dumps(compile_with(categorical_expectation, logits=Reals[3]))
    )
    out = draw(program, {"logits": from_numpy(LOGITS)}, 2)
    assert to_numpy(out["draws"]).shape == (N,)


@pytest.mark.skipif(BACKEND != "jax", reason="keys are program inputs on jax only")
def test_jax_draws_are_a_function_of_the_key(compile_with):
    program = compile_with(categorical_expectation, logits=Reals[3])
    arrays = {"logits": from_numpy(LOGITS)}
    same = [to_numpy(draw(program, arrays, 7)["draws"]) for _ in range(2)]
    other = to_numpy(draw(program, arrays, 8)["draws"])
    assert np.array_equal(*same) and not np.array_equal(same[0], other)


@pytest.mark.skipif(BACKEND == "numpy", reason="funsor has no numpy distributions")
def test_distribution_sampler_is_live_and_matches_eager_statistics(compile_with):
    dist = importlib.import_module(f"funsor.{BACKEND}.distributions")

    def gamma_moments(log_rate):
        d = dist.Gamma(3.0, ops.exp(log_rate), value="x")
        x = funsor.Variable("x", Real)
        with MonteCarlo(particle=Bint[N]):
            mean = Integrate(d, x, frozenset({"x"}))
        with MonteCarlo(particle=Bint[N]):
            square = Integrate(d, x * x, frozenset({"x"}))
        return mean, square

    program = compile_with(gamma_moments, log_rate=Real)
    arrays = {"log_rate": from_numpy(np.array(np.log(2.0), np.float32))}
    first, second = draw(program, arrays, 0), draw(program, arrays, 1)
    mean, square = (np.asarray(to_numpy(v)) for v in first)
    assert mean.shape == (N,) and not np.allclose(mean, to_numpy(second[0]))
    # two Monte Carlo blocks draw independently
    assert not np.allclose(mean**2, square)
    # Gamma(3, 2): mean 1.5, second moment var + mean^2 = 0.75 + 2.25 = 3
    assert abs(mean.mean() - 1.5) < 5 * mean.std() / np.sqrt(N)
    assert abs(square.mean() - 3.0) < 5 * square.std() / np.sqrt(N)
    if BACKEND == "torch":
        eager = np.asarray(to_numpy(eager_reference(gamma_moments, arrays)[0]))
        stderr = np.sqrt(mean.var() / N + eager.var() / N)
        assert abs(mean.mean() - eager.mean()) < 5 * stderr


@pytest.mark.skipif(BACKEND == "numpy", reason="funsor has no numpy distributions")
def test_normal_and_mvn_samplers_are_live_with_the_right_moments(compile_with):
    # funsor turns Normal / MultivariateNormal into Gaussians and samples
    # those; the tracer computes both with funsor.ops
    dist = importlib.import_module(f"funsor.{BACKEND}.distributions")

    def moments(loc, log_scale, mvn_loc):
        x, y = funsor.Variable("x", Real), funsor.Variable("y", Reals[2])
        normal = dist.Normal(loc, ops.exp(log_scale), value="x")
        scale_tril = Tensor(from_numpy(np.array([[1.0, 0.0], [0.5, 2.0]], np.float32)))
        mvn = dist.MultivariateNormal(mvn_loc, scale_tril=scale_tril, value="y")
        with MonteCarlo(particle=Bint[N]):
            a = Integrate(normal, x, frozenset({"x"}))
            b = Integrate(mvn, y, frozenset({"y"}))
        return a, b

    program = compile_with(moments, loc=Real, log_scale=Real, mvn_loc=Reals[2])
    arrays = {
        "loc": from_numpy(np.array(1.5, np.float32)),
        "log_scale": from_numpy(np.array(np.log(2.0), np.float32)),
        "mvn_loc": from_numpy(np.array([-1.0, 3.0], np.float32)),
    }
    (a, b), (a2, _) = draw(program, arrays, 0), draw(program, arrays, 1)
    a, b = np.asarray(to_numpy(a)), np.asarray(to_numpy(b))
    assert a.shape == (N,) and b.shape == (N, 2)
    assert not np.allclose(a, to_numpy(a2))
    assert abs(a.mean() - 1.5) < 5 * 2.0 / np.sqrt(N)
    assert abs(a.std() - 2.0) < 0.15
    np.testing.assert_allclose(b.mean(0), [-1.0, 3.0], atol=5 * 2.3 / np.sqrt(N))
    cov = np.array([[1.0, 0.5], [0.5, 4.25]])
    np.testing.assert_allclose(np.cov(b.T), cov, rtol=0.15, atol=0.1)
    if BACKEND == "torch":  # eager funsor draws from the same distribution
        eager = np.asarray(to_numpy(eager_reference(moments, arrays)[0]))
        assert abs(a.mean() - eager.mean()) < 5 * np.sqrt(a.var() / N + eager.var() / N)


# ----------------------------------------------------------- refused inputs
def test_output_nesting_and_layout_follow_eager(compile_with):
    def fn(f, g):
        forward, backward = forward_backward(
            ops.logaddexp, ops.add, g["b", "a"] + f["a"]
        )
        return (forward, {"all": list(backward.values())})

    program = compile_with(fn, f=Reals[2], g=Reals[3, 2])
    arrays = random_arrays(OrderedDict(f=Reals[2], g=Reals[3, 2]))
    assert_matches(program(**arrays), eager_reference(fn, arrays), rtol=1e-4)


def test_data_of_a_symbolic_funsor_points_to_trace_function(compile_with):
    def fn(f):
        return Tensor(f.data * 2)  # backend arithmetic on .data

    with pytest.raises(AttributeError, match=r"\.data of a symbolic.*trace_function"):
        compile_with(fn, f=Reals[2])


def test_segments_refuse_backend_calls_on_their_values():
    # a segment's values are symbolic: a backend call has no value to use
    with compiling:
        x = Variable("x", Reals[2])
        segment = Segment({"x"}, current_recording())

        def outside_ops(world):
            return Tensor(backend_exp(world.shadow(x).data))

        with pytest.raises(ConcretizationError, match=AT_HELPERS):
            segment.embed(segment.run(outside_ops))


def test_gaussians_of_compile_function_refuse_backend_calls_and_record_operators():
    inputs = OrderedDict(x=Reals[2])

    def fn(w, P):
        g = Gaussian(white_vec=w, prec_sqrt=P, inputs=inputs)
        return g.reduce(ops.logaddexp, "x") + Tensor(backend_exp(g.white_vec)).sum()

    with pytest.raises(ConcretizationError, match=AT_HELPERS):
        compile_function(fn, w=Reals[2], P=Reals[2, 2])

    def doubled(w, P):
        g = Gaussian(white_vec=w, prec_sqrt=P, inputs=inputs)
        # a Python operator on the Gaussian's (symbolic) array: recorded
        return g.reduce(ops.logaddexp, "x") + Tensor(g.white_vec * 2).sum()

    program = compile_function(doubled, w=Reals[2], P=Reals[2, 2])
    w, P = randn(2), ops.new_eye(randn(2), (2,)) + 0.5
    assert_matches(program(w=w, P=P), doubled(w, P).data)


def test_gaussian_of_symbolic_arrays_in_a_block_points_to_compile_function():
    with pytest.raises(NotImplementedError, match="Gaussian.*compile_function"):
        with compiling:
            Gaussian(
                white_vec=Variable("w", Reals[2]),
                prec_sqrt=Variable("P", Reals[2, 2]),
                inputs=OrderedDict(x=Reals[2]),
            )


# --------------------------------------------- generated factor graphs
SIZES = {"a": 2, "b": 3, "c": 2, "d": 4}


@st.composite
def factor_graphs(draw):
    """Scopes of 1-4 discrete factors over variables a-d, and whether
    variable d is a plate (it then appears in no factor's sum)."""
    scopes = draw(
        st.lists(
            st.lists(
                st.sampled_from(sorted(SIZES)), min_size=1, max_size=3, unique=True
            ),
            min_size=1,
            max_size=4,
        )
    )
    plated = draw(st.booleans())
    return [tuple(scope) for scope in scopes], plated


@settings(max_examples=20, deadline=None)
@given(factor_graphs(), st.sampled_from(["tape", "forward_backward"]))
def test_generated_factor_graph_marginals_match_eager(graph, how):
    scopes, plated = graph
    names = sorted(set().union(*scopes))
    plates = frozenset({"d"} & set(names)) if plated else frozenset()
    eliminate = frozenset(names)
    domains = OrderedDict(
        (f"f{i}", Reals[tuple(SIZES[n] for n in scope)])
        for i, scope in enumerate(scopes)
    )

    def marginals(**tables):
        factors = [t[scope] for t, scope in zip(tables.values(), scopes)]
        if how == "tape":
            with AdjointTape() as tape:
                z = sum_product(ops.logaddexp, ops.add, factors, eliminate, plates)
            adjoints = tape.adjoint(ops.logaddexp, ops.add, z, targets=factors)
        else:
            with reflect:
                z = sum_product(ops.logaddexp, ops.add, factors, eliminate, plates)
            z, adjoints = forward_backward(ops.logaddexp, ops.add, z)
        return z, [adjoints[f] for f in factors]

    program = compile_in_block(marginals, **domains)
    arrays = random_arrays(domains)
    assert_matches(program(**arrays), eager_reference(marginals, arrays), rtol=1e-4)


def test_bint_delta_lowers_to_its_log_indicator():
    # a sample over a Bint variable, compiled densely; funsor's reference
    # substitutes every value of k into the Delta
    points = Tensor(from_numpy(np.array([2, 0, 1, 2])), OrderedDict(p=Bint[4]), 3)
    expr = Delta("k", points) + Variable("f", Reals[3])["k"]
    program = compile_funsor(expr)
    arrays = random_arrays({"f": Reals[3]})
    every_k = Tensor(from_numpy(np.arange(3)), OrderedDict(k=Bint[3]), 3)
    expected = expr(f=Tensor(arrays["f"]))(k=every_k)
    order = tuple(n for n, d in expr.inputs.items() if d.dtype != "real")
    actual = to_numpy(program(**arrays))
    assert np.isneginf(actual).sum() == 4 * 2  # one finite entry per point
    finite = np.isfinite(actual)
    reference = to_numpy(expected.align(order).data)
    assert np.array_equal(finite, np.isfinite(reference))
    assert_matches(actual[finite], reference[finite])


def test_block_programs_run_in_a_fresh_process(tmp_path):
    # a sampler and an adjoint compiled in a block hold no funsor terms
    def fn(logits, g, h):
        _, marginals = lazy_forward_backward(logits, g, h)
        return categorical_expectation(logits)["mean"], marginals

    domains = {"logits": Reals[2], "g": Reals[2, 3], "h": Reals[3, 4]}
    program = compile_in_block(fn, **domains)
    arrays = random_arrays(domains)
    if BACKEND == "jax":
        import jax

        arrays["rng_key"] = jax.random.PRNGKey(0)
    mean, marginals = run_in_fresh_process(
        program, arrays, tmp_path, "funsor_lowering.lowering.interpretations"
    )
    expected_mean, expected_marginals = program(**arrays)
    assert to_numpy(mean).shape == ()  # a fresh Monte Carlo estimate
    assert_matches(marginals, expected_marginals)
