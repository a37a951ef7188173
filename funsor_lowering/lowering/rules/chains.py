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

from funsor import ops

from ...ops.extra_ops import logsumexp_scan, logsumexp_scan_emitting
from ..driver import Lowered
from ..layout import align, apply, apply_finitary, combine, reshape
from .reductions import reduce_batch

# Shorter chains stay with the planner (its few steps cost as little).
SCAN_MIN_STEPS = 4


def find_chain(terms, names_reduced):
    """``(order, links, unaries)`` where the lowered ``terms`` (without
    event shapes) form a chain: its inputs in order (starting at a reduced
    end), the position in ``terms`` of the pair factor of each link
    ``(order[t - 1], order[t])``, and the positions of the unary factors of
    each input; or ``None``."""
    links, unaries, neighbours = {}, {}, {}
    for i, term in enumerate(terms):
        names = tuple(term.batch)
        if len(names) == 1:
            unaries.setdefault(names[0], []).append(i)
            continue
        if len(names) != 2 or frozenset(names) in links:
            return None  # not a pair factor, or two on one link
        links[frozenset(names)] = i
        a, b = names
        neighbours.setdefault(a, []).append(b)
        neighbours.setdefault(b, []).append(a)
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


def lower_chain(chain, terms, names_reduced):
    """The chain ``find_chain`` found, lowered to one ``logsumexp_scan``
    (``logsumexp_scan_emitting`` where every step has an emission); the
    last input is reduced too where it is in ``names_reduced``."""
    order, links, unaries = chain
    (domain,) = {d for t in terms for d in t.batch.values()}
    size = domain.size

    def unary(name):
        parts = [terms[i] for i in unaries.get(name, ())]
        if not parts:
            return None
        return functools.reduce(functools.partial(combine, ops.add), parts)

    def stacked(lowereds, names):
        """The lowered values, laid out as ``names``, stacked."""
        parts = [
            reshape(align(x, n), (1,) + (size,) * len(n))
            for x, n in zip(lowereds, names)
        ]
        return apply_finitary(ops.CatOp(axis=0), parts)

    pairs = [terms[i] for i in links]
    alpha = unary(order[0])
    if alpha is None:  # no initial factor: the first step starts the pass
        first, emitted = pairs.pop(0), unary(order[1])
        if emitted is not None:
            first = combine(ops.add, first, emitted)
        alpha = reduce_batch(ops.logaddexp, first, [order[0]], {order[0]: domain})
        order = order[1:]
    links = [order[t : t + 2] for t in range(len(pairs))]
    # where every step has an emission, the scan adds them after each step;
    # else each emission is added to its step before stacking
    emissions = [unary(name) for name in order[1:]]
    alpha = align(alpha, [order[0]])
    if all(e is not None for e in emissions):
        stacked_emissions = stacked(emissions, [n[1:] for n in links])
        parts = (alpha, stacked(pairs, links), stacked_emissions)
        scan = apply_finitary(logsumexp_scan_emitting, parts)
    else:
        pairs = [
            p if e is None else combine(ops.add, p, e) for p, e in zip(pairs, emissions)
        ]
        scan = apply(logsumexp_scan, alpha, stacked(pairs, links))
    result = Lowered(scan, {order[-1]: domain})
    if order[-1] in names_reduced:
        result = reduce_batch(ops.logaddexp, result, [order[-1]], {order[-1]: domain})
    return result
