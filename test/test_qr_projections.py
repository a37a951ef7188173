"""A QR whose ``Q`` only multiplies one value (how funsor compresses a wide
Gaussian) is, on jax, one QR of ``[M | uᵀ]`` that never forms ``Q``
(``qr_projections``, ``extra_ops.qr_project``); numpy's and torch's programs
keep funsor's QR. Programs equal eager funsor either way, vmapped too."""

import funsor
import numpy as np
import pytest
from funsor import ops
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.cases import FFBS, Kalman, random_inputs
from funsor_lowering import trace_function
from funsor_lowering.ops.extra_ops import QrProjectOp, qr_project

from .helpers import assert_matches, from_numpy, to_numpy

BACKEND = funsor.get_backend()


def op_types(program):
    return {type(o.op) for o in program.operations}


@pytest.mark.skipif(
    BACKEND != "jax", reason="jax's implementation (elsewhere: funsor's qr, matmul)"
)
@settings(deadline=None, max_examples=30)
@given(
    batch=st.lists(st.integers(1, 3), max_size=2),
    cols=st.integers(1, 4),
    extra=st.integers(0, 4),
    k=st.integers(1, 3),
    u_batch=st.sampled_from(["none", "same", "more", "inner"]),
    seed=st.integers(0, 2**16),
)
def test_qr_project_equals_funsors_qr_and_matmul(batch, cols, extra, k, u_batch, seed):
    import funsor_lowering.backends.jax_backend  # noqa: F401  registers it

    rng = np.random.default_rng(seed)
    rows = cols + extra
    m = rng.standard_normal((*batch, rows, cols)).astype(np.float32)
    # u's leading axes: none, M's, more than M's (a Gaussian's particles),
    # or M's with a unit axis of M's broadcast
    u_leading = {
        "none": (),
        "same": tuple(batch),
        "more": (2, *batch),
        "inner": (*batch[:-1], 3) if batch and batch[-1] == 1 else tuple(batch),
    }[u_batch]
    u_shape = (*u_leading, k, rows)
    m, u = from_numpy(m), from_numpy(rng.standard_normal(u_shape).astype(np.float32))
    q, r = ops.qr(m)
    actual = qr_project(m, u)
    assert type(actual) is tuple  # not funsor's generic version: jax's own
    assert_matches(actual, (r, ops.matmul(u, q)), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", [Kalman(10), FFBS()], ids=lambda c: c.name)
def test_gaussian_programs_form_q_on_numpy_and_torch_only(case, monkeypatch):
    from funsor_lowering.tracing import dense_ffbs

    # FFBS: funsor's recipe group by group (the dense draw, which has no QR,
    # forced off)
    monkeypatch.setattr(dense_ffbs, "MAX_DIM", 0)
    arrays = random_inputs(case)
    program = case.program(arrays)
    types = op_types(program)
    if BACKEND == "jax":  # (FFBS's u, drawn per particle, has axes M lacks)
        assert QrProjectOp in types and ops.QrOp not in types
    else:
        assert ops.QrOp in types and QrProjectOp not in types
    if isinstance(case, Kalman):  # (FFBS draws: test_recipes compares them)
        expected = case.funsor_eager(**arrays)
        assert_matches(program(**arrays), expected, rtol=1e-4, atol=1e-4)


def test_vmapped_kalman_filter_equals_a_loop_of_eager_funsor():
    case = Kalman(10)
    arrays = random_inputs(case)
    program = case.program(arrays)
    batched = {  # three members' white vectors, the precisions shared
        k: from_numpy(np.stack([to_numpy(v) * (1 + 0.1 * i) for i in range(3)]))
        for k, v in arrays.items()
        if k.startswith("w")
    }
    mapped = program.vmap({k: 0 if k in batched else None for k in arrays})
    actual = mapped(**{**arrays, **batched})
    for i in range(3):
        member = {**arrays, **{k: v[i] for k, v in batched.items()}}
        expected = case.funsor_eager(**member)
        assert_matches(actual[i], expected, rtol=1e-4, atol=1e-4)


def _r_and_product(m, u):
    q, r = ops.qr(m)
    return r, ops.matmul(u, q)


@pytest.mark.parametrize("mapped", [("m",), ("u",), ("m", "u")])
@pytest.mark.parametrize("m_batch,u_batch", [((2,), ()), ((), (2,)), ((2,), (2,))])
def test_vmapped_r_and_product_equal_a_loop(mapped, m_batch, u_batch):
    # the program's operands have other numbers of leading axes than the
    # mapped ones: the mapped axis must line up with the mapped axis
    rng = np.random.default_rng(0)
    m = from_numpy(rng.standard_normal((*m_batch, 5, 3)).astype(np.float32))
    u = from_numpy(rng.standard_normal((*u_batch, 1, 5)).astype(np.float32))
    program = trace_function(_r_and_product, {"m": m, "u": u})
    assert (QrProjectOp in op_types(program)) == (BACKEND == "jax")
    members = [
        {k: v * (1 + 0.5 * i) if k in mapped else v for k, v in (("m", m), ("u", u))}
        for i in range(3)
    ]
    stacked = {
        k: from_numpy(np.stack([to_numpy(x[k]) for x in members])) for k in mapped
    }
    actual = program.vmap({k: 0 if k in mapped else None for k in ("m", "u")})(
        **{"m": m, "u": u, **stacked}
    )
    for i, member in enumerate(members):
        expected = _r_and_product(**member)
        assert_matches(
            tuple(a[i] for a in actual), tuple(expected), rtol=1e-4, atol=1e-5
        )
