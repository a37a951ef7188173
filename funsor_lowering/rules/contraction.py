"""``Contraction``: sums of products of terms over named ``Bint`` inputs.

- no reduced variables: a chain of ``bin_op`` broadcasting by name;
- ``(add, mul)`` over terms without event shape: one einsum, split into
  pairwise einsums along a contraction path planned once, here, by opt_einsum;
- ``(logaddexp, add)`` likewise in log space, with the max-shift trick: each
  term is shifted by its max over the reduced axes, exponentiated,
  contracted, and the log of the result shifted back;
- any other semiring pair (``(max, add)``, ``(min, add)``, ``(max, mul)``
  ...): broadcast ``bin_op`` over the union of batch inputs, then an axis
  reduction with ``red_op``.
"""

import functools
import string

import opt_einsum
from funsor import ops
from funsor.cnf import Contraction
from funsor.ops import AssociativeOp
from funsor.terms import Funsor

from ..layout import align, apply, apply_finitary, union_batch
from ..lowering import Lowered, lowering_rule
from .elementwise import require_values
from .reductions import reduce_batch, unsupported_reduction

# The most negative float32; clamping a shift to it keeps exp(x - shift) from
# being nan where x is -inf everywhere (-inf - -inf), in float32 and float64.
_FLOAT32_MIN = -3.4028234663852886e38
_LETTERS = string.ascii_letters


def combine(op, lhs, rhs):
    """``op(lhs, rhs)`` for lowered values, broadcasting by name."""
    batch = union_batch(lhs, rhs)
    rank = max(len(lhs.event_shape), len(rhs.event_shape))
    return Lowered(apply(op, align(lhs, batch, rank), align(rhs, batch, rank)), batch)


def einsum_path(inputs, output, shapes):
    """The pairwise einsum equations opt_einsum plans for the contraction
    ``inputs -> output``: a list of ``(operand positions, equation)``; after
    each step the positions are popped and the result appended."""
    equation = ",".join(inputs) + "->" + output
    _, info = opt_einsum.contract_path(equation, *shapes, shapes=True)
    return [(step[0], step[2]) for step in info.contraction_list]


def contract_einsum(terms, names, output_names):
    """Sum over ``names`` of the product of ``terms`` (lowered values without
    event shape) as planned pairwise einsums; batch order ``output_names``."""
    letters = {}
    for term in terms:
        for name in term.batch:
            letters.setdefault(name, _LETTERS[len(letters)])
    inputs = ["".join(letters[n] for n in t.batch) for t in terms]
    output = "".join(letters[n] for n in output_names)
    operands = [t.expr for t in terms]
    for positions, equation in einsum_path(
        inputs, output, [t.batch_shape for t in terms]
    ):
        args = [operands.pop(i) for i in positions]
        operands.append(apply_finitary(ops.EinsumOp(equation=equation), args))
    (result,) = operands
    batch = union_batch(*terms)
    return Lowered(result, {n: batch[n] for n in output_names})


def contract_logspace(terms, names, output_names):
    """logsumexp over ``names`` of the sum of ``terms``, via einsum."""
    outside = [t for t in terms if not names.intersection(t.batch)]
    inside = [t for t in terms if names.intersection(t.batch)]
    shifted, shifts = [], []
    for term in inside:
        axes = tuple(i for i, n in enumerate(term.batch) if n in names)
        shift = apply(ops.AmaxOp(axis=axes, keepdims=True), term.expr)
        shift = apply(ops.ClampOp(min=_FLOAT32_MIN, max=None), shift)
        shifted.append(
            Lowered(apply(ops.exp, apply(ops.sub, term.expr, shift)), term.batch)
        )
        kept = {n: d for n, d in term.batch.items() if n not in names}
        shape = tuple(d.size for d in kept.values())
        shifts.append(Lowered(apply(ops.ReshapeOp(shape=shape), shift), kept))
    einsum_names = [n for n in output_names if any(n in t.batch for t in inside)]
    result = contract_einsum(shifted, names, einsum_names)
    result = Lowered(apply(ops.log, result.expr), result.batch)
    return functools.reduce(
        lambda a, b: combine(ops.add, a, b), outside + shifts, result
    )


def _is_einsum_pair(red_op, bin_op):
    return (type(red_op), type(bin_op)) in {
        (ops.AddOp, ops.MulOp),
        (ops.LogaddexpOp, ops.AddOp),
    }


@lowering_rule(Contraction, AssociativeOp, AssociativeOp, frozenset, tuple)
def lower_contraction(term, red_op, bin_op, reduced_vars, terms):
    require_values(term, *terms)
    if len(terms) == 1:
        product = terms[0]
    elif not reduced_vars or not (
        _is_einsum_pair(red_op, bin_op) and not any(t.event_shape for t in terms)
    ):
        product = functools.reduce(lambda a, b: combine(bin_op, a, b), terms)
    else:
        names = frozenset(v.name for v in reduced_vars)
        domains = {v.name: v.output for v in reduced_vars}
        batch = union_batch(*terms)
        output_names = [n for n in batch if n not in names]
        if type(red_op) is ops.AddOp:
            result = contract_einsum(terms, names, output_names)
        else:
            result = contract_logspace(terms, names, output_names)
        absent = [n for n in names if n not in batch]
        return reduce_batch(red_op, result, absent, domains) if absent else result
    if not reduced_vars:
        return product
    names = [v.name for v in reduced_vars]
    return reduce_batch(
        red_op, product, names, {v.name: v.output for v in reduced_vars}
    )


@lowering_rule(Contraction, AssociativeOp, AssociativeOp, frozenset, Funsor)
def lower_contraction_of_one(term, red_op, bin_op, reduced_vars, arg):
    """funsor stores a single term without a tuple when built by reflect."""
    return lower_contraction(term, red_op, bin_op, reduced_vars, (arg,))


def _contraction_precondition(term):
    if term.reduced_vars:
        return unsupported_reduction(term.red_op, term.reduced_vars)
    return None


lower_contraction.precondition = _contraction_precondition
lower_contraction_of_one.precondition = _contraction_precondition
