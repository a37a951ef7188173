"""numpy's small factorizations and solves called through LAPACK directly
(``backends/numpy_lapack.py``) equal funsor's numpy ops on the same arrays
(``np.linalg`` calls: funsor 0.4.8's numpy implementations, spelled out so
that they serve under every ``FUNSOR_BACKEND``),
for any single matrix (leading dims of size 1), float32 or float64, and
batches of right-hand sides; they raise numpy's errors where funsor's do."""

import numpy as np
import pytest
from funsor import ops
from hypothesis import given, settings
from hypothesis import strategies as st

from funsor_lowering.backends import numpy_lapack
from funsor_lowering.backends.numpy_backend import BACKEND

pytestmark = pytest.mark.skipif(
    not numpy_lapack.AVAILABLE, reason="scipy is not installed: numpy keeps funsor's"
)

DTYPES = st.sampled_from([np.float32, np.float64])
TOLERANCE = {np.float32: 1e-4, np.float64: 1e-10}


def resolved(op, *operands):
    """The implementation generated numpy code calls for ``op(*operands)``
    (the backend's choice), called."""
    from funsor_lowering.runtime.codegen import resolve

    impl, extra, kwargs = resolve(op, operands, BACKEND)
    return impl(*operands, *extra, **kwargs), impl


@st.composite
def matrices(draw, square=False):
    dtype = draw(DTYPES)
    rows = draw(st.integers(1, 5))
    cols = rows if square else draw(st.integers(1, 5))
    unit_dims = draw(st.integers(0, 2))
    seed = draw(st.integers(0, 2**16))
    x = np.random.default_rng(seed).normal(size=(1,) * unit_dims + (rows, cols))
    return x.astype(dtype)


def positive_definite(x):
    n = x.shape[-1]
    return (x @ np.swapaxes(x, -1, -2) + n * np.eye(n)).astype(x.dtype)


@settings(deadline=None, max_examples=50)
@given(x=matrices(square=True))
def test_cholesky_equals_funsors(x):
    a = positive_definite(x)
    got, impl = resolved(ops.cholesky, a)
    assert impl is numpy_lapack.cholesky
    expected = np.linalg.cholesky(a)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    tol = TOLERANCE[x.dtype.type]  # on entries near 0 too (float32 rounding)
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol * np.abs(a).max())


@settings(deadline=None, max_examples=80)
@given(
    y=matrices(square=True),
    batch=st.sampled_from([(), (1,), (3,), (2, 3)]),
    rhs_cols=st.integers(1, 3),
    upper=st.booleans(),
    transpose=st.booleans(),
    rhs_dtype=DTYPES,
)
def test_triangular_solve_equals_funsors(
    y, batch, rhs_cols, upper, transpose, rhs_dtype
):
    # mixed dtypes too: float64 draws solved by a float32 factor (sampling)
    n = y.shape[-1]
    tri = np.linalg.cholesky(positive_definite(y))
    if upper:
        tri = np.swapaxes(tri, -1, -2).copy()
    rhs = np.random.default_rng(n).normal(size=batch + (n, rhs_cols))
    rhs = rhs.astype(rhs_dtype)
    op = ops.TriangularSolveOp(upper=upper, transpose=transpose)
    got, impl = resolved(op, rhs, tri)
    assert impl is numpy_lapack.triangular_solve
    expected = np.linalg.inv(np.swapaxes(tri, -1, -2) if transpose else tri) @ rhs
    assert got.dtype == expected.dtype and got.shape == expected.shape
    tol = max(TOLERANCE[y.dtype.type], TOLERANCE[rhs_dtype])
    np.testing.assert_allclose(got, expected, rtol=tol * 100, atol=tol)


@settings(deadline=None, max_examples=50)
@given(x=matrices())
def test_qr_equals_funsors(x):
    (q, r), impl = resolved(ops.qr, x)
    assert impl is numpy_lapack.qr
    expected_q, expected_r = np.linalg.qr(x)
    tol = TOLERANCE[x.dtype.type]
    for got, expected in ((q, expected_q), (r, expected_r)):
        assert got.dtype == expected.dtype and got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=tol * 100, atol=tol)


def test_batches_of_matrices_keep_funsors_implementations():
    x = positive_definite(np.random.default_rng(0).normal(size=(2, 3, 3)))
    _, impl = resolved(ops.cholesky, x)
    assert impl is not numpy_lapack.cholesky
    _, impl = resolved(ops.triangular_solve, x, x)  # a batch of factors
    assert impl is not numpy_lapack.triangular_solve


def test_failures_raise_numpys_errors():
    with pytest.raises(np.linalg.LinAlgError, match="not positive definite"):
        numpy_lapack.cholesky(np.array([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(np.linalg.LinAlgError, match="Singular"):
        numpy_lapack.triangular_solve(
            np.ones((2, 1)), np.zeros((2, 2)), False, False, (2, 1)
        )


def test_other_dtypes_fall_back_to_numpy():
    a = np.array([[4.0, 2.0], [2.0, 3.0]], dtype=np.complex128)
    np.testing.assert_allclose(numpy_lapack.cholesky(a), np.linalg.cholesky(a))
    q, r = numpy_lapack.qr(a)
    np.testing.assert_allclose(q @ r, a)


def test_without_scipy_numpy_keeps_funsors_implementations(monkeypatch):
    monkeypatch.setattr(numpy_lapack, "AVAILABLE", False)
    a = positive_definite(np.random.default_rng(0).normal(size=(3, 3)))
    for op, operands in ((ops.cholesky, (a,)), (ops.qr, (a,))):
        _, impl = resolved(op, *operands)
        assert impl not in (numpy_lapack.cholesky, numpy_lapack.qr)
