"""funsor's ``eager`` with the algebra right for all values.

Two of funsor 0.4.8's eager rewrites hold only for some values, and would
turn into wrong constants when a compiling block or the lowering folds
terms without symbolic inputs:

- a reduction over inputs a term lacks multiplies the term by the size
  through whichever pair of ``DISTRIBUTIVE_OPS`` comes first: ``logaddexp``
  adds the size (not its log), ``max`` / ``min`` multiply or add it, ``mul``
  raises; funsor's normal form creates such reductions when it splits
  ``(x ⊕ y).reduce(⊕)`` into ``x.reduce(⊕) ⊕ y.reduce(⊕)``;
- a ``Contraction`` pushes each reduction into the one term that has the
  input, pulling the other terms out, for every pair of ops: right for
  sums of products, ``logaddexp`` of sums, ``max`` / ``min`` of sums, but
  not for ``max`` / ``min`` of products with negative factors, nor for a
  product-reduction (a factor pulled out must be raised to the size).

:data:`sound_eager` computes such terms directly: ``n`` equal copies
reduce to ``x * n`` (add), ``x + log n`` (logaddexp), ``x ** n`` (mul) and
``x`` (max, min, and, or); other contractions take the product first, then
reduce. Everything else is funsor's ``eager``.

Example::

    >>> from collections import OrderedDict
    >>> import numpy as np
    >>> from funsor import ops
    >>> from funsor.domains import Bint
    >>> from funsor.tensor import Tensor
    >>> from funsor.terms import Number
    >>> from funsor.interpreter import reinterpret
    >>> from funsor.interpretations import reflect
    >>> c = Tensor(np.array([1.0, 2.0]), OrderedDict(c=Bint[2]))
    >>> with reflect:  # min over c of (-1 * c): -2, not -1 * min(c) = -1
    ...     term = (Number(-1.0) * c).reduce(ops.min, "c")
    >>> with sound_eager:
    ...     print(reinterpret(term).data)
    -2.0
"""

import functools
import math

from funsor import ops
from funsor.cnf import Contraction
from funsor.interpretations import Interpretation, eager
from funsor.ops import DISTRIBUTIVE_OPS
from funsor.terms import Number, Reduce

# (reduction, product) pairs over which funsor's eager may push reductions
# into terms: the reduction distributes over the product for all values.
DISTRIBUTIVE = frozenset(
    {
        (ops.add, ops.mul),
        (ops.logaddexp, ops.add),
        (ops.max, ops.add),
        (ops.min, ops.add),
        (ops.or_, ops.and_),
    }
)


# A reduction over ``n`` equal copies of ``x``: ``bin_op(x, f(n))``, or
# ``x`` itself for the idempotent reductions (the lowering's axis reductions
# over absent inputs follow the same table).
REPEATED = {
    ops.AddOp: (ops.mul, float),
    ops.LogaddexpOp: (ops.add, math.log),
    ops.MulOp: (ops.pow, float),
}
IDEMPOTENT = (ops.MaxOp, ops.MinOp, ops.AndOp, ops.OrOp)


def repeated(op, value, size):
    """``value`` reduced with ``op`` over ``size`` equal copies, or ``None``
    for an op without a known rule."""
    if size == 1 or isinstance(op, IDEMPOTENT):
        return value
    if type(op) not in REPEATED:
        return None
    bin_op, of_size = REPEATED[type(op)]
    return bin_op(value, Number(of_size(size)))


def sound_pattern(cls, args):
    """``Reduce`` / ``Contraction`` ``args`` that funsor's eager would get
    wrong, computed right; ``None`` for every other term."""
    if cls is Reduce:
        op, arg, reduced_vars = args
        bin_op, terms = ops.null, (arg,)
    elif cls is Contraction and args[0] is not ops.null and args[2]:
        op, bin_op, reduced_vars, terms = contraction_parts(args)
    else:
        return None
    present = frozenset().union(*(t.input_vars for t in terms))
    absent = reduced_vars - present
    if absent:
        inner = _contract(op, bin_op, reduced_vars & present, terms)
        return repeated(op, inner, math.prod(v.output.size for v in absent))
    if len(terms) > 1 and (op, bin_op) not in DISTRIBUTIVE:
        return _contract(op, bin_op, reduced_vars, terms)
    return None


def _contract(op, bin_op, reduced_vars, terms):
    """The product of ``terms``, then its reduction: no rewriting."""
    product = functools.reduce(bin_op, terms) if len(terms) > 1 else terms[0]
    return product.reduce(op, reduced_vars) if reduced_vars else product


def contraction_parts(args):
    """``(red_op, bin_op, reduced_vars, terms)`` of ``Contraction`` arguments
    as funsor passes them (terms as one tuple, one funsor, or variadic)."""
    red_op, bin_op, reduced_vars, *terms = args
    if len(terms) == 1 and isinstance(terms[0], tuple):
        terms = terms[0]
    return red_op, bin_op, reduced_vars, tuple(terms)


def is_normal_contraction(args):
    """Whether funsor's ``Contraction`` accepts these arguments (its
    constructor asserts them; checked here so that nothing relies on
    assertions, which ``python -O`` removes)."""
    red_op, bin_op, reduced_vars, terms = contraction_parts(args)
    if red_op is ops.null and bin_op is ops.null:
        return False
    if red_op is ops.null:
        return not reduced_vars
    if bin_op is ops.null:
        return len(terms) == 1
    distributive = (red_op, bin_op) in DISTRIBUTIVE_OPS
    return bool(reduced_vars) and len(terms) > 1 and distributive


def fuses_non_distributive(cls, args):
    """Whether funsor's ``normalize`` would fuse ``cls(*args)`` into a
    ``Contraction`` of a reduction over a product it does not distribute
    over (funsor's constructor then asserts), e.g.
    ``(x * 2).reduce(ops.logaddexp)``."""
    if cls is Reduce:
        op, arg = args[0], args[1]
    elif cls is Contraction:
        op, bin_op, _, terms = contraction_parts(args)
        if bin_op is not ops.null or len(terms) != 1:
            return False
        arg = terms[0]
    else:
        return False
    return (
        op is not ops.null
        and isinstance(arg, Contraction)
        and arg.red_op is ops.null
        and arg.bin_op is not ops.null
        and (op, arg.bin_op) not in DISTRIBUTIVE_OPS
    )


class SoundEager(Interpretation):
    """funsor's ``eager``, with :func:`sound_pattern` tried first."""

    is_total = True

    def interpret(self, cls, *args):
        result = sound_pattern(cls, args)
        return eager.interpret(cls, *args) if result is None else result


sound_eager = SoundEager("sound_eager")
"""A ready :class:`SoundEager`."""
