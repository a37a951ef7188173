"""The benchmarks' hand-written implementations compute what funsor does
(a ratio against a wrong hand-written version would mean nothing)."""

from collections import OrderedDict

import funsor
import numpy as np
import pytest
from funsor import ops
from funsor.domains import Reals
from funsor.gaussian import Gaussian
from funsor.tensor import Tensor

from benchmarks.cases import CASES, FFBS, TracedCase, array_lib, random_inputs

from .helpers import assert_matches, to_numpy

BACKEND = funsor.get_backend()


@pytest.mark.parametrize(
    "case",
    [c for c in CASES if not isinstance(c, FFBS)],
    ids=lambda c: c.name,
)
def test_hand_written_matches_funsor(case):
    arrays = random_inputs(case)
    hand = case.hand(array_lib(BACKEND))
    expected = case.funsor_eager(**arrays)
    assert_matches(hand(**arrays), expected, rtol=2e-3, atol=1e-3)
    if isinstance(case, TracedCase):
        assert_matches(case.program(arrays)(**arrays), expected, rtol=1e-4, atol=1e-4)


HAS_FAST = [c for c in CASES if c.hand_fast(array_lib(BACKEND)) is not None]
HAS_SCAN = [c for c in CASES if BACKEND == "jax" and c.hand_scan() is not None]


@pytest.mark.parametrize("case", HAS_FAST, ids=lambda c: c.name)
def test_performance_minded_hand_written_matches_funsor(case):
    arrays = random_inputs(case)
    fast = case.hand_fast(array_lib(BACKEND))
    assert_matches(fast(**arrays), case.funsor_eager(**arrays), rtol=2e-3, atol=1e-3)


@pytest.mark.skipif(BACKEND != "jax", reason="jax.lax.scan versions are jax's")
@pytest.mark.parametrize("case", HAS_SCAN, ids=lambda c: c.name)
def test_lax_scan_hand_written_matches_funsor(case):
    import jax

    arrays = random_inputs(case)
    scanned = jax.jit(case.hand_scan())
    assert_matches(scanned(**arrays), case.funsor_eager(**arrays), rtol=2e-3, atol=1e-3)


def test_every_case_with_a_scan_has_a_performance_minded_version():
    names = {c.name for c in HAS_FAST}
    assert {"chain50", "hmm_T100", "hmm_emit_T100", "kalman_T10"} <= names


def test_hand_written_ffbs_log_prob_is_the_posterior_density_of_its_samples():
    case = FFBS()
    arrays = random_inputs(case)
    samples, log_prob = case.hand(array_lib(BACKEND))(**arrays)
    joint = Gaussian(
        white_vec=arrays["w0"], prec_sqrt=arrays["P0"], inputs=OrderedDict(x0=Reals[2])
    )
    for k in range(1, case.n):
        inputs = OrderedDict([(f"x{k - 1}", Reals[2]), (f"x{k}", Reals[2])])
        joint = joint + Gaussian(
            white_vec=arrays[f"w{k}"], prec_sqrt=arrays[f"P{k}"], inputs=inputs
        )
    log_z = to_numpy(joint.reduce(ops.logaddexp).data)
    for p in range(4):
        point = {k: Tensor(v[p]) for k, v in samples.items()}
        expected = to_numpy(joint(**point).data) - log_z
        np.testing.assert_allclose(
            to_numpy(log_prob)[p], expected, rtol=1e-3, atol=1e-3
        )
