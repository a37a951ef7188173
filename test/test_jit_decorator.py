"""``funsor_lowering.jit`` as a user runs existing funsor code with it:
results, ``.inputs`` and layout equal eager funsor's on the same data;
compiled once per signature; static arguments; errors; threads; gradients.
Reference: the undecorated function, run by eager funsor."""

import math
import threading
from collections import OrderedDict
from functools import partial

import funsor
import numpy as np
import pytest
from funsor import ops
from funsor.domains import Bint, Real, Reals
from funsor.gaussian import Gaussian
from funsor.interpretations import lazy
from funsor.sum_product import (
    MarkovProduct,
    modified_partial_sum_product,
    sarkka_bilmes_product,
    sequential_sum_product,
    sum_product,
)
from funsor.tensor import Tensor
from funsor.terms import Funsor, Variable
from funsor.testing import random_gaussian, random_tensor

from funsor_lowering import OpProgram, jit
from funsor_lowering.ops.concretization import ConcretizationError

from .helpers import assert_matches, call_in_threads, from_numpy, to_numpy

BACKEND = funsor.get_backend()


def assert_same_funsor(actual, expected, rtol=1e-5, atol=1e-6):
    """Same type, ``.inputs`` (in order), ``.output`` and close data."""
    assert type(actual) is type(expected), (type(actual), type(expected))
    assert list(actual.inputs.items()) == list(expected.inputs.items())
    assert actual.output == expected.output
    if isinstance(expected, Tensor):
        assert_matches(actual.data, expected.data, rtol, atol)
    elif isinstance(expected, Gaussian):
        # the same distribution: compare densities at random points
        point = {
            k: Tensor(from_numpy(np.random.randn(*d.shape)))
            for k, d in expected.inputs.items()
            if d.dtype == "real"
        }
        assert_matches(actual(**point).data, expected(**point).data, rtol, atol)


def hmm(init, trans, time_var):
    """An HMM's marginal: a Markov chain over ``time`` with funsor's
    ``_PREV_`` naming (as funsor's own sarkka_bilmes tests name it)."""
    chain = sarkka_bilmes_product(ops.logaddexp, ops.add, trans, time_var, frozenset())
    return (init + chain).reduce(ops.logaddexp)


def test_equals_eager_and_compiles_once_per_signature():
    calls = []

    def model(factors, eliminate, plates):
        calls.append(1)
        return sum_product(ops.logaddexp, ops.add, factors, eliminate, plates)

    jitted = jit(model)
    inputs = [OrderedDict(a=Bint[2]), OrderedDict(a=Bint[2], i=Bint[3], b=Bint[4])]
    eliminate, plates = frozenset("ab"), frozenset("i")
    for _ in range(3):
        factors = [random_tensor(i) for i in inputs]
        actual = jitted(factors, eliminate, plates)
        assert_same_funsor(actual, model(factors, eliminate, plates))
    # traced once; the later calls ran the program, not the function
    assert len(calls) == 1 + 3
    assert jitted.cache_info() == {"signatures": 1, "compiled": 1, "cached": 2}


def test_sarkka_bilmes_with_prev_lags():
    duration = 5
    trans = random_tensor(
        OrderedDict(time=Bint[duration], a=Bint[3], b=Bint[2], _PREV_b=Bint[2])
    )
    init = random_tensor(OrderedDict(b=Bint[2], _PREV_b=Bint[2]))
    time_var = Variable("time", Bint[duration])
    expected = hmm(init, trans, time_var)
    assert_same_funsor(jit(hmm)(init, trans, time_var), expected)


@pytest.mark.parametrize(
    "impl",
    [sequential_sum_product, MarkovProduct, partial(sequential_sum_product)],
    ids=["sequential", "MarkovProduct", "partial"],
)
@pytest.mark.parametrize("state", [Bint[3], Real], ids=["discrete", "gaussian"])
def test_sequential_with_batch_inputs(impl, state):
    inputs = OrderedDict(foo=Bint[2], time=Bint[4], prev=state, curr=state)
    trans = random_gaussian(inputs) if state.dtype == "real" else random_tensor(inputs)
    args = (ops.logaddexp, ops.add, trans, Variable("time", Bint[4]), {"prev": "curr"})
    assert_same_funsor(jit(impl)(*args), impl(*args), rtol=1e-4, atol=1e-4)


def test_modified_partial_sum_product_returns_lists():
    factors = [
        random_tensor(OrderedDict(time=Bint[3], x_prev=Bint[2], x_curr=Bint[2])),
        random_tensor(OrderedDict(time=Bint[3], x_curr=Bint[2], i=Bint[2])),
    ]
    args = (ops.logaddexp, ops.add, factors, frozenset({"time", "x_prev", "x_curr"}))
    plates = {"time": {"x_prev": "x_curr"}, "i": {}}
    actual, expected = jit(modified_partial_sum_product)(*args, plates), None
    expected = modified_partial_sum_product(*args, plates)
    assert type(actual) is type(expected) and len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert_same_funsor(a, e)


def test_arrays_numbers_and_nestings():
    def fn(x, scale, parts):
        y = ops.exp(x) * scale
        return {"y": y, "pair": (parts["a"] + y, [ops.sum(y, 0), 3]), "scale": scale}

    x, a = from_numpy(np.random.randn(3)), from_numpy(np.random.randn(3))
    actual = jit(fn)(x, 2.0, {"a": a})
    expected = fn(x, 2.0, {"a": a})
    assert actual["scale"] == 2.0 and actual["pair"][1][1] == 3
    assert_matches(actual["y"], expected["y"])
    assert_matches(actual["pair"][0], expected["pair"][0])
    assert_matches(actual["pair"][1][0], expected["pair"][1][0])


def test_gaussian_in_and_out():
    def marginal(g):
        return g.reduce(ops.logaddexp, "x")

    g = random_gaussian(OrderedDict(i=Bint[2], x=Reals[2], y=Real))
    assert_same_funsor(jit(marginal)(g), marginal(g), rtol=1e-4, atol=1e-4)


def test_signature_changes_recompile():
    jitted = jit(lambda t, k: (t * k).reduce(ops.add, "i"))
    t3 = random_tensor(OrderedDict(i=Bint[3]))
    t4 = random_tensor(OrderedDict(i=Bint[4]))
    tj = random_tensor(OrderedDict(j=Bint[2], i=Bint[3]))
    for t, k in [(t3, 2.0), (t3, 2.0), (t4, 2.0), (t3, 3.0), (tj, 2.0), (t3, 2)]:
        expected = (t * k).reduce(ops.add, "i")
        assert_same_funsor(jitted(t, k), expected)
    # shapes, static values (2.0, 3.0 and 2 differ) and inputs are signatures
    assert jitted.cache_info()["signatures"] == 5


def test_dtype_is_part_of_the_signature():
    jitted = jit(lambda x: ops.exp(x).sum())
    dtypes = set()
    for dtype in ["float32", "float64", "float32"]:
        x = from_numpy(np.random.randn(3).astype(dtype))  # jax may keep float32
        actual = jitted(x)
        assert actual.dtype == x.dtype
        assert_matches(actual, ops.exp(x).sum(), rtol=1e-5)
        dtypes.add(str(x.dtype))
    assert jitted.cache_info()["signatures"] == len(dtypes)


def test_static_argnums_and_argnames():
    def power(x, n, *, axis):
        return ops.sum(x**n, axis)

    x = from_numpy(np.random.rand(2, 3))
    n = from_numpy(np.array(2.0))
    jitted = jit(power, static_argnums=1, static_argnames="axis")
    with pytest.raises(TypeError, match="static argument 1 of power is an array"):
        jitted(x, n, axis=0)  # arrays are not static, as in jax
    with pytest.raises(TypeError, match="static argument 'axis' .* unhashable type"):
        jitted(x, 2, axis=[0])
    assert_matches(jitted(x, 3, axis=1), power(x, 3, axis=1))
    with pytest.raises(
        TypeError, match=r"argument 0\['k'\] of <lambda> of type bytearray is neither"
    ):
        jit(lambda d: d)({"k": bytearray(b"x")})


def test_bounded_cache():
    jitted = jit(lambda x: ops.exp(x), max_signatures=2)
    for n in [1, 2, 3, 1]:
        jitted(from_numpy(np.zeros(n)))
    assert jitted.cache_info() == {"signatures": 2, "compiled": 4}


def test_program_prints():
    trans = random_tensor(OrderedDict(time=Bint[4], b=Bint[2], _PREV_b=Bint[2]))
    init = random_tensor(OrderedDict(b=Bint[2], _PREV_b=Bint[2]))
    program = jit(hmm).program(init, trans, Variable("time", Bint[4]))
    assert isinstance(program, OpProgram)
    listing = str(program)
    assert listing.startswith("OpProgram(init_data: real[2,2], trans_data: real[4,2,2]")
    assert "logsumexp" in listing


def test_branch_on_traced_value_names_the_line():
    def fn(t):
        if t.data.sum() > 0:  # a Python branch on a traced value
            return t
        return -t

    with pytest.raises(ConcretizationError, match=r"test_jit_decorator\.py:\d+"):
        jit(fn)(random_tensor(OrderedDict(i=Bint[2])))


def test_other_interpretations_run_as_written():
    jitted = jit(lambda t: t.reduce(ops.logaddexp, "i"))
    t = random_tensor(OrderedDict(i=Bint[2]))
    with lazy:
        result = jitted(t)
    assert isinstance(result, Funsor) and not isinstance(result, Tensor)
    assert jitted.cache_info() == {"signatures": 0, "inlined": 1}


def test_threads():
    jitted = jit(hmm)
    errors_seen = []

    def run(k):
        duration = 2 + k % 4
        trans = random_tensor(
            OrderedDict(time=Bint[duration], b=Bint[2], _PREV_b=Bint[2])
        )
        init = random_tensor(OrderedDict(b=Bint[2], _PREV_b=Bint[2]))
        time_var = Variable("time", Bint[duration])
        for _ in range(3):
            actual = jitted(init, trans, time_var)
            with lock:  # eager funsor, one thread at a time for the reference
                expected = hmm(init, trans, time_var)
            try:
                assert_same_funsor(actual, expected)
            except AssertionError as error:
                errors_seen.append(error)

    lock = threading.Lock()
    assert call_in_threads(run, 8) == [] and errors_seen == []
    assert jitted.cache_info()["signatures"] == 4


@pytest.mark.skipif(BACKEND != "torch", reason="torch autograd")
def test_torch_gradients_equal_eager():
    import torch

    def loss(trans, init):
        t = Tensor(trans, OrderedDict(time=Bint[4], b=Bint[3], _PREV_b=Bint[3]))
        i = Tensor(init, OrderedDict(b=Bint[3], _PREV_b=Bint[3]))
        return hmm(i, t, Variable("time", Bint[4])).data

    def grads(fn):
        torch.manual_seed(0)
        trans = torch.randn(4, 3, 3, requires_grad=True)
        init = torch.randn(3, 3, requires_grad=True)
        fn(trans, init).backward()
        return trans.grad, init.grad

    for actual, expected in zip(grads(jit(loss)), grads(loss)):
        assert_matches(actual, expected)


@pytest.mark.skipif(BACKEND != "torch", reason="torch autograd")
@pytest.mark.parametrize("time_steps", [4, 7])
@pytest.mark.parametrize("chain", ["sequential", "sarkka_bilmes"])
def test_torch_gradients_with_impossible_transitions_equal_eager(chain, time_steps):
    # -inf transition log-probabilities: a reduction over -inf entries only
    # had NaN gradients in the program (torch.logsumexp's backward), finite
    # ones in eager funsor
    import torch

    S = 3
    torch.manual_seed(time_steps)
    trans = torch.randn(time_steps, S, S)
    trans[:, 0, 1] = -math.inf
    trans[:, 2, :2] = -math.inf
    init = torch.randn(S)
    prev, curr = ("x_prev", "x_curr") if chain == "sequential" else ("_PREV_x", "x")
    time = Variable("time", Bint[time_steps])

    def marginal(init, trans):
        t = Tensor(
            trans,
            OrderedDict(time=Bint[time_steps], **{prev: Bint[S]}, **{curr: Bint[S]}),
        )
        if chain == "sequential":
            product = sequential_sum_product(
                ops.logaddexp, ops.add, t, time, {prev: curr}
            )
        else:
            product = sarkka_bilmes_product(
                ops.logaddexp, ops.add, t, time, frozenset()
            )
        return (Tensor(init, OrderedDict({prev: Bint[S]})) + product).reduce(
            ops.logaddexp
        )

    params = [init.requires_grad_(), trans.requires_grad_()]
    expected = torch.autograd.grad(marginal(*params).data, params)
    actual = torch.autograd.grad(jit(marginal)(*params).data, params)
    for a, e in zip(actual, expected, strict=True):
        assert torch.isfinite(e).all()
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(BACKEND != "jax", reason="jax.grad")
def test_jax_grad_equals_eager():
    import jax

    def loss(trans):
        t = Tensor(trans, OrderedDict(time=Bint[4], b=Bint[3], _PREV_b=Bint[3]))
        init = Tensor(jax.numpy.zeros((3, 3)), OrderedDict(b=Bint[3], _PREV_b=Bint[3]))
        return hmm(init, t, Variable("time", Bint[4])).data

    trans = jax.numpy.asarray(np.random.randn(4, 3, 3))
    jitted = jit(loss)
    actual = jax.grad(lambda x: jitted(x))(trans)
    expected = jax.grad(loss)(trans)
    assert_matches(actual, expected)
    assert_matches(jax.jit(jitted)(trans), loss(trans))


def test_identity_function():
    jitted = jit(lambda t: t)
    t = random_tensor(OrderedDict(i=Bint[2]))
    result = jitted(t)
    assert to_numpy(result.data).tolist() == to_numpy(t.data).tolist()


def test_cat_of_batched_parts_of_different_sizes_equals_eager():
    # funsor's Gaussian.sample of a subset of its variables (funsor's
    # test_sample_partial) joins batched parts of sizes 4, 6 and 1
    def join(x, y, z):
        return ops.cat((x, y, z), -1)

    x = random_tensor(OrderedDict(i=Bint[2]), Reals[4])
    y = random_tensor(OrderedDict(j=Bint[3]), Reals[6])
    z = random_tensor(OrderedDict(i=Bint[2]), Reals[1])
    assert_same_funsor(jit(join)(x, y, z), join(x, y, z))


@pytest.mark.parametrize("sampled", ["x", "xy", "y"])
def test_gaussian_sample_of_some_variables_has_eagers_shape(sampled):
    inputs = OrderedDict(i=Bint[2], x=Reals[4], y=Reals[2, 3])
    g = random_gaussian(inputs)
    sample_inputs = OrderedDict(particle=Bint[5])
    rng_key = np.array([0, 0], dtype=np.uint32) if BACKEND == "jax" else None

    def sample(g):
        return g.sample(frozenset(sampled), sample_inputs, rng_key)

    actual, expected = jit(sample)(g), sample(g)
    assert type(actual).__name__ == type(expected).__name__
    assert actual.inputs == expected.inputs and actual.output == expected.output


def test_adjoint_keys_are_the_callers_terms_and_adjoints_accumulate():
    # funsor's test_adjoint_subs_binary_reduce_slices: x enters twice, through
    # x(i=k) and x(j=k); its adjoint sums both paths, under the caller's keys
    from funsor.adjoint import adjoint
    from funsor.interpretations import reflect
    from funsor.terms import Slice

    x = random_tensor(OrderedDict(t=Bint[2], i=Bint[2], j=Bint[2]))
    k = Variable("k", Bint[2])
    with reflect:
        xik, xjk = x(i=k), x(j=k)
        xk = xik(t=Slice("t", 0, 2, 2, 2))
        yk = xjk(t=Slice("t", 1, 2, 2, 2))
        z = (xk * yk).reduce(ops.add, {"k"}).reduce(ops.mul, "t")
        z = z(i="i", j="j").reduce(ops.add, {"i", "j"})
    expected = adjoint(ops.add, ops.mul, z)
    jitted = jit(adjoint)
    actual = jitted(ops.add, ops.mul, z)
    assert x in actual and xik in actual and xjk in actual
    assert len(actual) == len(expected)
    for key in (x, xik, xjk):
        assert_same_funsor(
            actual[key].align(tuple(expected[key].inputs)), expected[key]
        )
    # x's two appearances hold one array: the program takes it once
    assert len(jitted.program(ops.add, ops.mul, z).inputs) == 1


def test_tensor_indexed_by_a_constant_state_under_moment_matching():
    # examples/slds.py: trans_probs[s_prev] with the initial state a
    # constant Tensor(0), inside a moment_matching model: funsor's eager
    # getitem indexes every dim of the data by an index array
    from funsor.interpretations import moment_matching

    def row(trans_probs):
        with moment_matching:
            s_prev = Tensor(from_numpy(np.array(0)), dtype=2)
            s_curr = Variable("s_0", Bint[2])
            return trans_probs[s_prev] + trans_probs[s_curr]

    probs = random_tensor(OrderedDict(), Reals[2, 2])
    assert_same_funsor(jit(row)(probs), row(probs))


@pytest.mark.parametrize("last", [-1, -3, 2])
def test_array_indexed_by_an_index_array_and_an_int_counts_ints_from_the_end(last):
    def pick(x, i):
        return x[i, last]

    x = from_numpy(np.random.randn(4, 3))
    i = from_numpy(np.array([3, 0, 2]))
    np.testing.assert_allclose(to_numpy(jit(pick)(x, i)), to_numpy(pick(x, i)))


def test_array_indexed_by_an_out_of_bounds_int_raises_index_error():
    def pick(x, i):
        return x[i, 3]

    x = from_numpy(np.random.randn(4, 3))
    with pytest.raises(IndexError, match="index 3 is out of bounds for size 3"):
        jit(pick)(x, from_numpy(np.array([0, 1])))


def test_complex_intermediates_with_real_and_imag_parts():
    # examples/talbot.py computes in complex numbers, returning .real
    def fn(x, w):
        z = ops.exp(x * w)
        return z.real + z.imag

    x = from_numpy(np.random.randn(3))
    w = from_numpy(np.array([1j, 0.5 + 2j, -1j]).astype(np.complex64))
    np.testing.assert_allclose(
        to_numpy(jit(fn)(x, w)), to_numpy(fn(x, w)), rtol=1e-6, atol=1e-6
    )


def test_captured_tensors_that_require_grad_stay_live_across_optimizer_steps():
    # torch users capture a module's parameters: the program holds them by
    # reference, and funsor.ops applied to them run on every call (never
    # folded into a constant, stacked into a copy, or frozen)
    torch = pytest.importorskip("torch")
    if funsor.get_backend() != "torch":
        pytest.skip("torch autograd")
    weight = torch.nn.Parameter(torch.tensor([0.5, -1.0, 2.0]))
    scale = torch.nn.Parameter(torch.tensor(0.3))

    def loss(x):
        return ops.sum(ops.mul(x, weight) * ops.exp(scale), 0)

    x = torch.tensor([1.0, 2.0, 3.0])
    jitted = jit(loss)
    optim = torch.optim.SGD([weight, scale], lr=0.1)
    for _ in range(3):
        optim.zero_grad()
        actual = jitted(x)
        actual.backward()
        actual_grads = [weight.grad.clone(), scale.grad.clone()]
        expected = loss(x)
        expected_grads = torch.autograd.grad(expected, [weight, scale])
        torch.testing.assert_close(actual, expected)
        for a, e in zip(actual_grads, expected_grads):
            torch.testing.assert_close(a, e)
        optim.step()
    assert jitted.cache_info()["compiled"] == 1


def test_captured_values_computed_with_autograd_outside_ops_are_refused():
    torch = pytest.importorskip("torch")
    if funsor.get_backend() != "torch":
        pytest.skip("torch autograd")
    from funsor_lowering.tracing.tracer import UntracedValueError

    scale = torch.nn.Parameter(torch.tensor(0.3))

    def loss(x):
        # a torch function with no exact funsor.ops equivalent
        return x * torch.nn.functional.softplus(scale)

    with pytest.raises(UntracedValueError, match=r"shape \(\), dtype torch.float32"):
        jit(loss)(torch.tensor([1.0, 2.0]))


def test_torch_calls_on_captured_parameters_are_recorded_live():
    # torch's transforms constrain parameters with Tensor methods and
    # operators (minipyro's param: transform_to(positive) is exp, then
    # 0.0 + 1.0 * x); these run as their funsor.ops on every call, and a
    # detached parameter is read afresh, not frozen at its first value
    torch = pytest.importorskip("torch")
    if funsor.get_backend() != "torch":
        pytest.skip("torch autograd")
    from torch.distributions import constraints, transform_to

    unconstrained = torch.nn.Parameter(torch.tensor([0.5, -1.0]))

    def loss(x):
        scale = transform_to(constraints.positive)(unconstrained)
        baseline = unconstrained.detach()
        return (x * scale - baseline).sum()

    x = torch.tensor([1.0, 2.0])
    jitted = jit(loss)
    optim = torch.optim.SGD([unconstrained], lr=0.5)
    for _ in range(3):
        optim.zero_grad()
        actual = jitted(x)
        actual.backward()
        expected = loss(x)
        (expected_grad,) = torch.autograd.grad(expected, [unconstrained])
        torch.testing.assert_close(actual, expected)
        torch.testing.assert_close(unconstrained.grad, expected_grad)
        optim.step()
    assert jitted.cache_info()["compiled"] == 1


def test_under_monte_carlo_compiles_and_draws_as_eager():
    # Pyro's and minipyro's training loops run inside MonteCarlo(): a
    # jitted call there compiles under it, its sample_inputs part of the
    # signature, and the compiling call takes eager's random numbers
    if BACKEND == "jax":
        pytest.skip("funsor's MonteCarlo on jax needs an rng_key (data)")
    from funsor.montecarlo import MonteCarlo

    def seed(value):
        np.random.seed(value)
        if BACKEND == "torch":
            import torch

            torch.manual_seed(value)

    g = random_gaussian(OrderedDict(i=Bint[3], x=Real))
    q = g - g.reduce(ops.logaddexp, "x")  # a normalized density over x

    def expectation(q):
        return funsor.Integrate(q, Variable("x", Real) ** 2, "x")

    jitted = jit(expectation)
    for sample_inputs, value in [({}, 1), ({}, 2), ({"n": Bint[4]}, 3)]:
        with MonteCarlo(**sample_inputs):
            seed(value)
            expected = expectation(q)
            seed(value)
            actual = jitted(q)
        assert_same_funsor(actual, expected)
    assert jitted.cache_info() == {"signatures": 2, "compiled": 2, "cached": 1}


def test_under_monte_carlo_code_that_does_not_trace_runs_as_written():
    # before MonteCarlo compiled, such calls always ran as written (funsor's
    # own LogNormal sampler computes with torch outside funsor.ops); a
    # signature that fails to trace there keeps running eagerly
    if BACKEND == "jax":
        pytest.skip("funsor's MonteCarlo on jax needs an rng_key (data)")
    from funsor.montecarlo import MonteCarlo

    def branching(t):
        return t if bool(to_numpy(t.data).sum() > 0) else -t  # a Python branch

    t = random_tensor(OrderedDict(i=Bint[2]))
    jitted = jit(branching)
    with MonteCarlo():
        for _ in range(2):
            assert_same_funsor(jitted(t), branching(t))
    assert jitted.cache_info() == {"signatures": 0, "inlined": 2}
