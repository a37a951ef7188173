"""Contraction: products (and, later, sums of products) of terms."""

import functools

from funsor.cnf import Contraction
from funsor.ops import AssociativeOp
from funsor.terms import Binary

from ..errors import source_name
from ..lowering import Lowered, build, lowering_rule
from .elementwise import require_no_batch


@lowering_rule(Contraction, AssociativeOp, AssociativeOp, frozenset, tuple)
def lower_contraction(term, red_op, bin_op, reduced_vars, terms):
    """A Contraction without reduced variables is a chain of ``Binary(bin_op)``."""
    require_no_batch(term, *terms)
    if len(terms) == 1:
        return terms[0]
    exprs = [t.expr for t in terms]
    return Lowered(functools.reduce(lambda a, b: build(Binary, bin_op, a, b), exprs))


def _contraction_precondition(term):
    if term.reduced_vars:
        names = ", ".join(sorted(source_name(v.name) for v in term.reduced_vars))
        return f"it reduces ({names}), and reductions are not lowered yet"
    return None


lower_contraction.precondition = _contraction_precondition
