"""``MarkovProduct``: funsor's lazy ``sequential_sum_product`` over a time
input, unrolled at compile time into its log-depth parallel scan (static
slices, contractions and a ``Cat`` per level)."""

from funsor.interpretations import reflect
from funsor.sum_product import MarkovProduct, sequential_sum_product
from funsor.terms import Funsor, Variable

from ..driver import lowering_rule


@lowering_rule(
    MarkovProduct, object, object, Funsor, Variable, frozenset, frozenset, raw=True
)
def lower_markov_product(term, lowerer):
    with reflect:
        scan = sequential_sum_product(
            term.sum_op, term.prod_op, term.trans, term.time, dict(term.step)
        )
        # step_names renames the result's inputs after alpha conversion.
        renames = {
            k: v for k, v in term.step_names.items() if k != v and k in scan.inputs
        }
        if renames:
            scan = scan(**{k: Variable(v, scan.inputs[k]) for k, v in renames.items()})
    return lowerer.lower(scan)
