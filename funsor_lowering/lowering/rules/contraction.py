"""``Contraction``: sums of products of terms over named ``Bint`` inputs.

- no reduced variables: a chain of ``bin_op`` broadcasting by name;
- ``(add, mul)`` and ``(logaddexp, add)`` over terms without event shape:
  a contraction path planned once, here, by opt_einsum, then one step per
  pair of operands: an einsum for ``(add, mul)``; for ``(logaddexp, add)``
  either broadcast ``add`` + ``logsumexp`` (small steps: fewest ops) or one
  ``logspace_einsum`` (large steps: each operand shifted by its max over the
  summed axes, exponentiated, contracted, and the log of the result shifted
  back; entries that underflow recomputed in log space);
- any other semiring pair (``(max, add)``, ``(min, add)``, ``(max, mul)``
  ...), or terms with event shapes: broadcast ``bin_op`` over the union of
  batch inputs, then an axis reduction with ``red_op``;
- on backends that run loops fast (jax), a chain in log space (an HMM's
  factors) is one forward-pass op (``rules/chains.py``).
"""

import functools
import math
import string

import funsor
import opt_einsum
from funsor import ops
from funsor.cnf import Contraction
from funsor.ops import AssociativeOp
from funsor.terms import Binary, Funsor, Reduce, Unary

from ...backends import array_backend
from ...ops.logspace_einsum import LogspaceEinsumOp
from ...passes.vectorize import MIN_GROUP
from ..driver import Lowered, build, lowering_rule
from ..layout import (
    align,
    apply_finitary,
    combine,
    parametrized,
    union_batch,
)
from .chains import (
    find_chain,
    lower_chain,
    lower_chain_in_rounds,
    rounds_cost_less,
)
from .elementwise import require_values
from .reductions import lower_reduce, reduce_batch, unsupported_reduction
from .trees import find_tree, levels_pay_off, lower_tree

_LETTERS = string.ascii_letters
# A log-space step whose broadcast product has at most this many elements is
# lowered as add + logsumexp rather than one logspace_einsum, whose dozen
# backend calls cost more on small arrays (crossover, measured in one thread:
# numpy 4k to 32k elements, torch about 32k).
BROADCAST_LIMIT = 1 << 14
# Contractions of at most this many operands get opt_einsum's optimal path
# (under 1 ms to plan, once per shapes); larger ones its greedy search, which
# may take a pure broadcast step first (a tree's root factor joined to an
# edge before the edge's child is summed out: one more op, on the product).
OPTIMAL_MAX_OPERANDS = 5
# Contractions of this many operands or more may be planned in rounds of
# independent steps (``plan_in_rounds``) where that costs less than the
# sequential plan, counting a dependent step as STEP_COST element operations.
ROUNDS_MIN_OPERANDS = 16
STEP_COST = 2000


def _least_flops_greedy(inputs, output, size_dict, memory_limit=None):
    """opt_einsum's greedy search, scoring a pairwise step by the size of its
    whole index space (its flops), so a chain is contracted vector-first
    (S^2 per step) rather than matrix-matrix (S^3 per step)."""

    def flops(size12, size1, size2, k12, k1, k2):
        return math.prod(size_dict[c] for c in k1 | k2)

    return opt_einsum.paths.greedy(
        inputs, output, size_dict, memory_limit, cost_fn=flops
    )


def einsum_path(inputs, output, shapes, batchable=False):
    """The pairwise steps planned for the contraction ``inputs -> output``: a
    tuple of ``(operand positions, equation)``; after each step the operands
    at those positions are popped and the result appended. Few operands
    (``OPTIMAL_MAX_OPERANDS``) get opt_einsum's optimal search, many its
    greedy one (least flops first).
    Where the operands are ``batchable`` (slices of one array), a plan in
    rounds (:func:`plan_in_rounds`) is taken if it costs less. Plans are
    cached: unrolled chains repeat one contraction many times."""
    return _planned(tuple(inputs), output, tuple(map(tuple, shapes)), batchable)


@functools.lru_cache(maxsize=4096)
def _planned(inputs, output, shapes, batchable):
    equation = ",".join(inputs) + "->" + output
    sizes = {c: n for cs, shape in zip(inputs, shapes) for c, n in zip(cs, shape)}
    if len(inputs) <= OPTIMAL_MAX_OPERANDS:
        optimize = "optimal"
    else:
        sets = [frozenset(cs) for cs in inputs]
        optimize = _least_flops_greedy(sets, frozenset(output), sizes)
    _, info = opt_einsum.contract_path(
        equation, *shapes, shapes=True, optimize=optimize
    )
    plan = tuple((step[0], step[2]) for step in info.contraction_list)
    if batchable and len(inputs) >= ROUNDS_MIN_OPERANDS:
        rounds = plan_in_rounds(inputs, output)
        if rounds is not None and plan_cost(rounds, inputs, sizes) < plan_cost(
            plan, inputs, sizes
        ):
            return rounds
    return plan


def plan_in_rounds(inputs, output):
    """A contraction plan in rounds of independent pairwise steps, or
    ``None`` where some round finds no pair.

    Each round pairs operands whose inputs one contains (an emission with
    its transition), then operands that alone share an input to eliminate
    (neighbours of a chain). Steps of one round do not depend on each other
    and, on a chain, have the same shapes, so the ``vectorize`` pass batches
    them: a chain of ``T`` factors takes ``log2(T)`` rounds where a
    sequential plan takes ``T`` dependent steps.

    >>> plan_in_rounds(("a", "ab", "bc", "cd"), "")
    (((1, 0), 'ab,a->b'), ((1, 0), 'cd,bc->b'), ((1, 0), 'b,b->'))
    """
    order = {c: i for i, c in enumerate(dict.fromkeys("".join(inputs) + output))}

    def spelled(letters):
        return "".join(sorted(set(letters), key=order.__getitem__))

    operands = list(inputs)
    plan = []
    while len(operands) > 1:
        pairs = _round_pairs(operands, output, order)
        if not pairs:
            return None
        slots = list(range(len(operands)))  # slot of each current position
        for i, j in pairs:
            a, b = operands[slots.index(i)], operands[slots.index(j)]
            rest = [o for k, o in zip(slots, operands) if k not in (i, j)]
            needed = set(output).union(*rest)
            kept = spelled(c for c in a + b if c in needed)
            positions = tuple(sorted((slots.index(i), slots.index(j)), reverse=True))
            popped = [operands.pop(p) for p in positions]
            for p in positions:
                slots.pop(p)
            plan.append((positions, f"{popped[0]},{popped[1]}->{kept}"))
            operands.append(kept)
            slots.append(None)
    if operands[0] != spelled(output):
        plan.append(((0,), f"{operands[0]}->{spelled(output)}"))
    return tuple(plan)


def _round_pairs(operands, output, order):
    """Disjoint pairs of operand positions contracted in one round, in the
    order of their inputs' first appearance (so that on a chain, one round's
    results are read by the next round in order: strided slices).

    First, an operand whose inputs another contains and others share too
    (an emission) joins it. Then operands that alone share an input are
    paired (neighbours of a chain)."""
    claimed, pairs = set(), []

    def claim(i, j):
        claimed.update((i, j))
        pairs.append((i, j))

    sets = [set(o) for o in operands]
    holders = {}
    for i, s in enumerate(sets):
        for c in s:
            holders.setdefault(c, []).append(i)
    for i, s in enumerate(sets):  # absorb an emission into its transition
        if i in claimed or not s or any(len(holders[c]) < 3 for c in s):
            continue
        for j, t in enumerate(sets):
            if j != i and j not in claimed and s <= t:
                claim(i, j)
                break
    for c in sorted(holders, key=order.__getitem__):  # eliminate a shared input
        where = holders[c]
        if c in output or len(where) != 2 or claimed.intersection(where):
            continue
        claim(*where)

    def first_input(pair):
        return min(order[c] for c in operands[pair[0]] + operands[pair[1]])

    return sorted(pairs, key=first_input)


def plan_cost(plan, inputs, sizes):
    """A plan's cost in element operations: its flops plus, per step on its
    longest chain of dependent steps, ``STEP_COST`` (a backend call's
    overhead; steps of one round are batched into one call)."""
    depth = [0] * len(inputs)
    flops = 0
    for positions, equation in plan:
        depths = [depth.pop(p) for p in positions]
        depth.append(max(depths) + 1)
        flops += math.prod(sizes[c] for c in set(equation.split("->")[0]) - {","})
    return flops + STEP_COST * max(depth)


def relabel(equation):
    """The equation with its symbols renamed to ``a-zA-Z`` (planning may use
    any unicode symbol; backends' einsum accept letters only)."""
    symbols = sorted(set(equation) - set(",->"), key=equation.index)
    if len(symbols) > len(_LETTERS):
        raise NotImplementedError(f"an einsum step with {len(symbols)} indices")
    rename = dict(zip(symbols, _LETTERS))
    return "".join(rename.get(c, c) for c in equation)


def einsum_step(operands, equation, names, op_type=ops.EinsumOp):
    """One einsum step over lowered operands, whose batch order matches the
    equation's input letters: ``op_type`` (``ops.EinsumOp``, or
    ``LogspaceEinsumOp`` for a step in log space: max-shifted matrix
    products, entries that underflow recomputed in log space)."""
    exprs = [o.expr for o in operands]
    batch = union_batch(*operands)
    output = equation.split("->")[1]
    result = apply_finitary(parametrized(op_type, equation=relabel(equation)), exprs)
    return Lowered(result, {names[c]: batch[names[c]] for c in output})


def broadcast_step(red_op, bin_op, operands, removed):
    """``bin_op`` over operands broadcast by name, then reduce ``removed``.
    By distributivity, an input removed here that only one operand has is
    reduced in that operand first, and operands without removed inputs are
    combined after the reduction, so the broadcast product is smaller."""
    operands = list(operands)
    for k, operand in enumerate(operands):
        others = {n for j, o in enumerate(operands) if j != k for n in o.batch}
        own = [n for n in removed if n in operand.batch and n not in others]
        if own and len(operands) > 1:
            domains = {n: operand.batch[n] for n in own}
            operands[k] = reduce_batch(red_op, operand, own, domains)
            removed = [n for n in removed if n not in own]
    if not removed:
        return functools.reduce(functools.partial(combine, bin_op), operands)
    # Operands without a removed input factor out of the reduction
    # (distributivity): they join the smaller, reduced result.
    inner = [o for o in operands if any(n in o.batch for n in removed)]
    outer = [o for o in operands if not any(n in o.batch for n in removed)]
    product = functools.reduce(functools.partial(combine, bin_op), inner)
    domains = {n: product.batch[n] for n in removed}
    result = reduce_batch(red_op, product, list(removed), domains)
    return functools.reduce(functools.partial(combine, bin_op), outer, result)


# Pairs that distribute for all values: reductions move into the terms.
_DISTRIBUTIVE = {
    (ops.LogaddexpOp, ops.AddOp),
    (ops.AddOp, ops.MulOp),
    (ops.MaxOp, ops.AddOp),
    (ops.MinOp, ops.AddOp),
    (ops.OrOp, ops.AndOp),
}
# (max, mul) and (min, mul) distribute over nonnegative factors only.
_SIGNED_EXTREMA = {(ops.MaxOp, ops.MulOp), (ops.MinOp, ops.MulOp)}


def signed_extremum(red_op, terms, removed):
    """``red_op`` (max or min) over ``removed`` of the product of ``terms``,
    for factors of any sign: a factor ``a`` without the removed inputs is
    monotone, so ``max_i(a * b_i) = max(a * max_i b_i, a * min_i b_i)``
    (and the same for min). Where ``a >= 0`` it is funsor's ``a * max_i b_i``.
    """
    inner = [t for t in terms if any(n in t.batch for n in removed)]
    outer = [t for t in terms if not any(n in t.batch for n in removed)]
    product = functools.reduce(functools.partial(combine, ops.mul), inner)
    domains = {n: product.batch[n] for n in removed}
    if not outer:
        return reduce_batch(red_op, product, removed, domains)
    flipped_op = ops.min if type(red_op) is ops.MaxOp else ops.max
    scale = functools.reduce(functools.partial(combine, ops.mul), outer)
    high = combine(ops.mul, scale, reduce_batch(red_op, product, removed, domains))
    low = combine(ops.mul, scale, reduce_batch(flipped_op, product, removed, domains))
    return combine(red_op, high, low)


def contract_planned(red_op, bin_op, terms, names_reduced):
    """Contract ``terms`` (no event shapes) along an opt_einsum path."""
    letters = {}
    for term in terms:
        for name in term.batch:
            letters.setdefault(name, opt_einsum.get_symbol(len(letters)))
    names = {c: n for n, c in letters.items()}
    inputs = ["".join(letters[n] for n in t.batch) for t in terms]
    output = "".join(c for n, c in letters.items() if n not in names_reduced)
    operands = list(terms)
    logspace = type(red_op) is ops.LogaddexpOp
    batchable = _slices_of_one_array(terms)
    chain = find_chain(terms, names_reduced) if logspace else None
    backend = array_backend(funsor.get_backend())
    if chain is not None and backend.scans_chains:
        return lower_chain(chain, terms, names_reduced, separate=not batchable)
    if (
        chain is not None
        and not batchable
        and rounds_cost_less(chain, terms, backend.call_cost)
    ):
        # separate factors: stacked once, then log-depth rounds
        return lower_chain_in_rounds(chain, terms, names_reduced, BROADCAST_LIMIT)
    tree = find_tree(terms, names_reduced) if logspace and chain is None else None
    if tree is not None and not batchable and levels_pay_off(tree):
        # separate factors on a tree: stacked once, then level by level
        return lower_tree(tree, terms, names_reduced)
    shapes = [t.batch_shape for t in terms]
    for positions, equation in einsum_path(inputs, output, shapes, batchable=batchable):
        args = [operands.pop(i) for i in positions]
        kept = set(equation.split("->")[1])
        union = union_batch(*args)
        removed = [n for n in union if letters[n] not in kept]
        if not logspace:
            result = einsum_step(args, equation, names)
        elif (
            not removed or math.prod(d.size for d in union.values()) <= BROADCAST_LIMIT
        ):
            result = broadcast_step(red_op, bin_op, args, removed)
        else:
            result = einsum_step(args, equation, names, LogspaceEinsumOp)
        # Later steps' equations assume this step's output letter order.
        order = [names[c] for c in equation.split("->")[1]]
        operands.append(Lowered(align(result, order), {n: union[n] for n in order}))
    (result,) = operands
    return result


_LAYOUT_OPS = (ops.GetsliceOp, ops.ReshapeOp, ops.PermuteOp, ops.ExpandOp)


def _slices_of_one_array(terms):
    """Whether most ``terms`` are layout views (slices, reshapes ...) of
    arrays shared with several other terms, so that independent steps over
    them batch into one operation (the ``vectorize`` pass)."""
    roots = {}
    for term in terms:
        expr = term.expr
        while isinstance(expr, Unary) and isinstance(expr.op, _LAYOUT_OPS):
            expr = expr.arg
        roots[expr] = roots.get(expr, 0) + 1
    shared = sum(n for n in roots.values() if n >= MIN_GROUP)
    return 2 * shared >= len(terms)


def _is_einsum_pair(red_op, bin_op):
    return (type(red_op), type(bin_op)) in {
        (ops.AddOp, ops.MulOp),
        (ops.LogaddexpOp, ops.AddOp),
    }


def flatten(term):
    """Nested Contractions of ``term``'s semiring, merged into one: the leaf
    terms and all reduced variables, so opt_einsum plans the whole
    sum-product at once rather than following the nesting funsor's optimizer
    chose. Returns ``None`` where merging would change the meaning: a name
    reduced twice (a cons-hashed subterm used twice), or a reduced name that
    occurs outside the contraction that reduces it."""
    red_op, bin_op = term.red_op, term.bin_op
    leaves, reduced, scopes = [], {}, []
    stack = [("enter", term, True)]
    while stack:
        action, t, top = stack.pop()
        if action == "exit":
            scopes.append((t.reduced_vars, top, len(leaves)))
            continue
        mergeable = top or (
            isinstance(t, Contraction)
            and t.bin_op is bin_op
            and (t.red_op is red_op or not t.reduced_vars)
        )
        if not mergeable:
            leaves.append(t)
            continue
        for v in t.reduced_vars:
            if v.name in reduced:
                return None
            reduced[v.name] = v
        stack.append(("exit", t, len(leaves)))
        stack.extend(("enter", c, False) for c in reversed(t.terms))
    # Each reduced name may occur only in leaves of its own contraction.
    where = {}
    for i, leaf in enumerate(leaves):
        for name in leaf.inputs:
            first, last = where.get(name, (i, i))
            where[name] = (min(first, i), max(last, i))
    for reduced_vars, start, end in scopes:
        for v in reduced_vars:
            first, last = where.get(v.name, (start, start))
            if first < start or last >= end:
                return None
    return leaves, frozenset(reduced.values())


def _plans_einsum(term):
    return bool(term.reduced_vars) and _is_einsum_pair(term.red_op, term.bin_op)


@lowering_rule(Contraction, AssociativeOp, AssociativeOp, frozenset, tuple)
def lower_contraction(term, red_op, bin_op, reduced_vars, terms):
    return contract(term, red_op, bin_op, reduced_vars, terms)


@lowering_rule(
    Contraction, ops.LogaddexpOp, ops.AddOp, frozenset, tuple, raw=_plans_einsum
)
@lowering_rule(Contraction, ops.AddOp, ops.MulOp, frozenset, tuple, raw=_plans_einsum)
def lower_sum_product(term, *args):
    """A sum of products: nested Contractions of the same semiring are
    flattened and planned as one (raw: it lowers the leaves itself)."""
    if len(args) == 1:  # raw call: (term, lowerer)
        (lowerer,) = args
        flat = flatten(term)
        leaves, reduced_vars = flat if flat else (term.terms, term.reduced_vars)
        terms = [lowerer.lower(t) for t in leaves]
        return contract(term, term.red_op, term.bin_op, reduced_vars, terms)
    return contract(term, *args)


def contract(term, red_op, bin_op, reduced_vars, terms):
    """Lower ``Contraction(red_op, bin_op, reduced_vars, terms)``, its
    ``terms`` lowered already."""
    require_values(term, *terms)
    domains = {v.name: v.output for v in reduced_vars}
    pair = (type(red_op), type(bin_op))
    if len(terms) > 1 and reduced_vars and pair in _DISTRIBUTIVE | _SIGNED_EXTREMA:
        # As funsor's eager evaluation, reduce each variable in the terms
        # that have it, not in their whole broadcast product: smaller, and
        # min_i(exp(a) * exp(b_i)) has a finite gradient by a only so.
        present = frozenset(n for t in terms for n in t.batch)
        removed = [n for n in domains if n in present]
        if _is_einsum_pair(red_op, bin_op) and not any(t.event_shape for t in terms):
            result = contract_planned(red_op, bin_op, terms, frozenset(domains))
        elif pair in _SIGNED_EXTREMA:
            result = signed_extremum(red_op, terms, removed)
        else:
            result = broadcast_step(red_op, bin_op, terms, removed)
        absent = [n for n in domains if n not in present]
        return reduce_batch(red_op, result, absent, domains) if absent else result
    product = functools.reduce(functools.partial(combine, bin_op), terms)
    if not reduced_vars:
        return product
    return reduce_batch(red_op, product, list(domains), domains)


@lowering_rule(Contraction, AssociativeOp, AssociativeOp, frozenset, Funsor)
def lower_contraction_of_one(term, red_op, bin_op, reduced_vars, arg):
    """funsor stores a single term without a tuple when built by reflect."""
    return contract(term, red_op, bin_op, reduced_vars, (arg,))


def _product_factors(term, bin_op):
    """The factors of a tree of ``Binary(bin_op, ...)`` applications."""
    factors, stack = [], [term]
    while stack:
        t = stack.pop()
        if isinstance(t, Binary) and type(t.op) is type(bin_op):
            stack.extend((t.rhs, t.lhs))
        else:
            factors.append(t)
    return factors


def _reduces_a_product(term):
    """``Reduce(red_op, a * b * ...)`` of scalar factors, for a semiring the
    planner contracts (what funsor's reflect-built ``sum_product`` is before
    ``apply_optimizer``)."""
    arg = term.arg
    if not (isinstance(arg, Binary) and _is_einsum_pair(term.op, arg.op)):
        return False
    if not term.reduced_vars:
        return False
    return all(f.output.shape == () for f in _product_factors(arg, arg.op))


@lowering_rule(Reduce, AssociativeOp, Binary, frozenset, raw=_reduces_a_product)
def lower_reduced_product(term, *args):
    """A reduced product is the Contraction of its factors: planned, never
    the broadcast joint of every factor (which eager funsor computes)."""
    if len(args) > 1:  # not a planned semiring: an axis reduction
        return lower_reduce(term, *args)
    (lowerer,) = args
    bin_op = term.arg.op
    factors = tuple(_product_factors(term.arg, bin_op))
    contraction = build(Contraction, term.op, bin_op, term.reduced_vars, factors)
    return lowerer.lower(contraction)


lower_reduced_product.precondition = lower_reduce.precondition


def _contraction_precondition(term):
    if term.reduced_vars:
        return unsupported_reduction(term.red_op, term.reduced_vars)
    return None


lower_contraction.precondition = _contraction_precondition
lower_sum_product.precondition = _contraction_precondition
lower_contraction_of_one.precondition = _contraction_precondition
