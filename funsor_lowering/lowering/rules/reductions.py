"""``Reduce`` over named ``Bint`` inputs: axis reductions.

``Variable("f", Reals[3])["i"].reduce(ops.add, "i")`` lowers to
``ops.sum(f, 0)``. Reducing over an input the argument does not depend on
repeats it (funsor's semantics): a sum scales by the size, a logsumexp adds
``log(size)``, a product raises to the size, max/min/and/or leave it as is.
"""

import math

from funsor import ops
from funsor.ops import AssociativeOp
from funsor.terms import Funsor, Reduce

from ...errors import source_name
from ..driver import Lowered, lowering_rule
from ..layout import apply, constant, parametrized
from ..sound_algebra import REPEATED

# Reduction op along axes, by the associative op funsor reduces with.
AXIS_REDUCTIONS = {
    ops.AddOp: ops.SumOp,
    ops.MulOp: ops.ProdOp,
    ops.LogaddexpOp: ops.LogsumexpOp,
    ops.MaxOp: ops.AmaxOp,
    ops.MinOp: ops.AminOp,
    ops.AndOp: ops.AllOp,
    ops.OrOp: ops.AnyOp,
}


def _repeat(red_op, expr, size):
    """``expr`` reduced with ``red_op`` over an axis of ``size`` equal copies
    (the rule of :data:`~funsor_lowering.lowering.sound_algebra.REPEATED`)."""
    if type(red_op) not in REPEATED:
        return expr  # idempotent: max, min, and, or
    bin_op, of_size = REPEATED[type(red_op)]
    return apply(bin_op, expr, constant(of_size(size), "real"))


def reduce_batch(red_op, lowered, names, domains):
    """Reduce batch inputs ``names`` (with ``domains``) of ``lowered``."""
    order = list(lowered.batch)
    present = [name for name in names if name in lowered.batch]
    expr = lowered.expr
    if present:
        axes = tuple(sorted(order.index(name) for name in present))
        reduction = AXIS_REDUCTIONS[type(red_op)]
        expr = apply(
            parametrized(reduction, axis=axes if len(axes) > 1 else axes[0]), expr
        )
    size = math.prod(domains[name].size for name in names if name not in lowered.batch)
    if size > 1:
        expr = _repeat(red_op, expr, size)
    batch = {k: d for k, d in lowered.batch.items() if k not in names}
    return Lowered(expr, batch)


def unsupported_reduction(op, reduced_vars):
    """A reason why reducing ``reduced_vars`` with ``op`` cannot be lowered."""
    real = sorted(source_name(v.name) for v in reduced_vars if v.dtype == "real")
    if real:
        return f"it integrates over real variables {real}; only Bint inputs reduce"
    if type(op) not in AXIS_REDUCTIONS:
        return f"no axis reduction for {op!r}; supported: " + ", ".join(
            f"ops.{k.__name__[:-2].lower()}" for k in AXIS_REDUCTIONS
        )
    return None


@lowering_rule(Reduce, AssociativeOp, Funsor, frozenset)
def lower_reduce(term, op, arg, reduced_vars):
    names = [v.name for v in reduced_vars]
    domains = {v.name: v.output for v in reduced_vars}
    return reduce_batch(op, arg, names, domains)


lower_reduce.precondition = lambda term: unsupported_reduction(
    term.op, term.reduced_vars
)
