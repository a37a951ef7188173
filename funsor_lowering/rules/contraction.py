"""Contraction: products (and, later, sums of products) of terms."""

import functools

from funsor.cnf import Contraction
from funsor.ops import AssociativeOp

from ..errors import UnsupportedTermError
from ..lowering import Lowered, build, lowering_rule
from .elementwise import require_no_batch


@lowering_rule(Contraction, AssociativeOp, AssociativeOp, frozenset, tuple)
def lower_contraction(term, red_op, bin_op, reduced_vars, terms):
    """A Contraction without reduced variables is a chain of ``Binary(bin_op)``."""
    if reduced_vars:
        raise UnsupportedTermError(
            term,
            f"Contraction reducing {tuple(v.name for v in reduced_vars)} "
            f"(reductions are not lowered yet)",
        )
    require_no_batch(term, *terms)
    if len(terms) == 1:
        return terms[0]
    from funsor.terms import Binary

    exprs = [t.expr for t in terms]
    return Lowered(functools.reduce(lambda a, b: build(Binary, bin_op, a, b), exprs))
