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
from pyro.contrib.funsor.handlers.runtime import _DIM_STACK, DimRequest, DimType
from pyro.contrib.funsor.handlers.trace_messenger import TraceMessenger
from pyro.distributions import Categorical
from pyro.poutine.subsample_messenger import _Subsample
from pyro.poutine.trace_messenger import TraceMessenger as PyroTraceMessenger


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
    """A site's tensor and the names of its dims larger than 1."""

    __slots__ = ("data", "names")

    def __init__(self, data):
        self.data = data
        self.names = tuple(dim_names(data.shape).items())

    def signature(self):
        return (tuple(self.data.shape), str(self.data.dtype), self.names)


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
        if type(fn) is not Categorical and not isinstance(
            fn, torch.distributions.Categorical
        ):
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
        msg["funsor"] = msg.get("funsor", {})
        # replayed into the model as pyro.contrib.funsor replays guide values
        msg["funsor"]["value"] = funsor.Tensor(
            support, OrderedDict([(name, funsor.Bint[size])]), size
        )
        msg["lowering_enumerated"] = True
        msg["done"] = True


def _masked(fn, mask):
    return fn if mask is None else fn.mask(torch.as_tensor(mask))


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
            record["log_measure"] = RecordedTensor(fn.log_prob(value))
        infer = msg["infer"]
        if not infer.get("_do_not_trace") and not infer.get("_do_not_score", False):
            record["log_prob"] = RecordedTensor(
                _masked(fn, msg["mask"]).log_prob(value)
            )
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
