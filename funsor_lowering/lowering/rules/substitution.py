"""``Subs``: substituting values for free variables.

- a ``Bint`` variable by a ``Variable`` (renaming), a ``Slice`` (static
  slicing), a constant or any Bint-valued term (indexing / gather);
- a real variable by any expression: the argument is lowered again with the
  variable bound to the lowered value (its batch inputs broadcast by name).
"""

from funsor.terms import Funsor, Subs, Variable

from ...errors import UnsupportedTermError
from ..driver import lowering_rule
from .indexing import batch_axis_to_event, getitem


def substitute_batch(lowered, name, value, value_term):
    """Substitute Bint batch input ``name`` of ``lowered`` by ``value``."""
    if name not in lowered.batch:
        return lowered
    return getitem(batch_axis_to_event(lowered, name), 0, value, value_term)


@lowering_rule(Subs, Funsor, tuple, raw=True)
def lower_subs(term, lowerer):
    arg = term.arg
    subs = tuple(term.subs.items())
    names = {name for name, _ in subs}
    for name, value in subs:
        # Substitution is simultaneous; values are applied one at a time, so
        # a value may mention only its own name (as in x(t=Slice("t", ...))).
        clash = names.intersection(value.inputs) - {name}
        if clash:
            raise UnsupportedTermError(
                term, f"the value for {name!r} depends on substituted {sorted(clash)}"
            )
    seeds = {
        Variable(name, arg.inputs[name]): lowerer.lower(value)
        for name, value in subs
        if arg.inputs[name].dtype == "real"
    }
    result = (lowerer.with_seeds(seeds) if seeds else lowerer).lower(arg)
    for name, value in subs:
        if arg.inputs[name].dtype != "real":
            result = substitute_batch(result, name, lowerer.lower(value), value)
    return result
