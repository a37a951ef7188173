"""From recorded Pyro traces to the terms of an enumeration ELBO.

:func:`describe_trace` (:func:`describe_traces`) reduces a trace recorded by
:mod:`.enum_recording` to a hashable description of its structure (site
names, plates, markov chains, dim names, shapes, dtypes and scales) and the
list of its tensors. The description with its names made canonical is the
key of the compiled program (:func:`structure_key`); :func:`terms_of`
rebuilds, from a description and its tensors, the ELBO terms that
``pyro.contrib.funsor``'s ``terms_from_trace`` extracts from its funsor
traces: log factors, log measures, the common scale, plate and measure
variables, and the plates' markov steps.
"""

from collections import OrderedDict
from typing import NamedTuple

import funsor
from funsor import ops
from funsor.tensor import Tensor
from funsor.terms import Number
from pyro.poutine.subsample_messenger import _Subsample


class Chain(NamedTuple):
    """A ``vectorized_markov`` chain: its name and steps (sorted tuples of
    site names)."""

    name: str
    steps: tuple


class Site(NamedTuple):
    """A scored sample site. ``log_prob`` and ``log_measure`` are
    ``(index, shape, dtype, device, names)`` of the site's tensors
    (``names``: pairs of negative dim and name; ``index``, ``dtype`` and
    ``device`` are ``None`` for a log density that is not a log factor), or
    ``None``."""

    name: str
    plates: tuple
    log_prob: tuple
    log_measure: tuple
    scale: float
    replay_active: bool
    replay_skipped: bool
    is_observed: bool


def _plates(node):
    return frozenset(f.name for f in node["cond_indep_stack"] if f.vectorized)


def summable_plates(*traces):
    """The plates of recorded ``traces`` in which no variable is
    enumerated and that are not markov chains: every log factor can be
    summed over them first (the enumeration multiplies a plate's factors
    before it sums out variables outside the plate)."""
    plates, kept = set(), set()
    for trace in traces:
        for name, node in trace.nodes.items():
            if node["type"] == "markov_chain":
                kept.add(name)
            elif node["type"] == "sample":
                plates |= _plates(node)
                if node.get("lowering", {}).get("log_measure") is not None:
                    kept |= _plates(node)
    return frozenset(plates - kept)


def describe_trace(trace, tensors, summed_plates=frozenset()):
    """The description of a recorded ``trace``: a tuple of :class:`Chain`
    and :class:`Site`. Its tensors are appended to the list ``tensors``.
    Lazily recorded log densities are summed over the dims named in
    ``summed_plates`` (of :func:`summable_plates`)."""

    def slot(recorded):
        if recorded is None:
            return None
        recorded = recorded.resolved(summed_plates)
        if recorded.data is None:  # only its dims' names are needed
            return (None,) + recorded.signature()
        tensors.append(recorded.data)
        return (len(tensors) - 1,) + recorded.signature()

    nodes = []
    for name, node in trace.nodes.items():
        if node["type"] == "markov_chain":
            nodes.append(Chain(name, tuple(sorted(node["value"]))))
            continue
        if (
            node["type"] != "sample"
            or isinstance(node["fn"], _Subsample)
            or node["infer"].get("_do_not_score", False)
        ):
            continue
        record = node["lowering"]
        nodes.append(
            Site(
                name=name,
                plates=tuple(sorted(_plates(node))),
                log_prob=slot(record.get("log_prob")),
                log_measure=slot(record.get("log_measure")),
                scale=record["scale"],
                replay_active=bool(node.get("replay_active", False)),
                replay_skipped=bool(node.get("replay_skipped", False)),
                is_observed=bool(node["is_observed"]),
            )
        )
    return tuple(nodes)


def describe_traces(*traces):
    """The descriptions of recorded ``traces`` (:func:`describe_trace`, log
    densities summed over the :func:`summable_plates` of them all) and the
    list of their tensors."""
    summed, tensors = summable_plates(*traces), []
    return tuple(describe_trace(t, tensors, summed) for t in traces), tensors


def structure_key(*descriptions, ranks=None):
    """``descriptions`` with every name replaced by its rank of first
    appearance, so structures differing only in generated names (such as
    the particle plate's) share a program. Pass a dict as ``ranks`` to get
    the ranks of the names."""
    ranks = {} if ranks is None else ranks

    def canonical(x):
        if isinstance(x, str):
            return ranks.setdefault(x, len(ranks))
        if isinstance(x, tuple):
            return (
                type(x)(*map(canonical, x))
                if hasattr(x, "_fields")
                else tuple(map(canonical, x))
            )
        return x

    return canonical(descriptions)


def program_inputs(tensors):
    """The keyword inputs of a program over a trace's ``tensors``: the
    ``k``-th tensor as ``t{k}``."""
    return {f"t{k}": t for k, t in enumerate(tensors)}


def input_list(inputs):
    """The tensors of :func:`program_inputs`, as a list in order."""
    return [inputs[f"t{k}"] for k in range(len(inputs))]


def tensor_of(arrays, slot):
    """The funsor ``Tensor`` of a recorded tensor: its dims larger than 1,
    named."""
    index, shape, _, _, names = slot
    data = arrays[index]
    sizes = tuple(shape[dim] for dim, _ in names)
    if sizes != tuple(shape):
        data = ops.ReshapeOp(shape=sizes)(data)
    inputs = OrderedDict((name, funsor.Bint[shape[dim]]) for dim, name in names)
    return Tensor(data, inputs)


def terms_of(description, arrays):
    """The ELBO terms of a described trace, as ``pyro.contrib.funsor``'s
    ``terms_from_trace`` extracts them (a dict with the same keys, and
    ``measure_of``: each enumerated site's log measure)."""
    terms = {
        "log_factors": [],
        "log_measures": [],
        "scale": Number(1.0),
        "plate_vars": frozenset(),
        "measure_vars": frozenset(),
        "plate_to_step": {},
        "measure_of": {},  # site name -> its log measure (one of log_measures)
    }
    measured = {
        node.name
        for node in description
        if isinstance(node, Site) and node.log_measure is not None
    }
    for node in description:
        if isinstance(node, Chain):
            terms["plate_to_step"][node.name] = frozenset(node.steps)
            for step in node.steps:
                terms["measure_vars"] |= frozenset(
                    v for v in step[1:-1] if v in measured
                )
            continue
        terms["plate_vars"] |= frozenset(node.plates)
        if node.log_measure is not None:
            # pyro.contrib.funsor normalizes the enumerated log density over
            # the site's values; a Categorical's logits (what is recorded)
            # are normalized already (also in their gradients: they only
            # move along normalized logits), so that is left out
            log_measure = tensor_of(arrays, node.log_measure)
            terms["log_measures"].append(log_measure)
            terms["measure_of"][node.name] = log_measure
            terms["measure_vars"] |= frozenset({node.name}) - terms["plate_vars"]
        if node.log_prob is None:
            continue
        common_scale = (
            node.replay_active
            and terms["measure_vars"].intersection(n for _, n in node.log_prob[-1])
            and node.scale != 1.0
        )
        if common_scale:  # a model site depending on enumerated variables
            terms["scale"] = Number(node.scale)
        if node.is_observed or not node.replay_skipped:
            log_prob = tensor_of(arrays, node.log_prob)
            if not common_scale:
                log_prob = log_prob * Number(node.scale)
            terms["log_factors"].append(log_prob)
    for plate in terms["plate_vars"]:
        terms["plate_to_step"].setdefault(plate, {})
    return terms
