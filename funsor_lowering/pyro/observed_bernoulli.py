"""Observed Bernoulli sites' log densities, summed over plates without
computing them elementwise.

An HMM's emissions are typically a ``Bernoulli`` in a plate over notes
(tones, pixels, ...) whose probabilities depend on the hidden state only:
``log p(y | x) = y * logits[x] - softplus(logits[x])`` summed over the
plate is a matrix product of the data with the logits, where the log
density itself is a tensor of (states x sequences x steps x notes)
elements, computed and differentiated on every step. When no enumerated
variable lives in the plate, the enumeration sums that plate's log
factors before anything else (a product over a plate is a sum of log
factors), so :class:`BernoulliLogDensity` records such a site lazily and
:meth:`~BernoulliLogDensity.summed` computes its sum over the plates by
one ``einsum``.
"""

import math

import torch
from torch.distributions.utils import clamp_probs, probs_to_logits

from ..ops.shapes import broadcast_shape


def is_plain_bernoulli(fn):
    """Whether ``fn`` is a ``Bernoulli`` with torch's own ``log_prob``."""
    return (
        isinstance(fn, torch.distributions.Bernoulli)
        and type(fn).log_prob is torch.distributions.Bernoulli.log_prob
    )


def _compact(tensor):
    """``tensor`` without the copies of an ``expand`` (a view: its
    expanded dims of size 1 again)."""
    index = tuple(
        slice(0, 1) if size > 1 and stride == 0 else slice(None)
        for size, stride in zip(tensor.shape, tensor.stride())
    )
    return tensor[index]


def _left_padded(tensor, ndim):
    return tensor.reshape((1,) * (ndim - tensor.dim()) + tuple(tensor.shape))


class BernoulliLogDensity:
    """The log density of an observed plain ``Bernoulli`` site with its
    ``mask``, of broadcast ``shape``, kept as its parameter and value.
    Validates the value as ``log_prob`` would.

    >>> fn = torch.distributions.Bernoulli(torch.tensor([[0.2, 0.7, 0.9]]))
    >>> value = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]])
    >>> lazy = BernoulliLogDensity(fn, value, None, (2, 3))
    >>> torch.allclose(lazy.summed({-1}), fn.log_prob(value).sum(-1, True))
    True
    """

    __slots__ = ("probs", "_logits", "validated", "value", "mask", "shape")

    def __init__(self, fn, value, mask, shape):
        self.validated = bool(fn._validate_args)
        if self.validated:
            fn._validate_sample(value)
        if "logits" in fn.__dict__:
            self.probs, self._logits = None, _compact(fn.logits)
        else:
            self.probs, self._logits = _compact(fn.probs), None
        self.value = _compact(value)
        self.mask = None if mask is None else torch.as_tensor(mask)
        self.shape = tuple(shape)

    @property
    def logits(self):
        """The logits, unexpanded (as ``Bernoulli.logits`` computes them)."""
        if self._logits is None:
            self._logits = probs_to_logits(self.probs, is_binary=True)
        return self._logits

    def summable(self, dims):
        """Those of the negative ``dims`` along which the mask is constant
        (the sum over them commutes with masking)."""
        if self.mask is None:
            return frozenset(dims)
        mask_shape = (1,) * (len(self.shape) - self.mask.dim()) + tuple(self.mask.shape)
        return frozenset(d for d in dims if mask_shape[d] == 1)

    def materialized(self):
        """The log density, elementwise (as ``fn.mask(mask).log_prob``)."""
        if self.probs is not None and self.validated:
            # values are 0 or 1: log(p) or log(1 - p), of the probabilities
            # clamped as Bernoulli.logits clamps them (fewer ops than the
            # logits' log(p) - log1p(-p) and binary cross-entropy)
            probs = clamp_probs(self.probs)
            log_prob = torch.where(self.value.bool(), probs, 1 - probs).log()
        else:
            logits, value = torch.broadcast_tensors(self.logits, self.value)
            log_prob = -torch.nn.functional.binary_cross_entropy_with_logits(
                logits, value.to(logits.dtype), reduction="none"
            )
        return self._masked(log_prob.expand(self.shape))

    def summed(self, dims):
        """The log density summed over the negative ``dims`` (of
        :meth:`summable`), kept as dims of size 1. Where the parameter is
        broadcast along some dim (as an emission's along time), the sum is a
        contraction of the value with the logits; else it is elementwise."""
        param = self.probs if self._logits is None else self._logits
        if param.numel() < math.prod(
            broadcast_shape(
                tuple(map(int, param.shape)), tuple(map(int, self.value.shape))
            )
        ):
            return self._contracted(dims)
        return self.materialized().sum(sorted(dims), keepdim=True)

    def _contracted(self, dims):
        ndim = len(self.shape)
        axes = sorted(ndim + d for d in dims)
        logits = _left_padded(self.logits, ndim)
        value = _left_padded(self.value.to(logits.dtype), ndim)
        # sum(value * logits): one einsum over the dims either has
        letters = [chr(ord("a") + i) for i in range(ndim)]

        def subscripts(tensor):
            return "".join(letters[i] for i in range(ndim) if tensor.shape[i] > 1)

        kept = [
            i
            for i in range(ndim)
            if i not in axes and max(logits.shape[i], value.shape[i]) > 1
        ]
        contracted = torch.einsum(
            f"{subscripts(value)},{subscripts(logits)}->"
            + "".join(letters[i] for i in kept),
            value.squeeze(),
            logits.squeeze(),
        ).reshape(
            tuple(
                max(logits.shape[i], value.shape[i]) if i in kept else 1
                for i in range(ndim)
            )
        )
        # sum(softplus(logits)): over the logits' own dims, times the
        # number of copies broadcasting makes along the others
        own = [i for i in axes if logits.shape[i] > 1]
        copies = 1
        for i in axes:
            if logits.shape[i] == 1:
                copies *= self.shape[i]
        normalizer = torch.logaddexp(logits, logits.new_zeros(()))
        if own:
            normalizer = normalizer.sum(own, keepdim=True)
        if copies != 1:
            normalizer = normalizer * copies
        target = tuple(1 if i in axes else self.shape[i] for i in range(ndim))
        return self._masked(contracted - normalizer).expand(target)

    def _masked(self, log_prob):
        if self.mask is None:
            return log_prob
        return torch.where(self.mask, log_prob, log_prob.new_zeros(()))
