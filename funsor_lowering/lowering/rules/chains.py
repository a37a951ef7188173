"""Chains in log space as one forward pass, on backends that loop fast.

A log-space contraction (``logaddexp``, ``add``) whose factors form a chain
-- pair factors ``f_t(x_{t-1}, x_t)`` linking the inputs ``x_0 ... x_K`` in
a path, unary factors ``g_t(x_t)`` beside them (an HMM's initial and
emission factors), every input but the last reduced -- is an HMM's forward
pass::

    alpha_0 = g_0
    alpha_t = logsumexp_{x_{t-1}} (alpha_{t-1} + f_t + g_t)

On a backend whose ``scans_chains`` is true this is lowered to one
:func:`~funsor_lowering.ops.extra_ops.logsumexp_scan` over the stacked steps,
in place of the planner's log-depth rounds of pairwise steps. jax is such a
backend: XLA runs a ``lax.scan`` step of a 5-state HMM in ~0.3 us, where
each level of the parallel form costs several kernels and S^3 work per
pair of steps (HMM, T = 100: ~35 us against ~100 us jitted).

Example::

    >>> from collections import OrderedDict
    >>> from funsor.domains import Bint, Reals
    >>> from funsor.terms import Variable
    >>> from funsor_lowering.lowering.driver import Lowered
    >>> def factor(name, *inputs):
    ...     batch = OrderedDict((k, Bint[3]) for k in inputs)
    ...     return Lowered(Variable(name, Reals[(3,) * len(inputs)]), batch)
    >>> terms = [factor("init", "x0")] + [
    ...     factor(f"f{t}", f"x{t - 1}", f"x{t}") for t in range(1, 6)]
    >>> order, links, unaries = find_chain(terms, {f"x{t}" for t in range(6)})
    >>> order
    ['x0', 'x1', 'x2', 'x3', 'x4', 'x5']
    >>> links, unaries
    ([1, 2, 3, 4, 5], {'x0': [0]})
"""

import functools
import math

import numpy as np
from funsor import ops
from funsor.domains import Bint

from ...ops.extra_ops import (
    getslice_op,
    logsumexp_scan,
    logsumexp_scan_emitting,
    take,
)
from ...ops.logspace_einsum import LogspaceEinsumOp
from ..driver import Lowered
from ..layout import (
    align,
    apply,
    apply_finitary,
    combine,
    parametrized,
    permute,
    positions,
    reshape,
)
from .reductions import reduce_batch

# Shorter chains stay with the planner (its few steps cost as little).
SCAN_MIN_STEPS = 4


def pair_factor_graph(terms):
    """``(pairs, unaries, neighbours)`` of lowered ``terms`` that are
    factors of one or two inputs: the position in ``terms`` of the factor
    of each pair of inputs (keyed by the pair, a frozenset), the positions
    of each input's one-input factors, and each input's neighbours; or
    ``None`` where a term has more inputs, or two have the same pair."""
    pairs, unaries, neighbours = {}, {}, {}
    for i, term in enumerate(terms):
        names = tuple(term.batch)
        if len(names) == 1:
            unaries.setdefault(names[0], []).append(i)
            continue
        if len(names) != 2 or frozenset(names) in pairs:
            return None
        pairs[frozenset(names)] = i
        a, b = names
        neighbours.setdefault(a, []).append(b)
        neighbours.setdefault(b, []).append(a)
    return pairs, unaries, neighbours


def find_chain(terms, names_reduced):
    """``(order, links, unaries)`` where the lowered ``terms`` (without
    event shapes) form a chain: its inputs in order (starting at a reduced
    end), the position in ``terms`` of the pair factor of each link
    ``(order[t - 1], order[t])``, and the positions of the unary factors of
    each input; or ``None``."""
    graph = pair_factor_graph(terms)
    if graph is None:
        return None
    links, unaries, neighbours = graph
    if len(links) < SCAN_MIN_STEPS or not set(unaries) <= set(neighbours):
        return None
    if any(len(v) > 2 for v in neighbours.values()):
        return None
    ends = [n for n, v in neighbours.items() if len(v) == 1]
    kept = [n for n in neighbours if n not in names_reduced]
    if len(ends) != 2 or len(kept) > 1 or not set(kept) <= set(ends):
        return None
    order = [ends[1] if ends[0] in kept else ends[0]]  # a reduced end
    while len(order) < len(neighbours):
        after = [n for n in neighbours[order[-1]] if n not in order[-2:]]
        if not after:
            return None  # the rest is a cycle apart from this path
        order.append(after[0])
    if len({d for t in terms for d in t.batch.values()}) != 1:
        return None
    steps = [links[frozenset(order[t - 1 : t + 1])] for t in range(1, len(order))]
    # with both ends reduced, go the way most pair factors are laid out
    # (``f_t[x_{t-1}, x_t]``: steps are then slices of one array, in order)
    forward = sum(
        tuple(terms[i].batch) == tuple(order[t : t + 2]) for t, i in enumerate(steps)
    )
    if not kept and 2 * forward < len(steps):
        order.reverse()
        steps.reverse()
    return order, steps, unaries


def lower_chain(chain, terms, names_reduced, separate=False):
    """The chain ``find_chain`` found, lowered to one ``logsumexp_scan``
    (``logsumexp_scan_emitting`` where every step has an emission); the
    last input is reduced too where it is in ``names_reduced``. Its steps
    are ``separate`` factors (stacked by one op), or slices of arrays
    (concatenated, which the ``cat_slices`` pass folds into slices)."""
    order, alpha, pairs, emissions, domain = _chain_steps(chain, terms)
    links = [order[t : t + 2] for t in range(len(pairs))]
    # where every step has an emission, the scan adds them after each step;
    # else each emission is added to its step before stacking
    alpha = align(alpha, [order[0]])
    if all(e is not None for e in emissions):
        stacked_emissions = stack_factors(
            emissions, [n[1:] for n in links], domain.size, separate
        )
        parts = (
            alpha,
            stack_factors(pairs, links, domain.size, separate),
            stacked_emissions,
        )
        scan = apply_finitary(logsumexp_scan_emitting, parts)
    else:
        pairs = _with_emissions(pairs, emissions)
        scan = apply(
            logsumexp_scan, alpha, stack_factors(pairs, links, domain.size, separate)
        )
    return _last_reduced(Lowered(scan, {order[-1]: domain}), names_reduced)


def lower_chain_in_rounds(chain, terms, names_reduced, broadcast_limit):
    """The chain ``find_chain`` found, lowered to log-depth rounds: its
    steps (emissions added) stacked once, the log-space matrix product of
    the stack taken pairwise, ``ceil(log2(steps))`` rounds of one batched
    ``add`` and ``logsumexp`` each, then the initial factor carried through
    the product. Where steps are separate factors, this is what a chain laid
    out along a time dim gets from the planner's rounds. A round whose
    broadcast ``add`` would have more than ``broadcast_limit`` elements is one
    ``logspace_einsum`` (matrix products in probability space) instead."""
    order, alpha, pairs, emissions, domain = _chain_steps(chain, terms)
    links = [order[t : t + 2] for t in range(len(pairs))]
    if all(e is not None for e in emissions):  # stacked too, added once
        stack = Lowered(
            stack_factors(pairs, links, domain.size, separate=True),
            {"_step": Bint[len(pairs)], "_from": domain, "_to": domain},
        )
        emitted = Lowered(
            stack_factors(
                emissions, [n[1:] for n in links], domain.size, separate=True
            ),
            {"_step": Bint[len(pairs)], "_to": domain},
        )
        steps = align(combine(ops.add, stack, emitted), ["_step", "_from", "_to"])
    else:
        pairs = _with_emissions(pairs, emissions)
        steps = stack_factors(pairs, links, domain.size, separate=True)
    product = _product_in_rounds(steps, len(pairs), domain, broadcast_limit)
    through = Lowered(product, {order[0]: domain, order[-1]: domain})
    result = reduce_batch(
        ops.logaddexp, combine(ops.add, alpha, through), [order[0]], {order[0]: domain}
    )
    return _last_reduced(result, names_reduced)


def rounds_cost_less(chain, terms, call_cost):
    """Whether rounds cost less than the chain's steps one after another,
    counting element operations (an ``add`` and a ``logsumexp``, some five
    passes over a step's elements) and ``call_cost`` per backend call on the
    dependent path: rounds take ``S^3`` elements per step where the forward
    pass takes ``S^2``, and ``log2`` of its calls. (numpy: the forward pass
    up to ~55 steps of 5 states; torch: rounds from 4 steps.)"""
    _, links, _ = chain
    (domain,) = {d for t in terms for d in t.batch.values()}
    steps, size = len(links), domain.size
    forward = 5 * steps * size**2 + 2 * call_cost * steps
    rounds = 5 * steps * size**3 + 2 * call_cost * math.ceil(math.log2(steps))
    return rounds < forward


def _chain_steps(chain, terms):
    """``(order, alpha, pairs, emissions, domain)`` of a chain: the initial
    message (the first input's unary factors, or the first step reduced
    where it has none), the pair factors of the remaining steps and each
    step's emission (its last input's unary factors, or ``None``)."""
    order, links, unaries = chain
    (domain,) = {d for t in terms for d in t.batch.values()}

    def unary(name):
        parts = [terms[i] for i in unaries.get(name, ())]
        if not parts:
            return None
        return functools.reduce(functools.partial(combine, ops.add), parts)

    pairs = [terms[i] for i in links]
    alpha = unary(order[0])
    if alpha is None:  # no initial factor: the first step starts the pass
        first, emitted = pairs.pop(0), unary(order[1])
        if emitted is not None:
            first = combine(ops.add, first, emitted)
        alpha = reduce_batch(ops.logaddexp, first, [order[0]], {order[0]: domain})
        order = order[1:]
    emissions = [unary(name) for name in order[1:]]
    return order, alpha, pairs, emissions, domain


def _with_emissions(pairs, emissions):
    return [
        p if e is None else combine(ops.add, p, e) for p, e in zip(pairs, emissions)
    ]


def stack_factors(lowereds, names, size, separate):
    """The lowered values, laid out as ``names``, stacked: ``separate``
    values by one ``stack`` op per layout (those laid out in reverse
    permuted once; where both layouts occur, the two stacks joined and
    taken back into order), slices by a ``cat`` the ``cat_slices`` pass
    folds."""
    layouts = [tuple(x.batch) for x in lowereds]
    ahead = [i for i, n in enumerate(names) if layouts[i] == tuple(n)]
    behind = [
        i
        for i, n in enumerate(names)
        if layouts[i] != tuple(n) and layouts[i] == tuple(n)[::-1]
    ]
    if separate and len(ahead) + len(behind) == len(lowereds):
        rank = len(names[0])
        parts = [
            apply_finitary(ops.StackOp(dim=0), [lowereds[i].expr for i in group])
            for group in (ahead, behind)
            if group
        ]
        if behind:
            parts[-1] = permute(parts[-1], [0] + list(range(rank, 0, -1)))
        if len(parts) == 1:
            return parts[0]
        joined = apply_finitary(ops.CatOp(axis=0), parts)
        return apply(take, joined, positions(np.argsort(ahead + behind)))
    parts = [
        reshape(align(x, n), (1,) + (size,) * len(n)) for x, n in zip(lowereds, names)
    ]
    return apply_finitary(ops.CatOp(axis=0), parts)


def _product_in_rounds(steps, count, domain, broadcast_limit):
    """The log-space matrix product ``steps[0] @ ... @ steps[count - 1]`` of a
    stack of ``count`` steps (``[count, S, S]``), in rounds: each multiplies
    the steps pairwise (one batched step), an odd last one carried over."""
    d = domain
    while count > 1:
        half = count // 2
        even = apply(getslice_op((slice(0, 2 * half, 2),)), steps)
        odd = apply(getslice_op((slice(1, 2 * half, 2),)), steps)
        if half * d.size**3 > broadcast_limit:
            equation = "abc,acd->abd"
            paired = apply_finitary(
                parametrized(LogspaceEinsumOp, equation=equation), (even, odd)
            )
        else:
            a = Lowered(even, {"_pair": Bint[half], "_from": d, "_via": d})
            b = Lowered(odd, {"_pair": Bint[half], "_via": d, "_to": d})
            pair = reduce_batch(
                ops.logaddexp, combine(ops.add, a, b), ["_via"], {"_via": d}
            )
            paired = align(pair, ["_pair", "_from", "_to"])
        if count % 2:
            last = apply(getslice_op((slice(count - 1, count),)), steps)
            paired = apply_finitary(ops.CatOp(axis=0), (paired, last))
        steps, count = paired, half + count % 2
    return reshape(steps, (domain.size, domain.size))


def _last_reduced(result, names_reduced):
    (name,) = result.batch
    if name not in names_reduced:
        return result
    return reduce_batch(ops.logaddexp, result, [name], {name: result.batch[name]})
