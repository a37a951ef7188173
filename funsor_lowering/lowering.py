"""The lowering driver: walks a funsor term and applies the lowering rule
registered for each subterm (rules live in :mod:`funsor_lowering.rules`).

A lowered value is a :class:`Lowered`: a *lowered funsor* (real-valued
``Variable`` s, constants without inputs, ``Unary`` / ``Binary`` /
``Finitary`` op applications) whose leading positional axes stand for the
named batch inputs listed in ``batch``; the remaining axes are the term's
event shape. Subterms with no free real-valued inputs are folded to
constants with funsor's eager interpretation first.

Rules are registered by term type and argument types, as funsor registers its
own patterns::

    @lowering_rule(Binary, BinaryOp, Funsor, Funsor)
    def lower_binary(term, op, lhs, rhs):  # lhs, rhs are Lowered
        ...

A rule receives the term and its ``_ast_values`` with every funsor child
replaced by its :class:`Lowered` value, and returns a :class:`Lowered`. A
rule may carry a ``precondition(term)`` attribute that returns a reason to
decline the term (checked before its children are lowered) or ``None``.
"""

from collections import OrderedDict

import funsor.interpreter
from funsor.interpretations import eager, reflect
from funsor.registry import KeyedRegistry
from funsor.tensor import Tensor
from funsor.terms import Funsor, Number

from .errors import UnsupportedTermError

LOWERING_RULES = KeyedRegistry(default=None)


def lowering_rule(term_type, *arg_types):
    """Decorator registering a lowering rule for ``term_type(*arg_types)``."""
    return LOWERING_RULES.register(term_type, *arg_types)


class Lowered:
    """A lowered funsor ``expr`` whose first ``len(batch)`` axes are the named
    batch inputs ``batch`` (an ``OrderedDict`` name -> ``Bint`` domain).

    Example::

        >>> from funsor.domains import Reals
        >>> from funsor.terms import Variable
        >>> Lowered(Variable("x", Reals[3])).event_shape
        (3,)
    """

    __slots__ = ("expr", "batch")

    def __init__(self, expr, batch=()):
        self.expr = expr
        self.batch = OrderedDict(batch)

    @property
    def batch_shape(self):
        return tuple(d.size for d in self.batch.values())

    @property
    def event_shape(self):
        return self.expr.output.shape[len(self.batch) :]

    def __repr__(self):
        return f"Lowered({self.expr!r}, batch={tuple(self.batch)})"


class LoweredTuple:
    """The lowered value of a funsor ``Tuple``: one lowered value per item."""

    __slots__ = ("items",)

    def __init__(self, items):
        self.items = tuple(items)

    def __repr__(self):
        return f"LoweredTuple({self.items!r})"


def has_real_inputs(term):
    return any(d.dtype == "real" for d in term.inputs.values())


def _funsor_children(value):
    if isinstance(value, Funsor):
        yield value
    elif isinstance(value, tuple):
        for item in value:
            yield from _funsor_children(item)


def _substitute_children(value, memo):
    if isinstance(value, Funsor):
        return memo[value]
    if isinstance(value, tuple):
        return tuple(_substitute_children(item, memo) for item in value)
    return value


def _fold(term):
    """Evaluate a term without free real inputs with funsor's eager
    interpretation (at compile time)."""
    with eager:
        return funsor.interpreter.reinterpret(term)


def lower_term(root, memo=None, *, fold=True):
    """Lower ``root`` to a :class:`Lowered` (or :class:`LoweredTuple`).

    :param dict memo: optional cache term -> lowered value, shared between
        calls (used by :class:`~funsor_lowering.CompilingInterpretation`).
    :param bool fold: evaluate subterms without free real inputs eagerly first.
    """
    if memo is None:
        memo = {}
    # Iterative post-order walk, so deep terms do not hit the recursion limit.
    stack = [(root, False)]
    while stack:
        term, children_done = stack.pop()
        if term in memo:
            continue
        if fold and not has_real_inputs(term) and not _is_constant(term):
            memo[term] = lower_term(_fold(term), memo, fold=False)
            continue
        if not children_done:
            check_rule(term)
        children = [c for c in _funsor_children(term._ast_values) if c not in memo]
        if children and not children_done:
            stack.append((term, True))
            stack.extend((c, False) for c in reversed(children))
            continue
        memo[term] = apply_rule(term, memo)
    return memo[root]


def _is_constant(term):
    return isinstance(term, (Tensor, Number))


def find_rule(term):
    """The lowering rule registered for ``term``, or ``None``."""
    try:
        return LOWERING_RULES.dispatch(type(term), *term._ast_values)
    except NotImplementedError:  # multipledispatch found no signature
        return None


def check_rule(term):
    """Reject a term before its children are lowered, so the error names the
    outermost unsupported term: no rule, or the rule's ``precondition``
    (a function returning a reason to decline, or ``None``) declines."""
    rule = find_rule(term)
    if rule is None:
        raise UnsupportedTermError(term)
    precondition = getattr(rule, "precondition", None)
    if precondition is not None:
        reason = precondition(term)
        if reason:
            raise UnsupportedTermError(term, reason)


def apply_rule(term, memo):
    """Dispatch the lowering rule for ``term``; its funsor children must be
    lowered already (in ``memo``)."""
    args = term._ast_values
    rule = find_rule(term)
    if rule is None:
        raise UnsupportedTermError(term)
    lowered_args = _substitute_children(args, memo)
    result = rule(term, *lowered_args)
    if result is None:
        raise UnsupportedTermError(term)
    return result


def build(cls, *args):
    """Construct a lowered funsor term as is (funsor's ``reflect``)."""
    with reflect:
        return cls(*args)
