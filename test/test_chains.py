"""Chains in log space (HMM forward passes): compiled programs equal funsor's
eager evaluation, and on backends that loop fast (jax) they are one
``logsumexp_scan`` (``rules/chains.py``) whose gradients, ``vmap``,
``jit``, code and pickles agree too."""

import math
import pickle
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from funsor import ops
from funsor.domains import Bint, Reals
from funsor.sum_product import sum_product
from funsor.tensor import Tensor
from funsor.terms import Variable
from hypothesis import given, settings
from hypothesis import strategies as st

from funsor_lowering import compile_function, compile_funsor
from funsor_lowering.backends import array_backend
from funsor_lowering.lowering.rules.chains import SCAN_MIN_STEPS
from funsor_lowering.ops.extra_ops import (
    LogsumexpScanEmittingOp,
    LogsumexpScanOp,
    logsumexp_scan_emitting,
)

from .conftest import BACKEND
from .helpers import (
    assert_gradients_match,
    assert_matches,
    backend_randn,
    chain_sum_product,
    check_compiled,
    data_of,
    evaluate,
    from_numpy,
    random_arrays,
    run_in_fresh_process,
    to_numpy,
)

SCANS = array_backend(BACKEND).scans_chains


SCAN_OPS = (LogsumexpScanOp, LogsumexpScanEmittingOp)


def scans_in(program):
    return sum(isinstance(o.op, SCAN_OPS) for o in program.operations)


def hmm(steps, states, init=True, emit=(), flipped=(), reverse=False, separate=False):
    """An HMM's factors over ``x0 .. x{steps}`` from program inputs: an
    initial factor of ``x0``, transitions ``trans[t]`` of ``(x{t-1}, x{t})``
    (of ``(x{t}, x{t-1})`` for ``t`` in ``flipped``; inputs ``trans{t}`` of
    their own if ``separate``, as an unrolled model's sites), emissions
    ``emit[t]`` of ``x{t}`` for ``t`` in ``emit``; in reverse order if
    ``reverse``."""
    trans = Variable("trans", Reals[steps + 1, states, states])
    emission = Variable("emit", Reals[steps + 1, states])
    factors = [Variable("init", Reals[states])["x0"]] if init else []
    for t in range(1, steps + 1):
        pair = (f"x{t}", f"x{t - 1}") if t in flipped else (f"x{t - 1}", f"x{t}")
        step = Variable(f"trans{t}", Reals[states, states]) if separate else trans[t]
        factors.append(step[pair])
    factors += [emission[t][f"x{t}"] for t in sorted(emit)]
    return factors[::-1] if reverse else factors


@st.composite
def chains(draw):
    steps = draw(st.integers(SCAN_MIN_STEPS, 9))
    positions = st.sets(st.integers(0, steps))
    return dict(
        steps=steps,
        states=draw(st.integers(1, 3)),
        init=draw(st.booleans()),
        emit=draw(positions),
        flipped=draw(st.sets(st.integers(1, steps))),
        reverse=draw(st.booleans()),
        separate=draw(st.booleans()),
    ), draw(st.booleans())


@settings(max_examples=40)
@given(chains())
def test_chains_compile_to_what_funsor_computes(chain):
    spec, keep_last = chain
    factors = hmm(**spec)
    steps = spec["steps"]
    kept = {f"x{steps}"} if keep_last else set()
    program = check_compiled(chain_sum_product(factors, steps + 1, kept))
    assert scans_in(program) == (1 if SCANS else 0), program


def separate_chain(steps, emissions):
    """An unrolled HMM of separate factors (``trans1 .. trans{steps}``, and
    ``emit1 .. emit{steps}``, as per-step sites give): ``(model, domains,
    forward)``, ``model`` summing them by funsor's ``sum_product`` as a user
    calls it, ``forward(arrays)`` funsor's eager forward pass over them, one
    step per factor (its eager ``sum_product`` of so many separate factors
    would broadcast them all)."""
    emitted = set(range(1, steps + 1)) if emissions else set()

    def model(**inputs):
        factors = [inputs["init"]["x0"]]
        for t in range(1, steps + 1):
            factors.append(inputs[f"trans{t}"][f"x{t - 1}", f"x{t}"])
            if t in emitted:
                factors.append(inputs[f"emit{t}"][f"x{t}"])
        reduced = frozenset(f"x{t}" for t in range(steps + 1))
        return sum_product(ops.logaddexp, ops.add, factors, reduced, frozenset())

    def forward(arrays):
        alpha = Tensor(arrays["init"])["x0"]
        for t in range(1, steps + 1):
            alpha = alpha + Tensor(arrays[f"trans{t}"])[f"x{t - 1}", f"x{t}"]
            if t in emitted:
                alpha = alpha + Tensor(arrays[f"emit{t}"])[f"x{t}"]
            alpha = alpha.reduce(ops.logaddexp, f"x{t - 1}")
        return alpha.reduce(ops.logaddexp).data

    domains = OrderedDict(init=Reals[3])
    domains.update((f"trans{t}", Reals[3, 3]) for t in range(1, steps + 1))
    domains.update((f"emit{t}", Reals[3]) for t in sorted(emitted))
    return model, domains, forward


@pytest.mark.parametrize("emissions", [False, True])
@pytest.mark.parametrize("steps", [10, 100, 1000])
def test_separate_factors_compile_to_log_depth_rounds(steps, emissions):
    """A chain of separate factors is stacked once: one scan on jax, else
    ``ceil(log2(steps))`` rounds of batched steps; O(log T) operations
    where a forward pass takes two per step."""
    model, domains, forward = separate_chain(steps, emissions)
    program = compile_function(model, **domains)
    rounds = math.ceil(math.log2(steps))
    bound = 12 if SCANS else 8 * rounds + 12
    assert len(program.operations) <= bound, (len(program.operations), bound)
    assert scans_in(program) == (1 if SCANS else 0)
    arrays = random_arrays(domains)
    assert_matches(program(**arrays), forward(arrays), rtol=1e-5)


def test_separate_factor_programs_pickle_and_run_in_threads(tmp_path):
    """A rounds (or scan) program unpickled in a fresh process, and called
    from several threads at once, gives funsor's eager forward pass."""
    model, domains, forward = separate_chain(37, emissions=True)
    program = compile_function(model, **domains)
    arrays = random_arrays(domains)
    expected = forward(arrays)
    fresh = run_in_fresh_process(
        program, arrays, tmp_path, "funsor_lowering.lowering.rules"
    )
    assert_matches(fresh, expected, rtol=1e-5)
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda _: program(**arrays), range(8)))
    for result in results:
        assert_matches(result, expected, rtol=1e-5)


@pytest.mark.skipif(BACKEND == "numpy", reason="numpy has no autodiff")
def test_separate_factor_gradients_are_funsors():
    # in the suite's float dtype (FUNSOR_FLOAT_DTYPE), over wide ranges
    model, domains, forward = separate_chain(13, emissions=True)
    program = compile_function(model, **domains)
    rng = np.random.RandomState(1)
    arrays = {k: from_numpy(rng.randn(*d.shape) * 20) for k, d in domains.items()}
    assert_gradients_match(lambda a: program(**a), forward, arrays)


def test_an_hmm_with_emissions_is_a_few_ops_around_one_scan():
    factors = hmm(50, 4, emit=range(51))
    # (values: funsor's eager plan of this chain broadcasts 4**17 elements;
    # test_chains_compile_to_what_funsor_computes checks shorter ones)
    program = compile_funsor(chain_sum_product(factors, 51))
    if SCANS:  # stacked steps and emissions: slices of the inputs, one scan
        assert scans_in(program) == 1 and len(program.operations) <= 8, program
        (scan,) = [o for o in program.operations if isinstance(o.op, SCAN_OPS)]
        assert isinstance(scan.op, LogsumexpScanEmittingOp), program
    else:  # the planner's rounds of pairwise steps, batched per round
        assert scans_in(program) == 0 and len(program.operations) <= 120, program


def test_a_chain_with_other_factors_is_left_to_the_planner():
    """A factor linking three inputs breaks the chain: no scan, same value."""
    factors = hmm(6, 2)
    factors.append(Variable("w", Reals[2, 2, 2])["x1", "x2", "x3"])
    program = check_compiled(chain_sum_product(factors, 7))
    assert scans_in(program) == 0


def _cycle_factors():
    # x0 linked to x1 ... and to x6: a cycle, not a path
    factors = hmm(6, 2)
    factors.append(Variable("w", Reals[2, 2])["x6", "x0"])
    return factors


def test_a_cycle_is_left_to_the_planner():
    program = check_compiled(chain_sum_product(_cycle_factors(), 7))
    assert scans_in(program) == 0


def _eager_forward_pass(factors, steps, batch):
    """funsor's eager sum-product of a chain's ``factors`` over ``x0 ..
    x{steps - 1}``: a Tensor of the batch inputs and ``x{steps}``."""
    from funsor.sum_product import sum_product

    reduced = frozenset(f"x{t}" for t in range(steps))
    result = sum_product(ops.logaddexp, ops.add, factors, reduced, frozenset())
    return result.align(tuple(batch) + (f"x{steps}",))


@pytest.mark.parametrize("shape", [(), (3,)])
def test_the_backend_scan_is_funsors_forward_pass(shape):
    """The backend's ``logsumexp_scan`` against funsor's eager sum-product
    of the same factors (leading batch axes as a named batch input)."""
    steps, states = 5, 3
    alpha = backend_randn(*shape, states)
    matrices = backend_randn(*shape, steps, states, states)
    batch = {"b": Bint[shape[0]]} if shape else {}
    factors = [Tensor(alpha, batch)["x0"]] + [
        Tensor(matrices[..., t, :, :], batch)[f"x{t}", f"x{t + 1}"]
        for t in range(steps)
    ]
    expected = _eager_forward_pass(factors, steps, batch)
    backend = array_backend(BACKEND)
    function, extra, kwargs = backend.fast_call(
        LogsumexpScanOp, (alpha, matrices), (), None
    )
    assert_matches(function(alpha, matrices, *extra, **kwargs), expected.data)


@pytest.mark.parametrize("shape", [(), (3,)])
def test_the_backend_emitting_scan_is_funsors_forward_pass(shape):
    """The backend's ``logsumexp_scan_emitting`` against funsor's eager
    sum-product of the same factors with an emission factor per step."""
    steps, states = 5, 3
    alpha = backend_randn(*shape, states)
    matrices = backend_randn(*shape, steps, states, states)
    emissions = backend_randn(steps, states)  # shared by the batch
    batch = {"b": Bint[shape[0]]} if shape else {}
    factors = [Tensor(alpha, batch)["x0"]]
    for t in range(steps):
        factors.append(Tensor(matrices[..., t, :, :], batch)[f"x{t}", f"x{t + 1}"])
        factors.append(Tensor(emissions[t])[f"x{t + 1}"])
    expected = _eager_forward_pass(factors, steps, batch)
    parts = (alpha, matrices, emissions)
    function, extra, kwargs = array_backend(BACKEND).fast_call(
        LogsumexpScanEmittingOp, (parts,), (), None
    )
    assert_matches(function(parts, *extra, **kwargs), expected.data)
    # and funsor's evaluation of the op (its generic definition)
    assert_matches(logsumexp_scan_emitting(parts), expected.data)


def test_a_scan_over_no_steps_is_its_initial_value():
    backend = array_backend(BACKEND)
    alpha, matrices = backend_randn(3), backend_randn(0, 3, 3)
    function, extra, kwargs = backend.fast_call(
        LogsumexpScanOp, (alpha, matrices), (), None
    )
    assert_matches(function(alpha, matrices, *extra, **kwargs), alpha)


def _hmm_program_and_arrays(steps=8, states=3):
    factors = hmm(steps, states, emit=range(steps + 1))
    expr = chain_sum_product(factors, steps + 1)
    arrays = {
        "init": backend_randn(states),
        "trans": backend_randn(steps + 1, states, states),
        "emit": backend_randn(steps + 1, states),
    }
    return expr, compile_funsor(expr), arrays


def test_chain_programs_vmap_as_a_loop_does():
    expr, program, arrays = _hmm_program_and_arrays()
    batched = {k: backend_randn(4, *np.shape(v)) for k, v in arrays.items()}
    vmapped = program.vmap({"init": 0, "trans": 0, "emit": None})
    actual = vmapped(init=batched["init"], trans=batched["trans"], emit=arrays["emit"])
    for i in range(4):
        one = dict(arrays, init=batched["init"][i], trans=batched["trans"][i])
        assert_matches(actual[i], data_of(evaluate(expr, one)))


def test_chain_programs_jit_and_pickle():
    expr, program, arrays = _hmm_program_and_arrays()
    expected = data_of(evaluate(expr, arrays))
    assert_matches(program.jit()(**arrays), expected)
    assert_matches(pickle.loads(pickle.dumps(program))(**arrays), expected)


@pytest.mark.skipif(BACKEND == "numpy", reason="numpy has no autodiff")
def test_chain_gradients_are_funsors():
    expr, program, arrays = _hmm_program_and_arrays()

    def eager(trans):
        return data_of(evaluate(expr, dict(arrays, trans=trans)))

    def compiled(trans):
        return program(**dict(arrays, trans=trans))

    if BACKEND == "jax":
        import jax

        actual = jax.grad(compiled)(arrays["trans"])
        expected = jax.grad(eager)(arrays["trans"])
    else:
        import torch

        trans = arrays["trans"].clone().requires_grad_()
        (actual,) = torch.autograd.grad(compiled(trans), [trans])
        (expected,) = torch.autograd.grad(eager(trans), [trans])
    assert_matches(actual, expected)
    assert np.abs(to_numpy(expected)).sum() > 0
