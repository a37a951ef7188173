"""Cheap recording of enumerated Pyro traces for the compiled enumeration
losses.

``pyro.contrib.funsor``'s handlers turn every sample site into funsors while
the model runs (its distribution, value, log density and enumerated log
measure), paying funsor's interpreter at each site. The handlers here keep
``pyro.contrib.funsor``'s name <-> dim bookkeeping (its plates, ``markov``
and ``vectorized_markov`` run unchanged and allocate the same dims in the
same order) but record each site's log densities as plain tensors, with the
names of their dims: :class:`RecordingEnumMessenger` enumerates
``Categorical`` sites, :class:`RecordingTraceMessenger` records the tensors
under ``msg["lowering"]``. Everything funsor does with them is left to the
compiled program.
"""

from collections import OrderedDict

import funsor
import torch
from pyro.contrib.funsor.handlers.enum_messenger import EnumMessenger
from pyro.contrib.funsor.handlers.plate_messenger import VectorizedMarkovMessenger
from pyro.contrib.funsor.handlers.runtime import _DIM_STACK, DimRequest, DimType
from pyro.contrib.funsor.handlers.trace_messenger import TraceMessenger
from pyro.poutine.runtime import _PYRO_STACK
from pyro.poutine.subsample_messenger import _Subsample
from pyro.poutine.trace_messenger import TraceMessenger as PyroTraceMessenger

from ..ops.shapes import broadcast_shape
from .observed_bernoulli import BernoulliLogDensity, is_plain_bernoulli


def dim_names(shape):
    """The names of the dims of ``shape`` larger than 1, by negative dim,
    allocated as ``pyro.contrib.funsor.to_funsor`` would."""
    request = OrderedDict(
        (dim, DimRequest(None, DimType.LOCAL))
        for dim in range(-len(shape), 0)
        if shape[dim] > 1
    )
    return _DIM_STACK.allocate(request) if request else OrderedDict()


class RecordedTensor:
    """A site's tensor (or only its shape, where its values are not
    needed, or a ``lazy`` log density to be summed over plates: see
    :meth:`resolved`) and the names of its dims larger than 1."""

    __slots__ = ("data", "shape", "names", "lazy")

    def __init__(self, data, shape=None, names=None, lazy=None):
        self.data = data
        self.shape = tuple(data.shape if shape is None else shape)
        if names is None:
            names = tuple(dim_names(self.shape).items())
        self.names = names
        self.lazy = lazy

    def resolved(self, summed_plates):
        """This record with a lazy log density computed: summed over the
        dims named in ``summed_plates`` where it can be, those dims
        dropped."""
        if self.lazy is None:
            return self
        dims = self.lazy.summable(d for d, n in self.names if n in summed_plates)
        if not dims:
            return RecordedTensor(self.lazy.materialized(), self.shape, self.names)
        data = self.lazy.summed(dims)
        names = tuple((d, n) for d, n in self.names if d not in dims)
        return RecordedTensor(data, data.shape, names)

    @classmethod
    def support_log_density(cls, fn, name):
        """A ``Categorical`` site's log density over its support
        (``fn.log_prob(value)`` for the enumerated ``value``): its logits,
        the last axis named after the site."""
        batch = dim_names(fn.logits.shape[:-1])
        names = tuple((dim - 1, n) for dim, n in batch.items()) + ((-1, name),)
        return cls(fn.logits, names=names)

    def signature(self):
        if self.data is None:
            return (self.shape, None, None, self.names)
        return (self.shape, self.data.dtype, self.data.device, self.names)

    def inputs_only(self):
        """A funsor with this tensor's inputs (and zeros as values)."""
        sizes = tuple(self.shape[dim] for dim, _ in self.names)
        inputs = OrderedDict(
            (name, funsor.Bint[self.shape[dim]]) for dim, name in self.names
        )
        return funsor.Tensor(torch.zeros(()).expand(sizes), inputs)


class RecordingEnumMessenger(EnumMessenger):
    """``pyro.contrib.funsor``'s ``enum`` for exact parallel enumeration of
    ``Categorical`` sites, without funsor: the site's value is its support
    ``arange(K)`` at a freshly allocated dim, as in ``pyro.contrib.funsor``.
    Other enumeration strategies raise :class:`NotImplementedError` naming
    the site."""

    def _pyro_sample(self, msg):
        if (
            msg["done"]
            or msg["is_observed"]
            or msg["infer"].get("enumerate") not in {"flat", "parallel"}
            or isinstance(msg["fn"], _Subsample)
        ):
            return
        name, infer = msg["name"], msg["infer"]
        if infer["enumerate"] != "parallel" or infer.get("num_samples") is not None:
            raise NotImplementedError(
                f"site {name!r}: only exact parallel enumeration "
                "(infer={'enumerate': 'parallel'} without num_samples) is "
                f"compiled, got infer={infer!r}; use pyro.contrib.funsor's "
                "losses for sequential, flat or sampled (TMC) enumeration"
            )
        fn = msg["fn"]
        if not isinstance(fn, torch.distributions.Categorical):
            raise NotImplementedError(
                f"site {name!r}: parallel enumeration of "
                f"{type(fn).__name__} is not supported; compiled enumeration "
                "supports Categorical sites (pyro.contrib.funsor itself "
                "fails on enumerated Bernoulli sites)"
            )
        size = fn.logits.shape[-1]
        (dim,) = _DIM_STACK.allocate(
            OrderedDict([(name, DimRequest(None, DimType.LOCAL))])
        ).values()
        support = torch.arange(size, device=fn.logits.device)
        msg["value"] = support.reshape((size,) + (1,) * (-1 - dim))
        msg["lowering_enumerated"] = True
        msg["done"] = True


def add_replayed_values(guide_trace):
    """Give the enumerated sites of a recorded ``guide_trace`` their values
    as funsors, which ``pyro.contrib.funsor``'s ``replay`` reads when it
    replays them into the model (only a guide's are replayed)."""
    for name, node in guide_trace.nodes.items():
        if node.get("lowering_enumerated"):
            support = node["value"].reshape(-1)
            size = len(support)
            node.setdefault("funsor", {})["value"] = funsor.Tensor(
                support, OrderedDict([(name, funsor.Bint[size])]), size
            )


def _masked(fn, mask):
    return fn if mask is None else fn.mask(torch.as_tensor(mask))


def _log_prob_shape(fn, value, mask):
    """The shape of ``_masked(fn, mask).log_prob(value)``, without computing
    it."""
    shapes = [fn.batch_shape, value.shape[: value.dim() - len(fn.event_shape)]]
    if mask is not None:
        shapes.append(torch.as_tensor(mask).shape)
    return broadcast_shape(*(tuple(map(int, s)) for s in shapes), what="log densities")


def _in_vectorized_markov():
    return any(isinstance(frame, VectorizedMarkovMessenger) for frame in _PYRO_STACK)


class RecordingTraceMessenger(TraceMessenger):
    """``pyro.contrib.funsor``'s ``trace``, recording each sample site's
    tensors under ``msg["lowering"]``: ``log_prob`` (masked, as
    ``pyro.contrib.funsor`` scores sites), ``log_measure`` (enumerated
    sites: the unmasked log density of the support) and ``scale``."""

    def _pyro_post_sample(self, msg):
        if msg["name"] in self.trace:
            return
        fn = msg["fn"]
        if isinstance(fn, _Subsample):
            return PyroTraceMessenger._pyro_post_sample(self, msg)
        value = msg["value"]
        # the dims pyro.contrib.funsor names here, in its order: the
        # distribution's batch dims, the value's batch dims, the log density's
        dim_names(fn.batch_shape)
        event_dim = len(fn.event_shape)
        dim_names(value.shape[: value.dim() - event_dim])
        record = {}
        if msg.get("lowering_enumerated"):
            record["log_measure"] = RecordedTensor.support_log_density(fn, msg["name"])
        infer = msg["infer"]
        if not infer.get("_do_not_trace") and not infer.get("_do_not_score", False):
            if msg["is_observed"] and is_plain_bernoulli(fn):
                shape = _log_prob_shape(fn, value, msg["mask"])
                log_prob = RecordedTensor(
                    None,
                    shape,
                    lazy=BernoulliLogDensity(fn, value, msg["mask"], shape),
                )
            elif msg["is_observed"] or not msg.get("replay_skipped", False):
                log_prob = RecordedTensor(_masked(fn, msg["mask"]).log_prob(value))
            else:  # not a log factor: only the names of its dims count
                log_prob = RecordedTensor(None, _log_prob_shape(fn, value, msg["mask"]))
            record["log_prob"] = log_prob
            if _in_vectorized_markov():
                # what VectorizedMarkovMessenger reads (else it computes
                # the log density): only its inputs are used
                msg.setdefault("funsor", {})["log_prob"] = log_prob.inputs_only()
        scale = msg["scale"]
        if isinstance(scale, torch.Tensor):
            if scale.numel() != 1:
                raise NotImplementedError(
                    f"site {msg['name']!r}: a scale tensor of shape "
                    f"{tuple(scale.shape)} is not supported; compiled "
                    "enumeration supports scalar scales"
                )
            scale = float(scale)
        record["scale"] = 1.0 if scale is None else float(scale)
        msg["lowering"] = record
        return PyroTraceMessenger._pyro_post_sample(self, msg)
