"""Ops our lowering emits that ``funsor.ops`` lacks, written with backend-
neutral array syntax, with shape rules. Funsor evaluates them like any op.

- ``take(x, index)``: ``x[index]``, rows of ``x`` picked by an integer array
  (the one gather a lowered program needs; funsor's ``GetitemOp`` means a
  scalar index whose batch dims are named, so it cannot express this).

Example::

    >>> import numpy as np
    >>> take(np.array([[1, 2], [3, 4], [5, 6]]), np.array([2, 0]))
    array([[5, 6],
           [1, 2]])
"""

from funsor import ops
from funsor.domains import Array, find_domain


@ops.BinaryOp.make(module_name="funsor_lowering.extra_ops")
def take(x, index):
    return x[index]


TakeOp = type(take)  # module-level, so programs holding the op pickle


@find_domain.register(TakeOp)
def find_domain_take(op, x, index):
    return Array[x.dtype, tuple(index.shape) + tuple(x.shape[1:])]


__all__ = [
    "DistributionLogProbOp",
    "DistributionSampleOp",
    "RandnWithKeyOp",
    "TakeOp",
    "distribution_log_prob",
    "distribution_sample",
    "randn_with_key",
    "take",
]


def _backend_distribution(dist_class, names, params, event_rank):
    dist = dist_class(**dict(zip(names, params)))
    extra = event_rank - len(dist.event_shape)
    return dist.to_event(extra) if extra > 0 else dist


@ops.FinitaryOp.make(module_name="funsor_lowering.extra_ops")
def distribution_log_prob(args, dist_class=None, names=(), event_rank=0):
    """``dist_class(**dict(zip(names, args[:-1]))).log_prob(args[-1])``, with
    the distribution's event made ``event_rank`` dims (``to_event``), as
    funsor's ``to_data`` of a distribution builds it."""
    *params, value = args
    return _backend_distribution(dist_class, names, params, event_rank).log_prob(value)


DistributionLogProbOp = type(distribution_log_prob)


@find_domain.register(DistributionLogProbOp)
def find_domain_distribution_log_prob(op, domains):
    # Only the lowering rule builds this op and knows the batch shape; it
    # passes it as the value's leading shape (see rules/distributions.py).
    *params, value = domains
    event_rank = op.defaults["event_rank"]
    return Array["real", tuple(value.shape[: len(value.shape) - event_rank])]


@ops.FinitaryOp.make(module_name="funsor_lowering.extra_ops")
def distribution_sample(
    args, dist_class=None, names=(), event_rank=0, sample_shape=(), keyed=False
):
    """A draw of shape ``sample_shape + batch + event`` from the backend
    distribution built from ``args`` (its parameters, then the rng key when
    ``keyed``, as jax needs): ``rsample`` where the distribution has it, else
    ``sample`` (detached). A random op: never folded."""
    params, key = (args[:-1], args[-1]) if keyed else (args, None)
    dist = _backend_distribution(dist_class, names, params, event_rank)
    draw_args = (key, sample_shape) if keyed else (sample_shape,)
    if dist.has_rsample:
        return dist.rsample(*draw_args)
    return ops.detach(dist.sample(*draw_args))


DistributionSampleOp = type(distribution_sample)


@ops.BinaryOp.make(module_name="funsor_lowering.extra_ops")
def randn_with_key(prototype, rng_key, shape=()):
    """``ops.randn(prototype, shape, rng_key)`` with the key as an operand
    (a program input on jax), not a fixed parameter."""
    return ops.randn(prototype, shape, rng_key)


RandnWithKeyOp = type(randn_with_key)


@find_domain.register(RandnWithKeyOp)
def find_domain_randn_with_key(op, prototype, rng_key):
    return Array["real", tuple(op.defaults["shape"])]
