"""Trees of separate factors in log space, level by level.

A log-space contraction (``logaddexp``, ``add``) whose factors form a tree
-- pair factors ``f(parent, child)`` on its edges, unary factors on its
nodes, at most one input kept -- is belief propagation from the leaves to a
root (the kept input, else the tree's center)::

    belief_v = sum of v's unary factors + sum of messages from v's children
    message_v(parent) = logsumexp_{x_v} (f(parent, x_v) + belief_v(x_v))

Visited breadth first from the root, the nodes of each depth are
contiguous and their children are grouped by parent, in the parents'
order. Every edge factor is stacked once (one ``stack``), and each depth
takes a few batched operations: the messages of all its nodes at once, then
their sums per parent (a ``reshape`` and a ``sum`` where every parent has
as many children, else a ``take`` of the rows of each parent, padded with a
row of zeros). A tree of T separate factors and depth D compiles to O(D)
operations where one contraction per variable takes O(T): a star is one
level, a balanced tree ``log2 T``.

Example: a star of 20 leaves around ``r`` is one level::

    >>> from collections import OrderedDict
    >>> from funsor.domains import Bint, Reals
    >>> from funsor.terms import Variable
    >>> from funsor_lowering.lowering.driver import Lowered
    >>> def factor(name, *inputs):
    ...     batch = OrderedDict((k, Bint[3]) for k in inputs)
    ...     return Lowered(Variable(name, Reals[(3,) * len(inputs)]), batch)
    >>> terms = [factor("root", "r")] + [
    ...     factor(f"e{i}", "r", f"c{i}") for i in range(20)]
    >>> tree = find_tree(terms, {"r"} | {f"c{i}" for i in range(20)})
    >>> tree.order[0], tree.bounds()
    ('r', [0, 1, 21])
"""

import functools

import numpy as np
from funsor import ops
from funsor.domains import Bint

from ...ops.extra_ops import getslice_op, take
from ..driver import Lowered
from ..layout import (
    align,
    apply,
    apply_finitary,
    combine,
    parametrized,
    positions,
    reshape,
)
from .chains import pair_factor_graph, stack_factors
from .reductions import reduce_batch

# Smaller trees stay with the planner (a contraction per variable costs as
# little as a level's few operations).
TREE_MIN_EDGES = 4


class Tree:
    """A tree of factors: its nodes breadth first from the root
    (``order``), each node's ``parent``, the position in the terms of the
    pair factor of each edge (by its frozenset of names) and of the unary
    factors of each node."""

    def __init__(self, order, parent, edges, unaries):
        self.order, self.parent = order, parent
        self.edges, self.unaries = edges, unaries

    def bounds(self):
        """Where the nodes of each depth start in ``order``, then its
        length: ``[0, 1, ...]``, the root alone at depth 0."""
        depths = {self.order[0]: 0}
        for node in self.order[1:]:
            depths[node] = depths[self.parent[node]] + 1
        starts = [0]
        for i, node in enumerate(self.order):
            if depths[node] == len(starts):
                starts.append(i)
        return starts + [len(self.order)]


def find_tree(terms, names_reduced):
    """The :class:`Tree` the lowered ``terms`` (without event shapes, one
    domain) form, rooted at the kept input or else at the tree's center; or
    ``None``."""
    graph = pair_factor_graph(terms)
    if graph is None:
        return None
    edges, unaries, neighbours = graph
    if len(edges) < TREE_MIN_EDGES or not set(unaries) <= set(neighbours):
        return None
    if len(edges) != len(neighbours) - 1 or not _connected(neighbours):
        return None  # a forest, or a cycle
    if len({d for t in terms for d in t.batch.values()}) != 1:
        return None
    kept = [n for n in neighbours if n not in names_reduced]
    if len(kept) > 1:
        return None
    root = kept[0] if kept else _center(neighbours)
    order, parent = [root], {root: None}
    for node in order:  # breadth first: children grouped by parent
        for child in neighbours[node]:
            if child not in parent:
                parent[child] = node
                order.append(child)
    return Tree(order, parent, edges, unaries)


def _connected(neighbours):
    start = next(iter(neighbours))
    seen, todo = {start}, [start]
    while todo:
        for n in neighbours[todo.pop()]:
            if n not in seen:
                seen.add(n)
                todo.append(n)
    return len(seen) == len(neighbours)


def _center(neighbours):
    """A node of least eccentricity: what is left after peeling leaves."""
    degree = {n: len(v) for n, v in neighbours.items()}
    leaves = [n for n, d in degree.items() if d == 1]
    left = len(degree)
    while left > 2:
        left -= len(leaves)
        inner = []
        for leaf in leaves:
            for n in neighbours[leaf]:
                degree[n] -= 1
                if degree[n] == 1:
                    inner.append(n)
        leaves = inner
    return leaves[0]


def levels_pay_off(tree):
    """Whether levels take fewer calls on the dependent path than a
    contraction per variable (two calls each): some eight per level. The
    element operations are the same."""
    return 8 * (len(tree.bounds()) - 2) < 2 * len(tree.edges)


def lower_tree(tree, terms, names_reduced):
    """The tree ``find_tree`` found, lowered level by level from its
    deepest nodes (see the module docstring); the root is reduced too where
    it is in ``names_reduced``."""
    (domain,) = {d for t in terms for d in t.batch.values()}
    order, parent = tree.order, tree.parent
    links = [(parent[c], c) for c in order[1:]]
    pairs = [terms[tree.edges[frozenset(link)]] for link in links]
    stack = stack_factors(pairs, links, domain.size, separate=True)
    unary_rows = _UnaryRows(tree, terms, domain)
    bounds = tree.bounds()
    below = None  # summed messages into the nodes of the level above
    for d in range(len(bounds) - 2, 0, -1):
        start, end = bounds[d], bounds[d + 1]
        nodes = order[start:end]
        edge = Lowered(
            apply(getslice_op((slice(start - 1, end - 1),)), stack),
            {"_node": Bint[len(nodes)], "_parent": domain, "_x": domain},
        )
        belief = _belief(nodes, unary_rows, below)
        joint = edge if belief is None else combine(ops.add, edge, belief)
        message = reduce_batch(ops.logaddexp, joint, ["_x"], {"_x": domain})
        parents = order[bounds[d - 1] : start]
        below = _sums_per_parent(message, nodes, parents, parent, domain)
    root = order[0]
    belief = align(_belief([root], unary_rows, below), ["_node", "_x"])
    result = Lowered(reshape(belief, (domain.size,)), {root: domain})
    if root in names_reduced:
        result = reduce_batch(ops.logaddexp, result, [root], {root: domain})
    return result


class _UnaryRows:
    """The unary factors of each node that has some, added, stacked in
    breadth-first order (``[m, S]``); the rows of a level's nodes, zeros
    where a node has none (from a zero row appended once, where needed)."""

    def __init__(self, tree, terms, domain):
        self.domain = domain
        present = [n for n in tree.order if n in tree.unaries]
        add = functools.partial(combine, ops.add)
        factors = [
            functools.reduce(add, [terms[i] for i in tree.unaries[n]]) for n in present
        ]
        self.rows = None
        if present:
            names = [(n,) for n in present]
            self.rows = stack_factors(factors, names, domain.size, True)
        self.row = {n: i for i, n in enumerate(present)}
        self._padded = None

    def of(self, nodes):
        """``{"_node", "_x"}``, or ``None`` where no node has a factor."""
        index = [self.row.get(n) for n in nodes]
        if all(i is None for i in index):
            return None
        rows = self.rows
        if None in index:
            if self._padded is None:
                self._padded = _with_zero_row(self.rows, self.domain)
            rows, pad = self._padded, len(self.row)
            index = [pad if i is None else i for i in index]
        if index == list(range(index[0], index[0] + len(index))):
            picked = apply(getslice_op((slice(index[0], index[-1] + 1),)), rows)
        else:
            picked = apply(take, rows, positions(index))
        return Lowered(picked, {"_node": Bint[len(nodes)], "_x": self.domain})


def _belief(nodes, unary_rows, below):
    """``{"_node", "_x"}``: the nodes' unary factors (zero where a node has
    none) plus the messages from their children (``below``)."""
    unary = unary_rows.of(nodes)
    if unary is None or below is None:
        return unary if below is None else below
    return combine(ops.add, unary, below)


def _sums_per_parent(message, nodes, parents, parent, domain):
    """``{"_node", "_x"}``: for each of ``parents``, the sum of the
    ``message`` s (``{"_node", "_parent"}``) of its children among
    ``nodes`` (grouped by parent, in the parents' order)."""
    counts = [0] * len(parents)
    slot = {p: i for i, p in enumerate(parents)}
    for n in nodes:
        counts[slot[parent[n]]] += 1
    rows = align(message, ["_node", "_parent"])
    k = max(counts)
    if min(counts) == k:  # k children each: consecutive rows
        grouped = reshape(rows, (len(parents), k, domain.size))
        batch = {"_node": Bint[len(parents)], "_slot": Bint[k], "_x": domain}
    else:  # the j-th child of each parent, or the zero row after the rest
        first = np.cumsum([0] + counts[:-1])
        index = [
            [f + j if j < c else len(nodes) for f, c in zip(first, counts)]
            for j in range(k)
        ]
        grouped = apply(take, _with_zero_row(rows, domain), positions(index))
        batch = {"_slot": Bint[k], "_node": Bint[len(parents)], "_x": domain}
    return reduce_batch(ops.add, Lowered(grouped, batch), ["_slot"], {"_slot": Bint[k]})


def _with_zero_row(rows, domain):
    """``rows`` (``[n, S]``) followed by a row of zeros of their dtype."""
    zeros = apply(parametrized(ops.NewZerosOp, shape=(1, domain.size)), rows)
    return apply_finitary(parametrized(ops.CatOp, axis=0), [rows, zeros])
