"""``infer_discrete``, compiled: a drop-in for
``pyro.contrib.funsor.infer_discrete``.

``pyro.contrib.funsor`` records the model with enumeration, then runs
funsor's ``sum_product`` and its adjoint (under ``argmax_approximate`` for
MAP, ``MonteCarlo`` for sampling) to draw every enumerated site, and replays
the model with those values. Here the model is recorded with the cheap
handlers of :mod:`.enum_recording`, and the sum-product and its adjoint run
as a program traced once per model structure, returning each site's value.
The model is then replayed exactly as ``pyro.contrib.funsor`` replays it.

funsor 0.4.8's adjoint handles contractions of one or two terms only, so
``pyro.contrib.funsor.infer_discrete`` fails with an ``AssertionError`` on
the plated chains of Pyro's hmm.py models; here the adjoint of a
contraction of more terms follows funsor's rule for two, and these models
get the MAP values of Pyro's own ``pyro.infer.infer_discrete``.
"""

import functools
from collections import OrderedDict

import funsor
import torch
from funsor import ops
from funsor.approximations import Approximate
from pyro.contrib.funsor.handlers import replay
from pyro.contrib.funsor.handlers.enum_messenger import _get_support_value
from pyro.poutine import Trace, block
from pyro.poutine.util import site_is_subsample

from ..ops import hooks
from ..tracing.tracer import trace_function
from .enum_recording import RecordingEnumMessenger, RecordingTraceMessenger
from .enum_terms import (
    describe_traces,
    input_list,
    program_inputs,
    structure_key,
    terms_of,
)
from .program_cache import ProgramCache

#: (program, value inputs) by (temperature, structure key)
PROGRAMS = ProgramCache()


def infer_discrete(model, first_available_dim=None, temperature=1):
    """A function running ``model`` with its enumerated sites drawn from
    their posterior (``temperature=1``) or set to their joint MAP values
    (``temperature=0``), as ``pyro.contrib.funsor.infer_discrete``."""
    return functools.partial(_sample_posterior, model, first_available_dim, temperature)


def _semiring(temperature):
    if temperature == 0:
        return funsor.ops.max, funsor.approximations.argmax_approximate
    if temperature == 1:
        return funsor.ops.logaddexp, funsor.montecarlo.MonteCarlo()
    raise ValueError("temperature must be 0 (map) or 1 (sample) for now")


def _sample_posterior(model, first_available_dim, temperature, *args, **kwargs):
    _semiring(temperature)  # checks temperature first, as pyro.contrib.funsor
    with block(), RecordingEnumMessenger(first_available_dim=first_available_dim):
        # replay against an empty trace, so densities are not counted twice
        model_tr = RecordingTraceMessenger()(replay(model, trace=Trace())).get_trace(
            *args, **kwargs
        )
    latent = _latent_sites(model_tr)
    (description,), tensors = describe_traces(model_tr)
    ranks = {}
    key = (temperature, structure_key(description, ranks=ranks))
    program, value_inputs = PROGRAMS.get(
        key, lambda: _compile(description, latent, tensors, temperature, ranks)
    )
    names = list(ranks)  # this call's names, by rank
    values = program(**program_inputs(tensors))
    sample_tr = model_tr.copy()
    sampled = {}
    for name, value, value_input in zip(latent, values, value_inputs):
        inputs = OrderedDict(
            (names[rank], funsor.Bint[size]) for rank, size in value_input
        )
        node = sample_tr.nodes[name]
        sampled[name] = funsor.Tensor(value, inputs, _support_size(node))
        node["funsor"] = {"value": sampled[name]}
    _slice_observations(sample_tr, sampled)
    with replay(trace=sample_tr):
        return model(*args, **kwargs)


def _slice_observations(trace, sampled):
    """Observed values drawn under enumeration (e.g. conditioned on a trace
    recorded with enumeration) are sliced by the sampled values, as
    ``pyro.contrib.funsor.infer_discrete`` slices them: such a value has
    the enumeration dims of the sites it depends on. Replaces those nodes
    of ``trace`` (a copy) by ones holding the sliced value."""
    enum_dims = {}
    for name in sampled:
        # an enumerated value is its support at its enumeration dim
        enum_dims[-trace.nodes[name]["value"].dim()] = name
    for name, node in list(trace.nodes.items()):
        value = node.get("value")
        if (
            node["type"] != "sample"
            or not node["is_observed"]
            or site_is_subsample(node)
            or not isinstance(value, torch.Tensor)
        ):
            continue
        event_shape = tuple(node["fn"].event_shape)
        batch_rank = value.dim() - len(event_shape)
        dims = [d for d in range(-batch_rank, 0) if value.shape[batch_rank + d] > 1]
        if not any(d in enum_dims for d in dims):
            continue
        plates = {f.dim: f.name for f in node["cond_indep_stack"] if f.vectorized}
        inputs = OrderedDict()
        for d in dims:
            dim_name = enum_dims.get(d, plates.get(d))
            if dim_name is None:
                raise NotImplementedError(
                    f"site {name!r}: its observed value has a dim ({d}) that is "
                    "neither an enumerated site's nor a plate's"
                )
            inputs[dim_name] = funsor.Bint[value.shape[batch_rank + d]]
        data = value.reshape(tuple(d.size for d in inputs.values()) + event_shape)
        dtype = "real" if data.is_floating_point() else int(data.max()) + 1
        subs = {k: sampled[k] for k in inputs if k in sampled}
        sliced = funsor.Tensor(data, inputs, dtype)(**subs)
        dim_of = {v: k for k, v in plates.items()}
        order = sorted(sliced.inputs, key=dim_of.__getitem__)
        rank = max((-dim_of[k] for k in order), default=0)  # as to_data has it
        shape = [1] * rank + list(event_shape)
        for k in order:
            shape[rank + dim_of[k]] = sliced.inputs[k].size
        value = sliced.align(tuple(order)).data.reshape(shape)
        trace.nodes[name] = dict(node, value=value)


def _adjoint_of_many_terms(
    adj_sum_op, adj_prod_op, out_adj, sum_op, prod_op, reduced_vars, terms
):
    """funsor's adjoint of a ``Contraction``, for any number of terms
    (funsor's handles one or two, and fails on plated chains' sum-products
    with an ``AssertionError``, in ``pyro.contrib.funsor`` too): each term's
    adjoint is the output's times every other term, as funsor's rule for
    two terms."""
    if len(terms) <= 2 or prod_op is not adj_prod_op:
        return hooks.original("adjoint_contract_generic")(
            adj_sum_op, adj_prod_op, out_adj, sum_op, prod_op, reduced_vars, terms
        )
    if sum_op not in (ops.null, adj_sum_op):
        raise NotImplementedError(
            f"adjoint of a {sum_op} contraction of {len(terms)} terms"
        )

    def product(factors):
        return functools.reduce(adj_prod_op, factors)

    out_adj = Approximate(
        adj_sum_op, out_adj, adj_prod_op(out_adj, product(terms)), reduced_vars
    )
    return tuple(
        (term, adj_prod_op(out_adj, product(terms[:i] + terms[i + 1 :])))
        for i, term in enumerate(terms)
    )


def _support_size(node):
    return node["fn"].logits.shape[-1]


def _latent_sites(trace):
    """The names of the trace's enumerated sites; other latent sites raise
    :class:`NotImplementedError`."""
    latent = []
    for name, node in trace.nodes.items():
        if node["type"] != "sample" or site_is_subsample(node) or node["is_observed"]:
            continue
        if node["infer"].get("_do_not_score", False):
            raise NotImplementedError(
                f"site {name!r}: infer_discrete of vectorized_markov's "
                "auxiliary sites is not supported (nor by "
                "pyro.contrib.funsor.infer_discrete)"
            )
        if not node.get("lowering_enumerated"):
            raise NotImplementedError(
                f"site {name!r}: infer_discrete needs every latent site to be "
                "enumerated (infer={'enumerate': 'parallel'}), as "
                "pyro.contrib.funsor.infer_discrete does"
            )
        latent.append(name)
    return latent


def _compile(description, latent, tensors, temperature, ranks):
    """The program of each latent site's value (in the order of ``latent``)
    and the ranks and sizes of each value's inputs."""
    sum_op, approximation = _semiring(temperature)
    value_inputs = []

    def posterior_values(**arrays):
        terms = terms_of(description, input_list(arrays))
        with funsor.interpretations.lazy:
            log_prob = funsor.sum_product.sum_product(
                sum_op,
                funsor.ops.add,
                terms["log_factors"] + terms["log_measures"],
                eliminate=terms["measure_vars"] | terms["plate_vars"],
                plates=terms["plate_vars"],
            )
            log_prob = funsor.optimizer.apply_optimizer(log_prob)
        with (
            approximation,
            hooks.replaced({"adjoint_contract_generic": _adjoint_of_many_terms}),
        ):
            approx_factors = funsor.adjoint.adjoint(sum_op, funsor.ops.add, log_prob)
        values = []
        for name in latent:
            value = _get_support_value(approx_factors[terms["measure_of"][name]], name)
            value_inputs.append(
                tuple((ranks[k], d.size) for k, d in value.inputs.items())
            )
            values.append(value.data)
        return values

    examples = program_inputs([t.detach() for t in tensors])
    program = trace_function(posterior_values, examples, allow_constants=True)
    return program, value_inputs
