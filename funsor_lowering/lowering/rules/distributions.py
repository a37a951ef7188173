"""Funsor distributions (``funsor.torch.distributions``,
``funsor.jax.distributions``): the log-density as one op that builds the
backend distribution from its lowered parameters and calls ``log_prob``,
exactly as funsor's ``to_data`` builds it (singleton independent dims added
to parameters, ``to_event`` for the value's event dims)."""

from funsor.distribution import Distribution, infer_shapes

from ...ops.extra_ops import DistributionLogProbOp, numeric_parameters
from ..driver import Lowered, lowering_rule
from ..layout import align_expanded, apply_finitary, reshape, union_batch


def parameter_operands(term, params, batch):
    """The distribution's lowered parameters laid out as the backend
    distribution takes them: batch axes (``batch``) first, singleton
    independent dims added between the batch and event dims."""
    if type(term).__name__ == "Delta":
        # funsor's Delta distribution converts to data by its own rule
        # (``event_dim`` from ``v``'s shape): no independent dims to add
        indep_shape = ()
    else:
        domains = {k: v.output for k, v in term.params.items()}
        indep_shape, _ = infer_shapes(term.dist_class, domains)
    names = tuple(term._ast_fields[:-1])
    numeric = numeric_parameters(term.dist_class, names)
    exprs = []
    for name, param, raw in zip(names, params, term._ast_values[:-1]):
        if name in numeric and not param.batch:
            # left a scalar, as funsor's to_data leaves it
            exprs.append(param.expr)
            continue
        event = getattr(term._infer_param_domain(name, raw.output.shape), "shape", ())
        indep = raw.output.shape[: len(raw.output.shape) - len(event)]
        pad = max(0, len(indep_shape) - len(indep))
        expr = align_expanded(param, batch, param.event_shape)
        shape = expr.output.shape
        nb = len(batch)
        exprs.append(reshape(expr, shape[:nb] + (1,) * pad + shape[nb:]))
    return names, exprs


@lowering_rule(Distribution, [object])
def lower_distribution(term, *args):
    # The value may be any expression: at concrete inputs funsor's eager
    # evaluation sees a Tensor value and takes its log_prob directly.
    *params, value = args
    batch = union_batch(*args)
    names, exprs = parameter_operands(term, params, batch)
    exprs.append(align_expanded(value, batch, value.event_shape))
    op = DistributionLogProbOp(
        dist_class=term.dist_class,
        names=names,
        event_rank=len(term.value.output.shape),
    )
    return Lowered(apply_finitary(op, exprs), batch)
