"""Compiled drop-ins for ``pyro.contrib.funsor``'s enumeration losses.

``pyro.contrib.funsor.infer.TraceEnum_ELBO`` (and ``TraceMarkovEnum_ELBO``)
runs the model and guide under funsor handlers and then builds, optimizes
and evaluates a funsor expression for the ELBO, on every step. The losses
here run the model and guide under cheap recording handlers
(:mod:`.enum_recording`), which keep ``pyro.contrib.funsor``'s dims but
leave funsor out, and evaluate the ELBO with a program compiled once per
model structure (:func:`~funsor_lowering.trace_function` of the same funsor
computation ``pyro.contrib.funsor`` does), cached by the structure of the
traces: site names, shapes, dtypes, plates, markov chains, enumerated
supports and scales. A new structure (say, new shapes) compiles a new
program. Replacing the import is the only change::

    # from pyro.contrib.funsor.infer import TraceEnum_ELBO
    from funsor_lowering.pyro import TraceEnum_ELBO
"""

import contextlib

import funsor
import pyro.contrib.funsor.infer.traceenum_elbo as contrib
from funsor.adjoint import AdjointTape
from funsor.sum_product import _partition
from pyro.contrib.funsor.handlers import plate, replay
from pyro.contrib.funsor.infer.elbo import Jit_ELBO

from ..tracing.tracer import trace_function
from .enum_recording import (
    RecordingEnumMessenger,
    RecordingTraceMessenger,
    add_replayed_values,
)
from .enum_terms import (
    describe_traces,
    input_list,
    program_inputs,
    structure_key,
    terms_of,
)
from .program_cache import ProgramCache

#: programs by (loss kind, structure key); shared by all loss instances
PROGRAMS = ProgramCache()
#: structure keys by the descriptions they canonicalize (the same names
#: recur on every step: a hash lookup instead of a walk over the names)
STRUCTURE_KEYS = ProgramCache()


def record_traces(elbo, model, guide, args, kwargs):
    """The guide's and the model's (replayed against the guide) recorded
    traces, under the same enumeration and particle plate as
    ``pyro.contrib.funsor``'s losses."""
    first_dim = (-elbo.max_plate_nesting - 1) if elbo.max_plate_nesting else None
    particles = (
        plate(size=elbo.num_particles)
        if elbo.num_particles > 1
        else contextlib.ExitStack()
    )
    with particles, RecordingEnumMessenger(first_available_dim=first_dim):
        guide_tr = RecordingTraceMessenger()(guide).get_trace(*args, **kwargs)
        add_replayed_values(guide_tr)
        model_tr = RecordingTraceMessenger()(replay(model, trace=guide_tr)).get_trace(
            *args, **kwargs
        )
    return guide_tr, model_tr


def _split_log_factors(model_terms):
    """The model's log factors that depend on enumerated variables, and the
    others."""
    contracted, uncontracted = [], []
    for f in model_terms["log_factors"]:
        depends = model_terms["measure_vars"].intersection(f.inputs)
        (contracted if depends else uncontracted).append(f)
    return contracted, uncontracted


def _contracted_costs(model_terms, contracted):
    """The ``contracted`` log factors with the enumerated variables summed
    out per connected group, as ``TraceEnum_ELBO`` does."""
    costs = []
    for group_factors, group_vars in _partition(
        model_terms["log_measures"] + contracted, model_terms["measure_vars"]
    ):
        group_factor_vars = frozenset().union(*[f.inputs for f in group_factors])
        group_plates = model_terms["plate_vars"] & group_factor_vars
        outermost_plates = frozenset.intersection(
            *(frozenset(f.inputs) & group_plates for f in group_factors)
        )
        for f in funsor.sum_product.partial_sum_product(
            funsor.ops.logaddexp,
            funsor.ops.add,
            group_factors,
            plates=group_plates,
            eliminate=group_vars | (group_plates - outermost_plates),
        ):
            costs.append(model_terms["scale"] * f)
    return costs


def _markov_contracted_costs(model_terms, contracted):
    """As :func:`_contracted_costs`, eliminating markov dims with
    ``dynamic_partial_sum_product`` (``TraceMarkovEnum_ELBO``)."""
    markov_dims = frozenset(
        name for name, step in model_terms["plate_to_step"].items() if step
    )
    return [
        model_terms["scale"] * f
        for f in funsor.sum_product.dynamic_partial_sum_product(
            funsor.ops.logaddexp,
            funsor.ops.add,
            model_terms["log_measures"] + contracted,
            plate_to_step=model_terms["plate_to_step"],
            eliminate=model_terms["measure_vars"] | markov_dims,
        )
    ]


def enum_elbo(model_terms, guide_terms):
    """``TraceEnum_ELBO``'s ELBO: each cost integrated against the guide's
    marginal over its inputs (marginals by one adjoint pass)."""
    with funsor.terms.lazy:
        contracted, uncontracted = _split_log_factors(model_terms)
        costs = _contracted_costs(model_terms, contracted) + uncontracted
        costs += [-f for f in guide_terms["log_factors"]]
        plate_vars = guide_terms["plate_vars"] | model_terms["plate_vars"]
        targets = {}
        for cost in costs:
            input_vars = frozenset(cost.inputs)
            if input_vars not in targets:
                targets[input_vars] = funsor.Tensor(
                    funsor.ops.new_zeros(
                        funsor.tensor.get_default_prototype(),
                        tuple(v.size for v in cost.inputs.values()),
                    ),
                    cost.inputs,
                    cost.dtype,
                )
        with AdjointTape() as tape:
            logzq = funsor.sum_product.sum_product(
                funsor.ops.logaddexp,
                funsor.ops.add,
                guide_terms["log_measures"] + list(targets.values()),
                plates=plate_vars,
                eliminate=plate_vars | guide_terms["measure_vars"],
            )
        marginals = tape.adjoint(
            funsor.ops.logaddexp, funsor.ops.add, logzq, tuple(targets.values())
        )
        elbo = funsor.to_funsor(0, output=funsor.Real)
        for cost in costs:
            target = targets[frozenset(cost.inputs)]
            logzq_local = marginals[target].reduce(
                funsor.ops.logaddexp, frozenset(cost.inputs) - plate_vars
            )
            log_prob = marginals[target] - logzq_local
            term = funsor.Integrate(
                log_prob,
                cost,
                guide_terms["measure_vars"] & frozenset(log_prob.inputs),
            )
            elbo += term.reduce(funsor.ops.add, plate_vars & frozenset(cost.inputs))
    return _evaluate(elbo)


def markov_enum_elbo(model_terms, guide_terms):
    """``TraceMarkovEnum_ELBO``'s ELBO: as :func:`enum_elbo`, with markov
    dims eliminated by parallel scan and guide marginals by ``sum_product``."""
    if any(guide_terms["plate_to_step"].values()):
        raise NotImplementedError(
            "TraceMarkovEnum_ELBO does not yet support guide side Markov enumeration"
        )
    with funsor.terms.lazy:
        contracted, uncontracted = _split_log_factors(model_terms)
        costs = _markov_contracted_costs(model_terms, contracted) + uncontracted
        costs += [-f for f in guide_terms["log_factors"]]
        plate_vars = guide_terms["plate_vars"] | model_terms["plate_vars"]
        elbo = funsor.to_funsor(0, output=funsor.Real)
        for cost in costs:
            log_prob = funsor.sum_product.sum_product(
                funsor.ops.logaddexp,
                funsor.ops.add,
                guide_terms["log_measures"],
                plates=plate_vars,
                eliminate=(plate_vars | guide_terms["measure_vars"])
                - frozenset(cost.inputs),
            )
            term = funsor.Integrate(
                log_prob, cost, guide_terms["measure_vars"] & frozenset(cost.inputs)
            )
            elbo += term.reduce(funsor.ops.add, plate_vars & frozenset(cost.inputs))
    return _evaluate(elbo)


def _evaluate(elbo):
    with funsor.interpretations.memoize():
        return funsor.to_data(contrib.apply_optimizer(elbo))


class _CompiledEnumLoss:
    """The compiled ``differentiable_loss`` shared by the losses below;
    ``_formula`` is :func:`enum_elbo` or :func:`markov_enum_elbo`."""

    _formula = None

    def differentiable_loss(self, model, guide, *args, **kwargs):
        guide_tr, model_tr = record_traces(self, model, guide, args, kwargs)
        descriptions, tensors = describe_traces(guide_tr, model_tr)
        key = (
            type(self)._formula,
            STRUCTURE_KEYS.get(descriptions, lambda: structure_key(*descriptions)),
        )
        program = PROGRAMS.get(key, lambda: self._compile(*descriptions, tensors))
        return -program(**program_inputs(tensors))

    def _compile(self, guide_desc, model_desc, tensors):
        formula = type(self)._formula

        def elbo(**arrays):
            arrays = input_list(arrays)
            return formula(terms_of(model_desc, arrays), terms_of(guide_desc, arrays))

        examples = program_inputs([t.detach() for t in tensors])
        return trace_function(elbo, examples, allow_constants=True)


class TraceEnum_ELBO(_CompiledEnumLoss, contrib.TraceEnum_ELBO):
    """``pyro.contrib.funsor.infer.TraceEnum_ELBO``, compiled: same
    arguments, same loss and gradients."""

    _formula = staticmethod(enum_elbo)


class TraceMarkovEnum_ELBO(_CompiledEnumLoss, contrib.TraceMarkovEnum_ELBO):
    """``pyro.contrib.funsor.infer.TraceMarkovEnum_ELBO``, compiled: same
    arguments, same loss and gradients."""

    _formula = staticmethod(markov_enum_elbo)


class JitTraceEnum_ELBO(Jit_ELBO, TraceEnum_ELBO):
    """``pyro.contrib.funsor.infer.JitTraceEnum_ELBO``, compiled."""


class JitTraceMarkovEnum_ELBO(Jit_ELBO, TraceMarkovEnum_ELBO):
    """``pyro.contrib.funsor.infer.JitTraceMarkovEnum_ELBO``, compiled."""
