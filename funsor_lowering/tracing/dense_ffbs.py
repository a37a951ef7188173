"""``funsor.recipes.forward_filter_backward_rsample`` of a plate-free
Gaussian factor graph, traced as one dense posterior draw.

funsor's recipe eliminates the variables one group at a time (the order of
its contraction plan), then samples them backwards, each group given the
groups drawn before it: per group a Cholesky factorization, two triangular
solves and a projection; and its ``log_prob`` evaluates every factor at the
samples and subtracts the normalizer. For Gaussian factors without plates
the same draws come from the joint posterior at once:

- the joint precision ``Λ = P Pᵀ`` and information vector ``η = P w``
  (``P``, ``w``: every factor's square root and white vector, its rows
  placed at its variables'), with the variables in funsor's elimination
  order (the reverse of its draws, each group's in the group's order);
- ``L = chol(Λ)``: its diagonal blocks are the Cholesky factors of the
  conditional precisions funsor factors group by group, so back-substituting
  ``Lᵀ x = L⁻¹ η + z``, with ``z`` funsor's own noise blocks concatenated
  in that order, draws what funsor draws;
- ``log_prob = -|z|²/2 - d/2 log 2π + log|L|``, the posterior density at
  the draw (funsor's ``Σ factors - log Z``).

While tracing, :func:`rsample_recipe` runs funsor's recipe once (its draws,
in its order, with its keys, are the noise), then returns the dense draws:
the recipe's own operations are then dead code, and a chain of five
two-dimensional variables takes a fifth of the backend calls. Anything
else (plates, batched or non-Gaussian factors, sample inputs of reals,
more than :data:`MAX_DIM` dimensions, draws that do not partition the
variables) returns funsor's recipe as traced.
"""

from collections import OrderedDict

import numpy as np
from funsor import ops
from funsor.gaussian import Gaussian
from funsor.tensor import Tensor
from funsor.terms import Funsor

from ..ops import hooks
from ..ops.extra_ops import take
from . import gaussian_algebra as ga
from .constants import constant_array
from .gaussian_patterns import NamedGaussian, recording_draws

# The most real dimensions drawn densely: the dense factorization costs
# O(d³), where funsor's group-by-group work grows with the number of groups.
MAX_DIM = 128


def rsample_recipe(factors, eliminate, plates, sample_inputs=None, rng_key=None):
    """``forward_filter_backward_rsample``'s replacement while tracing
    (same arguments and results)."""
    sample_inputs = {} if sample_inputs is None else sample_inputs
    recipe = hooks.original("recipes.forward_filter_backward_rsample")
    gaussians = _plate_free_gaussians(factors, eliminate, plates, sample_inputs)
    if gaussians is None:
        return recipe(factors, eliminate, plates, sample_inputs, rng_key)
    with recording_draws(gaussians[0].white_vec) as log:
        samples, log_prob = recipe(factors, eliminate, plates, sample_inputs, rng_key)
    dense = _dense_draws(gaussians, log.draws, samples, log_prob)
    return (samples, log_prob) if dense is None else dense


def _plate_free_gaussians(factors, eliminate, plates, sample_inputs):
    """The factors as :class:`NamedGaussian` s, where the dense draw applies."""
    if plates or not isinstance(factors, dict) or not factors:
        return None
    if any(d.dtype == "real" for d in sample_inputs.values()):
        return None  # preconditioned noise
    gaussians, reals = [], {}
    for factor in factors.values():
        if not isinstance(factor, Gaussian) or isinstance(factor.prec_sqrt, Funsor):
            return None
        if any(d.dtype != "real" for d in factor.inputs.values()):
            return None
        gaussians.append(NamedGaussian.of(factor))
        reals.update(factor.inputs)
    if set(reals) != set(eliminate):
        return None
    if sum(d.num_elements for d in reals.values()) > MAX_DIM:
        return None
    return gaussians


def _dense_draws(gaussians, draws, samples, log_prob):
    """``(samples, log_prob)`` drawn densely with ``draws``' noise, or
    ``None`` where the draws do not partition the variables."""
    blocks = list(reversed(draws))  # funsor's elimination order
    reals = OrderedDict()
    for names, _ in blocks:
        for name, domain in names.items():
            if name in reals:
                return None
            reals[name] = domain
    if set(reals) != set(samples):  # (= eliminate: the factors' reals)
        return None
    batch = blocks[0][1].inputs
    results = [noise for _, noise in blocks] + list(samples.values()) + [log_prob]
    if any(set(t.inputs) != set(batch) for t in results):
        return None
    noises = tuple(noise.align(tuple(batch)).data for _, noise in blocks)
    z = noises[0] if len(noises) == 1 else ops.cat(noises, -1)
    white_vec, prec_sqrt = _joint_square_root(gaussians, reals)
    chol = ops.cholesky(ga.precision(prec_sqrt))
    whitened = Tensor(ga.solve_tril(chol, ga.info_vec(white_vec, prec_sqrt)))
    point = ga.solve_tril(Tensor(chol), Tensor(z, batch) + whitened, transposed=True)
    dense_samples, dim = {}, 0
    for name, domain in reals.items():
        part = point[dim : dim + domain.num_elements].reshape(domain.shape)
        dense_samples[name] = part.align(tuple(samples[name].inputs))
        dim += domain.num_elements
    log_det = ops.sub(ga.log_det_tril(chol), 0.5 * dim * ga.LOG_2PI)
    density = ops.add(ops.mul(ga.norm2(z), -0.5), log_det)
    dense_log_prob = Tensor(density, batch).align(tuple(log_prob.inputs))
    return {k: dense_samples[k] for k in samples}, dense_log_prob


def _joint_square_root(gaussians, reals):
    """``(w, P)`` of the product of ``gaussians``: their white vectors
    concatenated, and their square roots side by side, each one's rows
    placed at its variables' rows of ``reals`` (zeros elsewhere): one
    gather from their concatenation."""
    rows, dim = {}, 0
    for name, domain in reals.items():
        rows[name] = np.arange(dim, dim + domain.num_elements)
        dim += domain.num_elements
    ranks = [g.prec_sqrt.shape[-1] for g in gaussians]
    index = np.full((dim, sum(ranks)), -1, dtype=np.int64)
    flat, position, column = [], 0, 0
    for g, rank in zip(gaussians, ranks):
        local = 0
        for name, domain in g.reals.items():
            n = domain.num_elements
            entries = (local + np.arange(n))[:, None] * rank + np.arange(rank)
            index[rows[name], column : column + rank] = position + entries
            local += n
        flat.append(ops.ReshapeOp(shape=(local * rank,))(g.prec_sqrt))
        position, column = position + local * rank, column + rank
    index[index < 0] = position  # the zero appended below
    flat.append(ops.new_zeros(gaussians[0].prec_sqrt, (1,)))
    prec_sqrt = take(ops.cat(tuple(flat), -1), constant_array(index))
    white_vec = ops.cat(tuple(g.white_vec for g in gaussians), -1)
    return white_vec, prec_sqrt


__all__ = ["MAX_DIM", "rsample_recipe"]
