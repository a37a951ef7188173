"""Indexing and reshaping of named dims: ``GetitemOp`` (``x["i"]``,
``x[index_tensor]``), ``Lambda``, ``Stack``, ``Cat``, ``Align`` and
``Independent``.
"""

import math

import funsor.tensor
from funsor import ops
from funsor.domains import Bint
from funsor.interpretations import reflect
from funsor.ops import GetitemOp
from funsor.terms import (
    Align,
    Binary,
    Cat,
    Funsor,
    Independent,
    Lambda,
    Number,
    Slice,
    Stack,
    Variable,
)

from ...errors import UnsupportedTermError
from ...ops.extra_ops import getslice_op, take
from ...ops.shapes import broadcast_shape
from ..driver import Lowered, LoweredTuple, lowering_rule
from ..layout import (
    align_expanded,
    apply,
    apply_finitary,
    constant,
    expand,
    permute,
    reshape,
    union_batch,
)


def batch_axis_to_event(lowered, name):
    """Make batch input ``name`` the first event axis (size-``n`` broadcast
    if ``lowered`` does not depend on it)."""
    names = list(lowered.batch)
    nb, ne = len(names), len(lowered.event_shape)
    if name not in lowered.batch:
        raise KeyError(name)
    i = names.index(name)
    order = [j for j in range(nb) if j != i] + [i] + list(range(nb, nb + ne))
    batch = {k: d for k, d in lowered.batch.items() if k != name}
    return Lowered(permute(lowered.expr, order), batch)


def event_axis_to_batch(lowered, offset, name, domain):
    """Make event axis ``offset`` the last batch input, named ``name``."""
    nb, ne = len(lowered.batch), len(lowered.event_shape)
    axis = nb + offset
    order = list(range(nb)) + [axis] + [nb + j for j in range(ne) if j != offset]
    batch = dict(lowered.batch)
    batch[name] = domain
    return Lowered(permute(lowered.expr, order), batch)


def getitem(lhs, offset, rhs, rhs_term):
    """``lhs[..., rhs, ...]`` indexing event axis ``offset`` of ``lhs`` by
    the Bint-valued ``rhs`` (whose batch inputs broadcast by name)."""
    nb = len(lhs.batch)
    if isinstance(rhs_term, Variable) and rhs_term.name in lhs.batch:
        raise UnsupportedTermError(
            rhs_term,
            f"indexing by {rhs_term.name!r}, already a batch input of the indexed "
            f"value (a diagonal, which funsor 0.4.8 does not define consistently)",
        )
    if isinstance(rhs_term, Variable):
        # x["i"]: the axis itself becomes batch input i.
        return event_axis_to_batch(lhs, offset, rhs_term.name, rhs_term.output)
    if isinstance(rhs_term, Slice) and rhs_term.name not in lhs.batch:
        index = (slice(None),) * (nb + offset) + (rhs_term.slice,)
        sliced = Lowered(apply(getslice_op(index), lhs.expr), lhs.batch)
        domain = rhs_term.inputs[rhs_term.name]
        return event_axis_to_batch(sliced, offset, rhs_term.name, domain)
    if not rhs.batch:
        return Lowered(
            apply(GetitemOp(offset=nb + offset), lhs.expr, rhs.expr), lhs.batch
        )
    return gather(lhs, offset, rhs)


def gather(lhs, offset, rhs):
    """General ``lhs[..., rhs, ...]`` where ``rhs`` has batch inputs: flatten
    the batch axes with the indexed axis and index once with linear indices."""
    batch = union_batch(lhs, rhs)
    nu = len(batch)
    event = lhs.event_shape
    n = event[offset]
    rest = event[:offset] + event[offset + 1 :]
    source = align_expanded(lhs, batch, event)
    order = list(range(nu)) + [nu + offset]
    order += [nu + j for j in range(len(event)) if j != offset]
    size = math.prod(d.size for d in batch.values())
    source = reshape(permute(source, order), (size * n,) + rest)

    index_shape = rhs.event_shape
    index = align_expanded(rhs, batch, index_shape)
    prototype = funsor.tensor.get_default_prototype()
    base = ops.mul(ops.new_arange(prototype, size), n)
    base_shape = tuple(d.size for d in batch.values()) + (1,) * len(index_shape)
    base = constant(ops.ReshapeOp(shape=base_shape)(base), size * n)
    linear = apply(ops.add, index, base)
    result = apply(take, source, linear)  # batch, index, rest
    nr = len(index_shape)
    order = list(range(nu)) + [nu + nr + j for j in range(offset)]
    order += [nu + j for j in range(nr)]
    order += [nu + nr + j for j in range(offset, len(rest))]
    return Lowered(permute(result, order), batch)


@lowering_rule(Binary, GetitemOp, Funsor, Funsor)
def lower_getitem(term, op, lhs, rhs):
    if isinstance(lhs, LoweredTuple):
        if not isinstance(term.rhs, Number):
            raise UnsupportedTermError(term, "a Tuple indexed by a non-constant")
        return lhs.items[int(term.rhs.data)]
    return getitem(lhs, op.defaults["offset"], rhs, term.rhs)


@lowering_rule(Lambda, Variable, Funsor)
def lower_lambda(term, var, expr):
    """``Lambda(i, expr)``: batch input ``i`` becomes the first event axis."""
    name = term.var.name
    if name not in expr.batch:
        # Not dependent on i: broadcast along a new axis.
        nb = len(expr.batch)
        shape = expr.expr.output.shape
        expanded = reshape(expr.expr, shape[:nb] + (1,) + shape[nb:])
        size = term.var.output.size
        expanded = expand(expanded, shape[:nb] + (size,) + shape[nb:])
        return Lowered(expanded, expr.batch)
    return batch_axis_to_event(expr, name)


@lowering_rule(Stack, str, tuple)
def lower_stack(term, name, parts):
    """``Stack(i, parts)``: parts stacked along new batch input ``i``."""
    batch = union_batch(*parts)
    event = broadcast_shape(*(p.event_shape for p in parts))
    exprs = [align_expanded(p, batch, event) for p in parts]
    stacked = apply_finitary(ops.StackOp(dim=0), exprs)
    out = {name: Bint[len(parts)]}
    out.update(batch)
    return Lowered(stacked, out)


@lowering_rule(Cat, str, tuple, str)
def lower_cat(term, name, parts, part_name):
    """``Cat(i, parts, j)``: parts concatenated along their batch input
    ``j``, which becomes batch input ``i``."""
    others = {}
    for part in parts:
        others.update((k, d) for k, d in part.batch.items() if k != part_name)
    event = broadcast_shape(*(p.event_shape for p in parts))
    exprs = []
    for part in parts:
        batch = {part_name: part.batch[part_name]}
        batch.update(others)
        exprs.append(align_expanded(part, batch, event))
    joined = apply_finitary(ops.CatOp(axis=0), exprs)
    out = {name: term.inputs[name]}
    out.update(others)
    return Lowered(joined, out)


@lowering_rule(Align, Funsor, tuple)
def lower_align(term, arg, names):
    """``Align`` only reorders ``.inputs``; the output layout follows the
    outermost term's ``.inputs`` anyway."""
    return arg


@lowering_rule(Independent, Funsor, str, str, str, raw=True)
def lower_independent(term, lowerer):
    """``Independent(fn, x, i, x_i)`` is ``fn(x_i=x[i]).reduce(add, i)``."""
    fn, reals_var, bint_var, diag_var = term._ast_values
    with reflect:
        value = Variable(reals_var, term.inputs[reals_var])[bint_var]
        expanded = fn(**{diag_var: value}).reduce(ops.add, bint_var)
    return lowerer.lower(expanded)
