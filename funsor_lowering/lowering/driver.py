"""The lowering driver: walks a funsor term and applies the lowering rule
registered for each subterm (rules live in :mod:`funsor_lowering.lowering.rules`).

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
decline the term (checked before its children are lowered) or ``None``. A
rule registered with ``raw=True`` (or ``raw=predicate`` true of the term)
instead receives ``(term, lowerer)`` and lowers what it needs itself (for
terms that bind or substitute variables, or whose subterms it restructures).
"""

from collections import OrderedDict

import funsor.interpreter
from funsor.interpretations import reflect
from funsor.registry import KeyedRegistry
from funsor.tensor import Tensor
from funsor.terms import Binary, Finitary, Funsor, Number, Unary
from funsor.typing import get_origin

from ..errors import IntermediateTooLargeError, UnsupportedTermError
from .sound_algebra import sound_eager

LOWERING_RULES = KeyedRegistry(default=None)


def lowering_rule(term_type, *arg_types, raw=False):
    """Decorator registering a lowering rule for ``term_type(*arg_types)``."""

    def decorator(fn):
        fn.raw = raw
        _RULE_CACHE.clear()
        return LOWERING_RULES.register(term_type, *arg_types)(fn)

    return decorator


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
        if len(expr.output.shape) < len(self.batch):
            raise ValueError(f"{expr.output} has fewer axes than batch {self.batch}")

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


def _is_constant(term):
    return isinstance(term, (Tensor, Number))


def _fold(term):
    """Evaluate a term without free real inputs with funsor's eager
    interpretation (at compile time), its algebra made sound for all values."""
    with sound_eager:
        return funsor.interpreter.reinterpret(term)


class Lowerer:
    """Lowers terms, caching results by term.

    :param dict memo: a cache term -> lowered value to use and fill.
    :param Lowerer parent: a lowerer whose cache serves terms that do not
        depend on this one's ``seeds``.
    :param dict seeds: ``Variable`` -> lowered value, for substitution.
    :param bool fold: evaluate subterms without free real inputs with
        funsor's eager interpretation first (off while tracing, where every
        array computation must go through ``funsor.ops``).
    """

    def __init__(self, memo=None, parent=None, seeds=None, fold=True):
        self.memo = {} if memo is None else memo
        self.parent = parent
        self.fold = fold  # evaluate subterms without real inputs with funsor
        self.seeded = frozenset()
        if seeds:
            self.memo.update(seeds)
            self.seeded = frozenset(v.name for v in seeds)

    def with_seeds(self, seeds):
        """A child lowerer that lowers ``Variable`` s in ``seeds`` to the
        given values (a substitution at the lowered level)."""
        return Lowerer(parent=self, seeds=seeds, fold=self.fold)

    def _lookup(self, term):
        lowered = self.memo.get(term)
        if lowered is None and self.parent is not None:
            if not self.seeded.intersection(term.inputs):
                lowered = self.parent._lookup(term)
        return lowered

    def lower(self, root, *, fold=None):
        """Lower ``root`` to a :class:`Lowered` (or :class:`LoweredTuple`)."""
        fold = self.fold if fold is None else fold
        # Iterative post-order walk, so deep terms do not hit the recursion limit.
        stack = [(root, False)]
        while stack:
            term, children_done = stack.pop()
            if self._lookup(term) is not None:
                continue
            if fold and not has_real_inputs(term) and not _is_constant(term):
                folded = _fold(term)
                if folded is not term:
                    self.memo[term] = self.lower(folded, fold=False)
                    continue
            rule = check_rule(term)
            if rule.raw is True or (callable(rule.raw) and rule.raw(term)):
                self.memo[term] = _checked(term, _run(rule, term, self))
                continue
            children = [
                c for c in _funsor_children(term._ast_values) if self._lookup(c) is None
            ]
            if children and not children_done:
                stack.append((term, True))
                stack.extend((c, False) for c in reversed(children))
                continue
            args = self._substitute_children(term._ast_values)
            self.memo[term] = _checked(term, _run(rule, term, *args))
        return self._lookup(root)

    def _substitute_children(self, value):
        if isinstance(value, Funsor):
            return self._lookup(value)
        if isinstance(value, tuple):
            return tuple(self._substitute_children(item) for item in value)
        return value


def _run(rule, term, *args):
    try:
        return rule(term, *args)
    except IntermediateTooLargeError as error:
        raise error.naming(term) from None


def _checked(term, result):
    if result is None:
        raise UnsupportedTermError(term)
    return result


def lower_term(root, memo=None):
    """Lower ``root`` to a :class:`Lowered` (or :class:`LoweredTuple`).

    :param dict memo: optional cache term -> lowered value, shared between
        calls (used by :class:`~funsor_lowering.CompilingInterpretation`).
    """
    return Lowerer(memo).lower(root)


def find_rule(term):
    """The lowering rule registered for ``term``'s type, or for the nearest
    base class with rules (``Distribution`` for ``Normal``), or ``None``.
    Rules are registered on plain types, so the types of the term and its
    arguments decide: cached by them (cleared when a rule registers)."""
    key = (type(term),) + tuple(map(type, term._ast_values))
    try:
        return _RULE_CACHE[key]
    except KeyError:
        rule = _RULE_CACHE[key] = _dispatch_rule(term)
        return rule


_RULE_CACHE = {}


def _dispatch_rule(term):
    for cls in get_origin(type(term)).__mro__:
        if cls in LOWERING_RULES:
            try:
                return LOWERING_RULES.dispatch(cls, *term._ast_values)
            except NotImplementedError:  # multipledispatch found no signature
                return None
    return None


def check_rule(term):
    """The rule for ``term``; raises if there is none or its
    ``precondition`` declines, so the error names the outermost unsupported
    term (before its children are lowered)."""
    rule = find_rule(term)
    if rule is None:
        raise UnsupportedTermError(term)
    precondition = getattr(rule, "precondition", None)
    if precondition is not None:
        reason = precondition(term)
        if reason:
            raise UnsupportedTermError(term, reason)
    return rule


def build(cls, *args):
    """Construct a lowered funsor term as is (funsor's ``reflect``)."""
    if cls in _PLAIN_TERMS:  # no argument conversions: skip the metaclass
        return reflect.interpret(cls, *args)
    with reflect:
        return cls(*args)


_PLAIN_TERMS = (Unary, Binary, Finitary)
