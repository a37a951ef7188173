"""The ``simplify`` pass: algebraic identities, as rules registered per op.

Each rule is registered for the op types it simplifies with
:func:`simplification` and gets ``(context, editor, operation, args,
value_type)``: the pass's :class:`SimplifyContext` (use counts and the
simplifiers built for this program), the program's
:class:`~funsor_lowering.ir.editor.Editor`, the operation, its
already rewritten arguments and its result type. It returns the value that
replaces the operation, or ``None``. The rules of an op type (and of its
base types) are tried in the order they were registered; the first value
returned replaces the operation.

The identities: ``unsqueeze`` as ``reshape``; identity ``permute`` /
``reshape`` / ``expand``, chains of ``reshape`` s, of ``expand`` s or of
``getslice`` s as one; ``x + 0``, ``x * 1`` and the other units of
associative ops (Python-number units only, which cannot change a result's
dtype); ``-(-x)``, ``-x * c`` and ``-x + c`` (for a number ``c``);
``permute(permute(x))``; ``permute`` s folded into the ``einsum`` s they
feed or follow; reductions of column broadcasts and transposes of slices
(:mod:`~funsor_lowering.passes.row_broadcasts`); gathers at evenly spaced
positions as strided slices, slices and concatenations of slices
(:mod:`~funsor_lowering.passes.cat_slices`); slices of large
concatenations from their parts, zero blocks merged
(:mod:`~funsor_lowering.passes.cat_parts`); basic slices in one canonical
spelling; products with the factors of a QR or a Cholesky factor
(:mod:`~funsor_lowering.passes.qr_algebra`,
:mod:`~funsor_lowering.passes.cholesky_algebra`); vector products and
solves without unit axes, ``sum(x * y, -1)`` as ``vecdot``
(:mod:`~funsor_lowering.passes.vector_products`); draws' prototypes taken
from the earliest value of the same dtype.

``_double_negation`` below is the shortest rule, ``-(-x)`` as ``x``.

Example (the dead ``neg`` is left to ``eliminate_dead_code``)::

    >>> from funsor import ops
    >>> from funsor.domains import Reals
    >>> from funsor_lowering.ir.program import OpProgram, Operation, ValueType
    >>> p = OpProgram(
    ...     [], {"x": Reals[2]},
    ...     [Operation(ops.neg, (0,)), Operation(ops.neg, (1,))], 2,
    ...     value_types=[ValueType((2,), "real")] * 2,
    ... )
    >>> print(simplify(p).program)
    OpProgram(x: real[2]) on numpy:
      neg: real[2] = neg(x)
      return x
"""

import math

from funsor import ops

from ..ir.editor import rewrite
from ..ir.program import array_backend
from ..ir.structure import iter_leaves
from ..ops.extra_ops import RandnWithKeyOp, TupleItemOp, getslice_op
from ..ops.op_rules import OpRules
from ..ops.shapes import permutation_dims
from .basic_index import canonical_index, compose_indices, keeps_order, takes_all
from .cat_parts import merge_zero_parts, slice_of_cat_parts, slice_of_zeros
from .cat_slices import cat_simplifier, slice_of_cat
from .cholesky_algebra import cholesky_identities
from .qr_algebra import is_qr, qr_identities
from .row_broadcasts import ROW_REDUCTIONS, row_reduction, swap_of_slice
from .vector_products import dot_products, vector_solve, without_unit_axis

_RULES = []  # (op types, rule), in the order they were registered
_RULES_BY_TYPE = {}  # op type -> its rules (filled on first use)


def simplification(*op_types):
    """Register the decorated function as a simplification rule of
    ``op_types`` (and their subclasses)."""

    def register(rule):
        _RULES.append((op_types, rule))
        _RULES_BY_TYPE.clear()
        return rule

    return register


def rules_for(op_type):
    """The simplification rules of ``op_type``, in the order they apply."""
    rules = _RULES_BY_TYPE.get(op_type)
    if rules is None:
        rules = tuple(rule for types, rule in _RULES if issubclass(op_type, types))
        _RULES_BY_TYPE[op_type] = rules
    return rules


class SimplifyContext:
    """What the rules know about the program being simplified: how often
    each value is read, and the simplifiers of its concatenations and
    gathers."""

    def __init__(self, program):
        self.program = program
        self.uses = _use_counts(program)
        self.simplify_cat, self.slice_of_gather, self.gather_as_slice = cat_simplifier(
            program
        )

    def read_once(self, value):
        """Whether value number ``value`` is read by one operation only."""
        return self.uses.get(value, 0) == 1


def simplify(program):
    """Apply the registered simplification rules to every operation (see
    the module docstring); a :class:`PassResult`."""
    context = SimplifyContext(program)

    def rule(editor, operation, args, value_type):
        for simplification_rule in rules_for(type(operation.op)):
            simpler = simplification_rule(context, editor, operation, args, value_type)
            if simpler is not None:
                return simpler
        return None

    return rewrite(program, rule)


@simplification(ops.CatOp)
def _packed_cat(context, editor, operation, args, value_type):
    if not operation.packed:
        return None
    simpler = merge_zero_parts(editor, operation.op, args, value_type)
    if simpler is None:
        simpler = context.simplify_cat(editor, operation.op, args, value_type)
    return simpler


@simplification(ops.PermuteOp, ops.TransposeOp)
def _permutation(context, editor, operation, args, value_type):
    op = operation.op
    dims = permutation_dims(op, _shape(value_type))
    if dims is None:
        return None
    if dims == tuple(range(len(dims))):
        return args[0]
    inner = editor.producer(args[0], ops.PermuteOp, ops.TransposeOp)
    if inner is not None:
        inner_dims = permutation_dims(inner.op, dims)
        composed = tuple(inner_dims[d] for d in dims)
        if composed == tuple(range(len(composed))):
            return inner.args[0]
        return editor.emit(ops.PermuteOp(dims=composed), inner.args, False, value_type)
    rank = len(dims)
    if dims == (*range(rank - 2), rank - 1, rank - 2):
        return swap_of_slice(editor, args, value_type)
    return None


@simplification(ops.PermuteOp)
def _permuted_einsum(context, editor, operation, args, value_type):
    # a permute of an einsum read once is the einsum with permuted output
    # (read more than once, the einsum would run twice)
    einsum = editor.producer(args[0], ops.EinsumOp)
    if einsum is None or not context.read_once(operation.args[0]):
        return None
    dims = permutation_dims(operation.op, _shape(value_type))
    if dims is None or dims == tuple(range(len(dims))):
        return None
    return _permute_einsum_output(editor, einsum, dims, value_type)


@simplification(ops.UnsqueezeOp)
def _unsqueeze_as_reshape(context, editor, operation, args, value_type):
    # a reshape (a method call; numpy's expand_dims takes ~2 us) that
    # chains of reshapes then merge with
    if value_type is None:
        return None
    return editor.emit(ops.ReshapeOp(shape=value_type.shape), args, False, value_type)


@simplification(ops.ReshapeOp, ops.ExpandOp)
def _reshape_or_expand(context, editor, operation, args, value_type):
    op, shape = operation.op, _shape(value_type)
    arg_type = editor.value_type(args[0])
    if shape is not None and arg_type is not None and arg_type.shape == shape:
        return args[0]
    inner = editor.producer(args[0])
    if inner is not None and type(inner.op) is type(op):
        # reshape(reshape(x)) is a reshape of x; an expand of an expand of x
        # is an expand of x (broadcasting composes)
        return editor.emit(op, inner.args, False, value_type)
    return None


@simplification(ops.ReshapeOp)
def _reshape(context, editor, operation, args, value_type):
    squeeze = _squeeze(editor, args[0])
    if squeeze is not None:
        # a reshape of x with size-1 dims dropped is a reshape of x
        return editor.emit(operation.op, squeeze.args, False, value_type)
    if not context.read_once(operation.args[0]):
        return None
    # (v[..., None, :] @ m)[..., 0, :] as v @ m, and solves of v[..., None]
    # as solves of v
    simpler = without_unit_axis(editor, args[0], value_type)
    if simpler is None:
        x = _solved_columns(context.program, operation.args[0])
        read_once = x is not None and context.read_once(x)
        simpler = vector_solve(editor, args[0], value_type, read_once)
    return simpler


@simplification(ops.GetsliceOp)
def _getslice(context, editor, operation, args, value_type):
    index = operation.op.defaults["index"]
    source = editor.value_type(args[0])
    if source is not None and takes_all(index, source.shape):
        return args[0]
    in_order = source is not None and keeps_order(index, source.shape)
    if in_order and context.read_once(operation.args[0]):
        simpler = without_unit_axis(editor, args[0], value_type)
        if simpler is not None:  # (v[..., None, :] @ m)[..., 0, :]
            return simpler
    inner = editor.producer(args[0], ops.GetsliceOp)
    if inner is not None:
        return _slice_of_slice(editor, inner, index, value_type)
    simpler = _slice_of_producer(context, editor, args[0], index, value_type)
    if simpler is not None or source is None:
        return simpler
    if in_order and value_type is not None:
        # adding or dropping unit axes is a reshape: one spelling (equal to
        # reshapes of the same value), a cheap call
        op = ops.ReshapeOp(shape=value_type.shape)
        return editor.emit(op, args, False, value_type)
    canonical = canonical_index(index, source.shape)
    if canonical is None or canonical == index:
        return None
    # one spelling per selection: equal slices become one value
    return editor.emit(getslice_op(canonical), args, False, value_type)


def _slice_of_producer(context, editor, ref, index, value_type):
    """A slice of a concatenation, of new zeros or of a gather (the
    rules of ``_SLICES_OF``, by the op computing ``ref``), as fewer
    operations."""
    inner = editor.producer(ref)
    slice_of = None if inner is None else _SLICES_OF.rule(inner.op)
    if slice_of is None:
        return None
    return slice_of(context, editor, inner, index, value_type)


_SLICES_OF = OpRules("slice of")  # sliced value's op type -> rule


@_SLICES_OF.register(ops.CatOp)
def _slice_of_cat(context, editor, inner, index, value_type):
    if not inner.packed:
        return None
    simpler = slice_of_cat(editor, index, inner, value_type)
    if simpler is None:
        simpler = slice_of_cat_parts(editor, index, inner, value_type)
    return simpler


@_SLICES_OF.register(ops.NewZerosOp)
def _slice_of_zeros(context, editor, inner, index, value_type):
    return None if inner.packed else slice_of_zeros(editor, inner, value_type)


@_SLICES_OF.register(ops.GetitemOp)
def _slice_of_gather(context, editor, inner, index, value_type):
    return context.slice_of_gather(editor, index, inner, value_type)


def _slice_of_slice(editor, inner, index, value_type):
    """A slice of a slice as one slice of the inner one's source."""
    source = editor.value_type(inner.args[0])
    if source is None:
        return None
    index = compose_indices(inner.op.defaults["index"], index, source.shape)
    if index is None:
        return None
    if takes_all(index, source.shape):
        return inner.args[0]
    index = canonical_index(index, source.shape) or index  # one spelling
    return editor.emit(getslice_op(index), inner.args, False, value_type)


@simplification(ops.GetitemOp)
def _gather(context, editor, operation, args, value_type):
    if len(args) != 2:
        return None
    return context.gather_as_slice(editor, operation.op, args, value_type)


@simplification(ops.NegOp)
def _double_negation(context, editor, operation, args, value_type):
    inner = editor.producer(args[0], ops.NegOp)
    if inner is not None:
        return inner.args[0]
    return None


@simplification(ops.MatmulOp)
def _matrix_identities(context, editor, operation, args, value_type):
    if len(args) != 2:
        return None
    simpler = qr_identities(editor, args, value_type)
    if simpler is None:
        simpler = cholesky_identities(editor, args, value_type)
    return simpler


# Associative ops and their units, as Python numbers.
_UNITS = {
    ops.AddOp: 0,
    ops.MulOp: 1,
    ops.LogaddexpOp: -math.inf,
    ops.MaxOp: -math.inf,
    ops.MinOp: math.inf,
}


def _squeeze(editor, ref):
    """The getslice computing ``ref`` where it only drops size-1 dims (so
    it keeps its argument's elements in order), else ``None``."""
    operation = editor.producer(ref, ops.GetsliceOp)
    if operation is None:
        return None
    source = editor.value_type(operation.args[0])
    index = operation.op.defaults["index"]
    if source is None or not keeps_order(index, source.shape):
        return None
    return operation


def _solved_columns(program, value):
    """``x`` (its value number) where value number ``value`` of ``program``
    is ``triangular_solve(x, y)``, else ``None``."""
    k = value - program.first_operation
    if k < 0 or not isinstance(program.operations[k].op, ops.TriangularSolveOp):
        return None
    return program.operations[k].args[0]


def _use_counts(program):
    counts = {}
    for operation in program.operations:
        for a in operation.args:
            counts[a] = counts.get(a, 0) + 1
    for leaf in iter_leaves(program.output):
        counts[leaf] = counts.get(leaf, 0) + 1
    return counts


def _drop_unit(editor, unit, args, value_type):
    """``x op unit`` or ``unit op x`` is ``x`` when ``unit`` is a Python
    number (numpy, torch and jax keep ``x``'s dtype then) and ``x`` already
    has the result's shape."""
    for keep, other in ((args[0], args[1]), (args[1], args[0])):
        value = editor.constant_value(other)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if value != unit:
            continue
        kept_type = editor.value_type(keep)
        if kept_type is None or value_type is None or kept_type != value_type:
            continue
        return keep
    return None


# Ops that read their first operand for its dtype and device only.
_PROTOTYPE_OPS = (
    ops.RandnOp,
    RandnWithKeyOp,
    ops.NewZerosOp,
    ops.NewFullOp,
    ops.NewArangeOp,
)
# Ops whose result has their first operand's dtype and device.
_DTYPE_KEEPING_OPS = (
    ops.ReshapeOp,
    ops.GetsliceOp,
    ops.TransposeOp,
    ops.PermuteOp,
    ops.ExpandOp,
    ops.NegOp,
)


def _earliest_prototype(editor, op, args, value_type):
    """A draw or new array whose prototype (read for its dtype and device
    only) is a value computed from an earlier one of the same dtype and
    device, with that earlier value as prototype: the values in between
    (a QR nothing else reads) may then be dead."""
    keepers = _DTYPE_KEEPING_OPS
    if array_backend(editor.backend).matmul_needs_one_dtype:
        keepers += (ops.MatmulOp,)
    first = earlier = args[0]
    while True:
        producer = editor.producer(earlier, *keepers)
        if producer is not None and producer.args:
            earlier = producer.args[0]
            continue
        item = editor.producer(earlier, TupleItemOp)
        if item is None or not is_qr(editor, item.args[0]):
            break
        earlier = editor.producer(item.args[0]).args[0]
    if earlier is first:
        return None
    return editor.emit(op, [earlier, *args[1:]], False, value_type)


def _fold_negation(editor, args, value_type, fold):
    """``-x * c`` is ``x * -c`` and ``-x + c`` is ``c - x`` for a Python
    number ``c`` and real ``x`` (one op where there were two; integers may
    be unsigned, where negation wraps)."""
    if value_type is None or value_type.kind != "real":
        return None
    for negated, other in ((args[0], args[1]), (args[1], args[0])):
        inner = editor.producer(negated, ops.NegOp)
        if inner is None:
            continue
        c = editor.constant_value(other)
        if isinstance(c, bool) or not isinstance(c, (int, float)):
            continue
        (x,) = inner.args
        if editor.value_type(x) != value_type:
            continue
        return fold(x, c, other)
    return None


def parse_einsum(equation):
    """The operand subscripts and the output subscripts of ``equation``."""
    inputs, output = equation.split("->")
    return inputs.split(","), output


def _fold_permutes_into_einsum(editor, operation, args, value_type):
    """``einsum(eq, permute(x, dims), ...)`` reads ``x`` directly, with the
    operand's subscripts permuted back."""
    equation = operation.op.defaults["equation"]
    if "." in equation or "->" not in equation:
        return None
    subscripts, output = parse_einsum(equation)
    changed = False
    new_args = list(args)
    for n, arg in enumerate(args):
        inner = editor.producer(arg, ops.PermuteOp)
        if inner is None:
            continue
        dims = tuple(inner.op.defaults["dims"])
        if len(dims) != len(subscripts[n]):
            continue
        source = [None] * len(dims)
        for i, d in enumerate(dims):
            source[d] = subscripts[n][i]
        subscripts[n] = "".join(source)
        new_args[n] = inner.args[0]
        changed = True
    if not changed:
        return None
    op = ops.EinsumOp(equation=",".join(subscripts) + "->" + output)
    return editor.emit(op, new_args, True, value_type)


def _permute_einsum_output(editor, einsum, dims, value_type):
    """``permute(einsum(eq), dims)`` as one einsum with permuted output."""
    equation = einsum.op.defaults["equation"]
    if "." in equation or "->" not in equation:
        return None
    subscripts, output = parse_einsum(equation)
    if len(dims) != len(output):
        return None
    output = "".join(output[d] for d in dims)
    op = ops.EinsumOp(equation=",".join(subscripts) + "->" + output)
    return editor.emit(op, einsum.args, True, value_type)


@simplification(*_PROTOTYPE_OPS)
def _prototype(context, editor, operation, args, value_type):
    if operation.packed:
        return None
    return _earliest_prototype(editor, operation.op, args, value_type)


@simplification(ops.MulOp)
def _negation_folded_into_mul(context, editor, operation, args, value_type):
    if len(args) != 2:
        return None

    def fold(x, c, other):  # -x * c as x * -c
        return editor.emit(ops.mul, (x, editor.add_constant(-c)), False, value_type)

    return _fold_negation(editor, args, value_type, fold)


@simplification(ops.AddOp)
def _negation_folded_into_add(context, editor, operation, args, value_type):
    if len(args) != 2:
        return None

    def fold(x, c, other):  # -x + c as c - x
        return editor.emit(ops.sub, (other, x), False, value_type)

    return _fold_negation(editor, args, value_type, fold)


@simplification(*_UNITS)
def _unit(context, editor, operation, args, value_type):
    unit = _UNITS.get(type(operation.op))  # not subclasses: their units differ
    if unit is None or len(args) != 2:
        return None
    return _drop_unit(editor, unit, args, value_type)


@simplification(ops.EinsumOp)
def _einsum_of_permutes(context, editor, operation, args, value_type):
    return _fold_permutes_into_einsum(editor, operation, args, value_type)


@simplification(ops.SumOp)
def _dot_product(context, editor, operation, args, value_type):
    if len(args) != 1 or not context.read_once(operation.args[0]):
        return None
    return dot_products(editor, operation.op, args[0], value_type)  # sum(x * y, -1)


@simplification(*ROW_REDUCTIONS)
def _row_reduction(context, editor, operation, args, value_type):
    if len(args) != 1:
        return None
    read_once = context.read_once(operation.args[0])
    return row_reduction(editor, operation.op, args, value_type, read_once)


def _shape(value_type):
    return value_type.shape if value_type is not None else None
