"""Gaussian algebra with ``funsor.ops`` only, on arrays with leading batch dims.

A Gaussian over a real vector ``x`` of size ``dim`` is funsor's square-root
information form: the log-density ``-1/2 * || x @ prec_sqrt - white_vec ||^2``
with ``white_vec`` of shape ``batch + (rank,)`` and ``prec_sqrt`` of shape
``batch + (dim, rank)`` (no normalizer). Every function here computes with
``funsor.ops`` calls only (no operators or indexing on arrays), so it runs
on numpy, torch and jax arrays and ``trace_function`` records all of it.

Derivations (``P = prec_sqrt``, ``w = white_vec``, ``Λ = P Pᵀ``, ``η = P w``):

- *condition* on ``x₂ = v``: ``x₁ P₁ + v P₂ - w = x₁ P₁ - (w - v P₂)``;
- *marginalize* ``x₂``: with ``A = L₂⁻¹ P₂`` (``L₂ = chol(P₂ P₂ᵀ)``, rows of
  ``A`` orthonormal), the integral over ``x₂`` keeps the residual orthogonal
  to the rows of ``P₂``: ``w' = w (I - AᵀA)``, ``P₁' = P₁ (I - AᵀA)``, and
  adds ``dim₂/2 log 2π - log|L₂|``;
- *normalizer* (all of ``x``): ``dim/2 log 2π - log|L| + (|L⁻¹η|² - |w|²)/2``;
- *compress* a wide ``P`` (``rank > dim``): ``P' = chol(Λ)``, ``w' = P'⁻¹ η``,
  plus ``(|w'|² - |w|²)/2``;
- *sample*: ``x = Λ⁻¹ η + L⁻ᵀ z`` with ``z`` standard normal.

Example::

    >>> import numpy as np
    >>> w, P = np.array([1.0, 0.0]), np.eye(2)
    >>> float(log_density(w, P, np.array([0.0, 0.0])))
    -0.5
    >>> round(float(log_normalizer(w, P)), 6)  # log(2 pi)
    1.837877
"""

import math

from funsor import ops
from funsor.terms import Funsor

LOG_2PI = math.log(2 * math.pi)


def transpose(x):
    """Swap the last two axes."""
    return ops.transpose(x, -1, -2)


def matvec(m, v):
    """``m @ v`` over the last axes: ``(..., i, j), (..., j) -> (..., i)``."""
    return ops.einsum((m, v), "...ij,...j->...i")


def vecmat(v, m):
    """``v @ m``: ``(..., i), (..., i, j) -> (..., j)``."""
    return ops.einsum((v, m), "...i,...ij->...j")


def matmul(a, b):
    return ops.einsum((a, b), "...ij,...jk->...ik")


def norm2(v):
    return ops.sum(ops.mul(v, v), -1)


def log_det_tril(chol):
    """``log|det L|`` of a Cholesky factor."""
    return ops.sum(ops.log(ops.diagonal(chol, -1, -2)), -1)


def solve_tril(chol, v, transposed=False):
    """``L⁻¹ v`` (or ``L⁻ᵀ v``) for a lower-triangular ``L`` and vector ``v``."""
    column = ops.unsqueeze(v, -1)
    solution = ops.triangular_solve(column, chol, upper=False, transpose=transposed)
    return ops.getslice(solution, (Ellipsis, 0))


def info_vec(white_vec, prec_sqrt):
    return matvec(prec_sqrt, white_vec)


def precision(prec_sqrt):
    return matmul(prec_sqrt, transpose(prec_sqrt))


def log_density(white_vec, prec_sqrt, x):
    """``-1/2 |x P - w|²`` at ``x`` (shape ``batch + (dim,)``)."""
    return ops.mul(norm2(ops.sub(vecmat(x, prec_sqrt), white_vec)), -0.5)


def log_normalizer(white_vec, prec_sqrt):
    """``log ∫ exp(log_density(x)) dx`` (needs a full-rank precision)."""
    dim = prec_sqrt.shape[-2]
    chol = ops.cholesky(precision(prec_sqrt))
    if prec_sqrt.shape[-1] == dim:
        # A square P: |L⁻¹ P wᵀ|² = |w|², so the shift is exactly 0 (as in
        # funsor); computed, it is a difference of two large norms, whose
        # float32 rounding errors showed in the gradients.
        return ops.sub(0.5 * dim * LOG_2PI, log_det_tril(chol))
    whitened = solve_tril(chol, info_vec(white_vec, prec_sqrt))
    shift = ops.mul(ops.sub(norm2(whitened), norm2(white_vec)), 0.5)
    return ops.add(ops.sub(shift, log_det_tril(chol)), 0.5 * dim * LOG_2PI)


def condition(white_vec, prec_sqrt, value, value_rows):
    """Substitute ``x[value_rows] = value``: returns ``(white_vec,
    prec_sqrt)`` over the remaining rows (``value_rows`` is a ``slice``)."""
    value_block = ops.getslice(prec_sqrt, (Ellipsis, value_rows, slice(None)))
    white_vec = ops.sub(white_vec, vecmat(value, value_block))
    return white_vec, _drop_rows(prec_sqrt, value_rows)


def marginalize(white_vec, prec_sqrt, rows):
    """Integrate out ``x[rows]`` (a ``slice``): returns ``(white_vec,
    prec_sqrt, log_constant)`` of the Gaussian over the remaining rows."""
    block = ops.getslice(prec_sqrt, (Ellipsis, rows, slice(None)))
    dropped = block.shape[-2]
    chol = ops.cholesky(precision(block))
    constant = ops.sub(0.5 * dropped * LOG_2PI, log_det_tril(chol))
    if prec_sqrt.shape[-1] <= dropped:
        # No information is left on the kept rows (as funsor's
        # _marginalize_after_split): a rank-0 Gaussian, not a zero matrix
        # whose later compression (QR) would have no gradient.
        batch = tuple(white_vec.shape[:-1])
        kept_dim = prec_sqrt.shape[-2] - dropped
        empty_white_vec = ops.new_zeros(white_vec, batch + (0,))
        empty_prec_sqrt = ops.new_zeros(white_vec, batch + (kept_dim, 0))
        return empty_white_vec, empty_prec_sqrt, constant
    # A = L⁻¹ P₂ has orthonormal rows; project them out of w and P₁:
    # v (I - AᵀA) = v - (v Aᵀ) A.
    orthonormal = ops.triangular_solve(block, chol, upper=False, transpose=False)
    white_vec = ops.sub(white_vec, vecmat(matvec(orthonormal, white_vec), orthonormal))
    kept = _drop_rows(prec_sqrt, rows)
    prec_sqrt = ops.sub(kept, matmul(matmul(kept, transpose(orthonormal)), orthonormal))
    return white_vec, prec_sqrt, constant


def marginalize_compressed(white_vec, prec_sqrt, dropped, full_rank=False):
    """Integrate out the leading ``dropped`` rows of ``x`` (``rank >= dim``)
    with one factorization of the whole Gaussian: returns ``(white_vec,
    prec_sqrt, log_constant)`` of the Gaussian over the remaining rows,
    compressed (``rank == dim``). The same Gaussian as :func:`marginalize`
    then :func:`compress` (which factor the dropped block, project, then
    factor again).

    :func:`compress` of the whole Gaussian gives a lower-triangular factor
    ``F`` (``F Fᵀ = P Pᵀ``: a QR's ``Rᵀ``, whose diagonal has any signs, or
    with ``full_rank=True`` and on funsor terms a Cholesky factor) and the
    whitened ``u``; split as the dropped ``x₁`` and kept ``x₂``, ``x F =
    [x₁ F₁₁ + x₂ F₂₁, x₂ F₂₂]``, so integrating ``x₁`` leaves ``P' = F₂₂``
    and ``w' = u₂`` and adds ``dim₁/2 log 2π - log|det F₁₁|`` to the
    compression's shift. By QR, ``P'`` may differ from funsor's marginal in
    basis and rank (the same Gaussian); by Cholesky it is funsor's
    compressed marginal itself.

    Example::

        >>> import numpy as np
        >>> w, P = np.array([1.0, 2.0, 0.5]), np.diag([2.0, 1.0, 1.0])
        >>> w2, P2, c = marginalize_compressed(w, P, 1)
        >>> P2.shape, bool(np.allclose(abs(P2), np.eye(2)))
        ((2, 2), True)
        >>> bool(np.isclose(c, 0.5 * LOG_2PI - np.log(2.0)))
        True
    """
    whitened, factor, shift = compress(white_vec, prec_sqrt, full_rank)
    diagonal = ops.abs(ops.diagonal(factor, -1, -2))  # (a QR's R: any signs)
    dropped_diagonal = ops.getslice(diagonal, (Ellipsis, slice(0, dropped)))
    log_det = ops.sum(ops.log(dropped_diagonal), -1)
    constant = ops.add(ops.sub(0.5 * dropped * LOG_2PI, log_det), shift)
    kept = slice(dropped, None)
    new_prec_sqrt = ops.getslice(factor, (Ellipsis, kept, kept))
    new_white_vec = ops.getslice(whitened, (Ellipsis, kept))
    return new_white_vec, new_prec_sqrt, constant


def compress(white_vec, prec_sqrt, full_rank=False):
    """An equal Gaussian with ``rank == dim``: ``(white_vec, prec_sqrt,
    log_constant)``, by a reduced QR factorization ``Pᵀ = Q R`` (as funsor's
    ``_compress_rank``): ``P = Rᵀ Qᵀ``, so ``||x P - w||² = ||x Rᵀ - w Q||² +
    ||w||² - ||w Q||²``. Rank-deficient precisions (zero blocks) compress
    too, where a Cholesky factor does not exist.

    With ``full_rank=True`` (precisions known to be positive definite), by
    the Cholesky factor ``P' = chol(P Pᵀ)`` and ``w' = P'⁻¹ P w`` instead
    (funsor's ``_compress_rank(..., assume_full_rank=True)``): the same
    Gaussian in another orthonormal basis of its rank dimension (``P' =
    Rᵀ D``, ``w' = D Qᵀw`` for a diagonal ``D`` of signs), so densities,
    normalizers and samples are equal; only ``P'`` and ``w'`` themselves
    differ. Its cost is one Gram matrix and a small Cholesky factor, where
    a QR of the tall ``Pᵀ`` (and, under autograd, its backward pass) is
    several times dearer."""
    if full_rank or isinstance(prec_sqrt, Funsor):
        # funsor terms (the compiling pipeline) have no tuple-valued ops:
        # a Cholesky factor of the precision (full-rank precisions only)
        chol = ops.cholesky(precision(prec_sqrt))
        new_white_vec = solve_tril(chol, info_vec(white_vec, prec_sqrt))
        new_prec_sqrt = chol
    else:
        q, r = ops.qr(transpose(prec_sqrt))
        new_white_vec, new_prec_sqrt = vecmat(white_vec, q), transpose(r)
    shift = ops.mul(ops.sub(norm2(new_white_vec), norm2(white_vec)), 0.5)
    return new_white_vec, new_prec_sqrt, shift


def sample(white_vec, prec_sqrt, noise):
    """``mean + L⁻ᵀ noise``: a draw given standard normal ``noise`` of shape
    ``(..., dim)`` (leading sample dims broadcast against the batch)."""
    chol = ops.cholesky(precision(prec_sqrt))
    whitened = solve_tril(chol, info_vec(white_vec, prec_sqrt))
    mean = solve_tril(chol, whitened, transposed=True)
    chol = ops.expand(chol, tuple(noise.shape[:-1]) + tuple(chol.shape[-2:]))
    return ops.add(mean, solve_tril(chol, noise, transposed=True))


def _drop_rows(prec_sqrt, rows):
    dim = prec_sqrt.shape[-2]
    start, stop, _ = rows.indices(dim)
    parts = []
    if start > 0:
        parts.append(ops.getslice(prec_sqrt, (Ellipsis, slice(0, start), slice(None))))
    if stop < dim:
        parts.append(ops.getslice(prec_sqrt, (Ellipsis, slice(stop, dim), slice(None))))
    return parts[0] if len(parts) == 1 else ops.cat(tuple(parts), -2)
