"""``Delta`` over ``Bint`` names: a sample's point mass, made dense. Each
term ``(name, (point, log_density))`` is ``log(name == point) +
log_density`` over the name's values (funsor's own substitution of a Delta
at a value computes the same). A Delta over a real variable has no dense
form: substitute its point first (``Integrate`` does)."""

from funsor import ops
from funsor.delta import Delta
from funsor.interpretations import reflect
from funsor.terms import Binary, Number, Unary, Variable

from ...errors import UnsupportedTermError
from ..driver import lowering_rule


@lowering_rule(Delta, tuple, raw=True)
def lower_delta(term, lowerer):
    with reflect:
        total = Number(0.0)
        for name, (point, log_density) in term.terms:
            domain = term.inputs[name]
            if domain.dtype == "real" or domain.shape:
                raise UnsupportedTermError(
                    term,
                    "Deltas over real variables or Bint arrays (substitute "
                    "their points, as Integrate does)",
                )
            is_point = Binary(ops.eq, Variable(name, domain), point)
            indicator = Binary(ops.add, is_point, Number(0.0))  # as reals
            total = total + Unary(ops.log, indicator) + log_density
    return lowerer.lower(total)
