"""Small numpy linear algebra through scipy's LAPACK wrappers.

``np.linalg.cholesky`` / ``qr`` / ``inv`` spend 5-15 us per call on
argument handling before LAPACK works for well under a microsecond on the
small matrices of Gaussian programs; scipy's raw wrappers
(``scipy.linalg.lapack``) spend about 1 us. These implementations take
one matrix (any leading dims of size 1) of ``float32`` or ``float64`` and
call ``?potrf``, ``?trtrs``, ``?geqrf`` / ``?orgqr`` directly; any other
dtype falls back to numpy. They raise numpy's ``LinAlgError`` where
numpy's functions do. Without scipy, :data:`AVAILABLE` is false and the
numpy backend keeps funsor's implementations. ``scipy.linalg`` (a third of
a second to import) is imported on first use, so a process whose programs
factor nothing never pays for it.

Example::

    >>> import numpy as np
    >>> a = np.array([[4.0, 2.0], [2.0, 3.0]])
    >>> l = cholesky(a)
    >>> bool(np.allclose(l, np.linalg.cholesky(a)))
    True
    >>> z = triangular_solve(np.eye(2), l, False, False, (2, 2))
    >>> bool(np.allclose(z, np.linalg.inv(l)))
    True
"""

import functools
import importlib.util

import numpy as np

AVAILABLE = importlib.util.find_spec("scipy") is not None  # scipy is optional


@functools.cache
def _routines(name):
    """LAPACK routine ``name`` by numpy dtype char (single, double)."""
    if not AVAILABLE:
        return {}
    from scipy.linalg import lapack

    return {"f": getattr(lapack, "s" + name), "d": getattr(lapack, "d" + name)}


def is_matrices(*arrays):
    """Whether every array is a batch of matrices (rank >= 2, no empty
    dim)."""
    return all(isinstance(a, np.ndarray) and a.ndim >= 2 and a.size > 0 for a in arrays)


def is_single_matrix(*arrays):
    """Whether every array is one matrix: rank >= 2, leading dims of size 1,
    no empty dim (what these implementations take, but for
    :func:`triangular_solve`'s right-hand sides)."""
    return is_matrices(*arrays) and all(
        a.size == a.shape[-1] * a.shape[-2] for a in arrays
    )


def cholesky(x):
    """``np.linalg.cholesky`` of one matrix (lower factor, upper zeros)."""
    potrf = _routines("potrf").get(x.dtype.char)
    if potrf is None:
        return np.linalg.cholesky(x)
    factor, info = potrf(x.reshape(x.shape[-2:]), lower=1, clean=1)
    if info:
        raise np.linalg.LinAlgError("Matrix is not positive definite")
    return factor.reshape(x.shape)


def triangular_solve(x, y, upper, transpose, shape):
    """funsor's ``ops.triangular_solve(x, y, upper, transpose)`` of a batch
    of right-hand-side matrices ``x`` and one triangular ``y``: ``z`` with
    ``y z = x`` (``yᵀ z = x`` if ``transpose``), of result ``shape``."""
    dtype = np.result_type(x, y)  # (funsor's ``inv(y) @ x`` promotes too)
    trtrs = _routines("trtrs").get(dtype.char)
    if trtrs is None:
        if transpose:
            y = np.swapaxes(y, -2, -1)
        return (np.linalg.inv(y) @ x).reshape(shape)
    x, y = x.astype(dtype, copy=False), y.astype(dtype, copy=False)
    n, k = x.shape[-2:]
    # a batch of right-hand sides side by side: one (n, batch * k) matrix
    # (for vectors, k = 1, a view in the Fortran order LAPACK takes)
    if x.size == n * k:
        columns = x.reshape(n, k)
    elif k == 1:
        columns = x.reshape(-1, n).T
    else:
        columns = x.reshape(-1, n, k).transpose(1, 0, 2).reshape(n, -1)
    solution, info = trtrs(
        y.reshape(n, n),
        columns,
        lower=0 if upper else 1,
        trans=1 if transpose else 0,
    )
    if info > 0:
        raise np.linalg.LinAlgError("Singular matrix")
    if x.size == n * k:
        return solution.reshape(shape)
    if k == 1:
        return solution.T.reshape(shape)
    return solution.reshape(n, -1, k).transpose(1, 0, 2).reshape(shape)


def triangular_solve_vectors(x, y, upper, transpose, shape):
    """:func:`triangular_solve` of a batch of vectors ``x`` (``[..., n]``),
    of result ``shape`` (``extra_ops.triangular_solve_vectors``)."""
    return triangular_solve(x[..., None], y, upper, transpose, shape)


@functools.lru_cache(maxsize=64)
def _strictly_lower(rows, cols):
    """Mask of a ``rows`` x ``cols`` matrix's entries below its diagonal
    (``np.triu`` builds it on every call, taking 4 us)."""
    return np.tri(rows, cols, -1, dtype=bool)


def qr(x, mode="reduced"):
    """``np.linalg.qr(x, "reduced")`` of one matrix: ``(q, r)``."""
    geqrf = _routines("geqrf").get(x.dtype.char)
    if geqrf is None or mode != "reduced":
        return np.linalg.qr(x, mode=mode)
    *batch, m, n = x.shape
    k = min(m, n)
    packed, tau, _, _ = geqrf(x.reshape(m, n))
    q, _, _ = _routines("orgqr")[x.dtype.char](packed[:, :k], tau)
    r = np.where(_strictly_lower(k, n), packed.dtype.type(0), packed[:k])
    return q.reshape(*batch, m, k), r.reshape(*batch, k, n)
