"""``Approximate``: exact, as in funsor's default eager interpretation (its
``model``); other approximations are chosen by pushing their interpretation,
which rewrites the term before it reaches the compiler."""

from funsor.ops import AssociativeOp
from funsor.terms import Approximate, Funsor

from ..driver import lowering_rule


@lowering_rule(Approximate, AssociativeOp, Funsor, Funsor, frozenset, raw=True)
def lower_approximate(term, lowerer):
    return lowerer.lower(term.model)
