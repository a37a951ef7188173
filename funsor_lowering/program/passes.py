"""Program passes: each takes an :class:`~funsor_lowering.OpProgram` and
returns a :class:`PassResult`: an equivalent program (same inputs, same
outputs on every input) and whether it changed. They edit programs through
:class:`~funsor_lowering.program.editor.Editor`.

- :func:`fold_constants`: operations on constants only are computed now
  (never random ops, and never into constants much larger than their inputs);
- :func:`simplify`: ``unsqueeze`` as ``reshape``; identity ``permute`` /
  ``reshape`` / ``expand``, chains
  of ``reshape`` s, of ``expand`` s or of ``getslice`` s as one, ``x + 0``,
  ``x * 1`` and the other units of associative ops (Python-number units only,
  which cannot change a result's dtype), ``-(-x)``, ``-x * c`` and
  ``-x + c`` (for a number ``c``), ``permute(permute(x))``,
  ``permute`` s folded into the ``einsum`` s they feed or follow,
  reductions of column broadcasts as reductions of row broadcasts and
  transposes of slices as slices of one transpose
  (:mod:`~funsor_lowering.program.row_broadcasts`), gathers
  at evenly spaced constant positions as strided slices,
  slices and concatenations of slices as fewer operations
  (:mod:`~funsor_lowering.program.cat_slices`), slices and gathers of
  large concatenations from their parts, zero blocks merged
  (:mod:`~funsor_lowering.program.cat_parts`), basic slices in one
  canonical spelling (so equal slices are equal operations), products with
  the factors of a QR written with its matrix
  (:mod:`~funsor_lowering.program.qr_algebra`) and with a Cholesky factor
  written with its matrix or solve
  (:mod:`~funsor_lowering.program.cholesky_algebra`), matrix products and
  triangular solves of vectors without unit axes and ``sum(x * y, -1)`` as
  ``vecdot`` (:mod:`~funsor_lowering.program.vector_products`), and draws' prototypes
  (read for dtype and device only) taken from the earliest value of the
  same dtype;
- :func:`~funsor_lowering.program.broadcasts.defer_expands`: ``expand`` s
  moved past the operations they feed, or dropped where those broadcast;
- :func:`einsums_as_matmuls`: two-operand einsums that are (batched)
  matrix or vector products run as ``matmul``;
- :func:`eliminate_common_subexpressions`: equal operations on equal values
  compute once (never random ops);
- :func:`eliminate_dead_code`: operations and constants no output needs go.

:func:`optimize` runs them, after ``vectorize`` (first round only), to a
fixed point; compiled and traced programs get it by default.

Example::

    >>> import numpy as np
    >>> from funsor import ops
    >>> from funsor.domains import Reals
    >>> from funsor_lowering.program import OpProgram, Operation, ValueType
    >>> p = OpProgram(
    ...     [0.0],
    ...     {"x": Reals[2]},
    ...     [Operation(ops.exp, (1,)), Operation(ops.exp, (1,)),
    ...      Operation(ops.add, (2, 0)), Operation(ops.mul, (3, 4))],
    ...     5,
    ...     value_types=[ValueType((2,), "real")] * 4,
    ... )
    >>> print(optimize(p))
    OpProgram(x: real[2]) on numpy:
      exp: real[2] = exp(x)
      mul: real[2] = mul(exp, exp)
      return mul
"""

import math
import numbers

import numpy as np
from funsor import ops

from ..backends import array_backend
from ..extra_ops import RANDOM_OP_TYPES, RandnWithKeyOp, TupleItemOp, getslice_op
from ..shapes import broadcast_shape, permutation_dims
from ..structure import iter_leaves
from .basic_index import (
    canonical_index,
    compose_indices,
    keeps_order,
    takes_all,
)
from .broadcasts import defer_expands
from .cat_parts import merge_zero_parts, slice_of_cat_parts, slice_of_zeros
from .cat_slices import cat_simplifier, slice_of_cat
from .cholesky_algebra import cholesky_identities
from .editor import Editor, PassResult, Ref, pass_result, rewrite
from .ir import ValueType
from .qr_algebra import is_qr, qr_identities, qr_projections
from .row_broadcasts import ROW_REDUCTIONS, row_reduction, swap_of_slice
from .vector_products import dot_products, vector_solve, without_unit_axis
from .vectorize import vectorize

# Largest constant folding may create, in elements, unless its inputs are
# as large (expanding a constant is cheaper at run time than storing it).
FOLD_LIMIT = 4096


def is_random(op):
    return isinstance(op, RANDOM_OP_TYPES)


# ------------------------------------------------------------- constant folding
def fold_constants(program):
    """Compute operations whose arguments are all constants (not random
    ones, none requiring grad), unless the result would be much larger
    than its inputs."""
    backend = array_backend(program.backend)

    def rule(editor, operation, args, value_type):
        values = [editor.constant_value(a) for a in args]
        if is_random(operation.op) or any(v is None for v in values):
            return None
        if any(map(backend.requires_grad, values)):
            return None  # computed on each call, as autograd needs
        if value_type is not None:
            size = math.prod(value_type.shape)
            inputs = sum(_size(v) for v in values)
            if size > max(FOLD_LIMIT, inputs):
                return None
        op = operation.op
        result = op(tuple(values)) if operation.packed else op(*values)
        if not (backend.is_array(result) or isinstance(result, numbers.Number)):
            return None
        return editor.add_constant(backend.as_traceable(result))

    return rewrite(program, rule)


def _size(value):
    shape = getattr(value, "shape", ())
    return math.prod(shape)


# ------------------------------------------------------------------ simplify
# Associative ops and their units, as Python numbers.
_UNITS = {
    ops.AddOp: 0,
    ops.MulOp: 1,
    ops.LogaddexpOp: -math.inf,
    ops.MaxOp: -math.inf,
    ops.MinOp: math.inf,
}


def simplify(program):
    """Algebraic simplification: identity layout ops, units of associative
    ops, double negation, composed permutes and transposes, permutes folded
    into einsums, slices of concatenations and gathers, strided
    gathers as slices, selections from large concatenations' parts,
    canonical slices, QR and Cholesky identities, vector products and
    solves, earlier prototypes (see the module docstring)."""
    uses = _use_counts(program)
    simplify_cat, slice_of_gather, gather_as_slice = cat_simplifier(program)

    def rule(editor, operation, args, value_type):
        op = operation.op
        if isinstance(op, ops.CatOp) and operation.packed:
            simpler = merge_zero_parts(editor, op, args, value_type)
            if simpler is None:
                simpler = simplify_cat(editor, op, args, value_type)
            return simpler
        shape = value_type.shape if value_type is not None else None
        if isinstance(op, (ops.PermuteOp, ops.TransposeOp)):
            dims = permutation_dims(op, shape)
            if dims is None:
                return None
            if dims == tuple(range(len(dims))):
                return args[0]
            inner = editor.producer(args[0])
            if inner is not None and isinstance(
                inner.op, (ops.PermuteOp, ops.TransposeOp)
            ):
                inner_dims = permutation_dims(inner.op, dims)
                composed = tuple(inner_dims[d] for d in dims)
                if composed == tuple(range(len(composed))):
                    return inner.args[0]
                return editor.emit(
                    ops.PermuteOp(dims=composed), inner.args, False, value_type
                )
            if (
                isinstance(op, ops.PermuteOp)
                and inner is not None
                and isinstance(inner.op, ops.EinsumOp)
            ):
                # only an einsum nothing else reads (else it would run twice)
                if uses.get(operation.args[0], 0) == 1:
                    return _permute_einsum_output(editor, inner, dims, value_type)
            rank = len(dims)
            if dims == (*range(rank - 2), rank - 1, rank - 2):
                return swap_of_slice(editor, args, value_type)
            return None
        if isinstance(op, ops.UnsqueezeOp) and shape is not None:
            # a reshape (a method call; numpy's expand_dims takes ~2 us)
            # that chains of reshapes then merge with
            return editor.emit(ops.ReshapeOp(shape=shape), args, False, value_type)
        if isinstance(op, (ops.ReshapeOp, ops.ExpandOp)):
            arg_type = editor.value_type(args[0])
            if shape is not None and arg_type is not None and arg_type.shape == shape:
                return args[0]
            inner = editor.producer(args[0])
            if inner is not None and type(inner.op) is type(op):
                # reshape(reshape(x)) is a reshape of x; an expand of an
                # expand of x is an expand of x (broadcasting composes)
                return editor.emit(op, inner.args, False, value_type)
            if isinstance(op, ops.ReshapeOp) and _is_squeeze(editor, inner):
                # a reshape of x with size-1 dims dropped is a reshape of x
                return editor.emit(op, inner.args, False, value_type)
            if isinstance(op, ops.ReshapeOp) and uses.get(operation.args[0], 0) == 1:
                # (v[..., None, :] @ m)[..., 0, :] as v @ m, and solves of
                # v[..., None] as solves of v
                simpler = without_unit_axis(editor, args[0], value_type)
                if simpler is None:
                    x = _solved_columns(program, operation.args[0])
                    read_once = x is not None and uses.get(x, 0) == 1
                    simpler = vector_solve(editor, args[0], value_type, read_once)
                return simpler
            return None
        if isinstance(op, ops.GetsliceOp):
            index = op.defaults["index"]
            source = editor.value_type(args[0])
            if source is not None and takes_all(index, source.shape):
                return args[0]
            in_order = source is not None and keeps_order(index, source.shape)
            if in_order and uses.get(operation.args[0], 0) == 1:
                simpler = without_unit_axis(editor, args[0], value_type)
                if simpler is not None:  # (v[..., None, :] @ m)[..., 0, :]
                    return simpler
            inner = editor.producer(args[0])
            simpler = None
            if inner is not None and isinstance(inner.op, ops.CatOp) and inner.packed:
                simpler = slice_of_cat(editor, index, inner, value_type)
                if simpler is None:
                    simpler = slice_of_cat_parts(editor, index, inner, value_type)
            elif inner is not None and isinstance(inner.op, ops.NewZerosOp):
                if not inner.packed:
                    simpler = slice_of_zeros(editor, inner, value_type)
            elif inner is not None and isinstance(inner.op, ops.GetitemOp):
                simpler = slice_of_gather(editor, index, inner, value_type)
            if inner is None or not isinstance(inner.op, ops.GetsliceOp):
                if simpler is not None or source is None:
                    return simpler
                if in_order and value_type is not None:
                    # adding or dropping unit axes is a reshape: one spelling
                    # (equal to reshapes of the same value), a cheap call
                    op = ops.ReshapeOp(shape=value_type.shape)
                    return editor.emit(op, args, False, value_type)
                canonical = canonical_index(index, source.shape)
                if canonical is None or canonical == index:
                    return None
                # one spelling per selection: equal slices become one value
                return editor.emit(getslice_op(canonical), args, False, value_type)
            source = editor.value_type(inner.args[0])
            if source is None:
                return None
            index = compose_indices(
                inner.op.defaults["index"], op.defaults["index"], source.shape
            )
            if index is None:
                return None
            if takes_all(index, source.shape):
                return inner.args[0]
            index = canonical_index(index, source.shape) or index  # one spelling
            return editor.emit(getslice_op(index), inner.args, False, value_type)
        if isinstance(op, ops.GetitemOp) and len(args) == 2:
            return gather_as_slice(editor, op, args, value_type)
        if isinstance(op, ops.NegOp):
            inner = editor.producer(args[0])
            if inner is not None and isinstance(inner.op, ops.NegOp):
                return inner.args[0]
            return None
        if isinstance(op, ops.MatmulOp) and len(args) == 2:
            simpler = qr_identities(editor, args, value_type)
            if simpler is None:
                simpler = cholesky_identities(editor, args, value_type)
            return simpler
        if isinstance(op, _PROTOTYPE_OPS) and not operation.packed:
            return _earliest_prototype(editor, op, args, value_type)
        if isinstance(op, (ops.MulOp, ops.AddOp)) and len(args) == 2:
            folded = _fold_negation(editor, op, args, value_type)
            if folded is not None:
                return folded
        if type(op) in _UNITS and len(args) == 2:
            return _drop_unit(editor, _UNITS[type(op)], args, value_type)
        if isinstance(op, ops.EinsumOp):
            return _fold_permutes_into_einsum(editor, operation, args, value_type)
        if isinstance(op, ops.SumOp) and len(args) == 1:
            if uses.get(operation.args[0], 0) == 1:
                simpler = dot_products(editor, op, args[0], value_type)
                if simpler is not None:  # sum(x * y, -1) as vecdot(x, y)
                    return simpler
        if isinstance(op, ROW_REDUCTIONS) and len(args) == 1:
            read_once = uses.get(operation.args[0], 0) == 1
            return row_reduction(editor, op, args, value_type, read_once)
        return None

    return rewrite(program, rule)


def _is_squeeze(editor, operation):
    """Whether ``operation`` is a getslice that only drops size-1 dims (so
    it keeps its argument's elements in order)."""
    if operation is None or not isinstance(operation.op, ops.GetsliceOp):
        return False
    source = editor.value_type(operation.args[0])
    index = operation.op.defaults["index"]
    return source is not None and keeps_order(index, source.shape)


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
    first = earlier = args[0]
    while True:
        producer = editor.producer(earlier)
        if producer is None or not producer.args:
            break
        source = producer.args[0]
        if isinstance(producer.op, _DTYPE_KEEPING_OPS) or (
            # torch's matmul takes operands of one dtype only
            isinstance(producer.op, ops.MatmulOp) and editor.backend == "torch"
        ):
            earlier = source
        elif isinstance(producer.op, TupleItemOp) and is_qr(editor, source):
            earlier = editor.producer(source).args[0]
        else:
            break
    if earlier is first:
        return None
    return editor.emit(op, [earlier, *args[1:]], False, value_type)


def _fold_negation(editor, op, args, value_type):
    """``-x * c`` is ``x * -c`` and ``-x + c`` is ``c - x`` for a Python
    number ``c`` and real ``x`` (one op where there were two; integers may
    be unsigned, where negation wraps)."""
    if value_type is None or value_type.kind != "real":
        return None
    for negated, other in ((args[0], args[1]), (args[1], args[0])):
        inner = editor.producer(negated)
        if inner is None or not isinstance(inner.op, ops.NegOp):
            continue
        c = editor.constant_value(other)
        if isinstance(c, bool) or not isinstance(c, (int, float)):
            continue
        (x,) = inner.args
        if editor.value_type(x) != value_type:
            continue
        if isinstance(op, ops.MulOp):
            return editor.emit(ops.mul, (x, editor.add_constant(-c)), False, value_type)
        return editor.emit(ops.sub, (other, x), False, value_type)
    return None


def _parse_einsum(equation):
    inputs, output = equation.split("->")
    return inputs.split(","), output


def _fold_permutes_into_einsum(editor, operation, args, value_type):
    """``einsum(eq, permute(x, dims), ...)`` reads ``x`` directly, with the
    operand's subscripts permuted back."""
    equation = operation.op.defaults["equation"]
    if "." in equation or "->" not in equation:
        return None
    subscripts, output = _parse_einsum(equation)
    changed = False
    new_args = list(args)
    for n, arg in enumerate(args):
        inner = editor.producer(arg)
        if inner is None or not isinstance(inner.op, ops.PermuteOp):
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
    subscripts, output = _parse_einsum(equation)
    if len(dims) != len(output):
        return None
    output = "".join(output[d] for d in dims)
    op = ops.EinsumOp(equation=",".join(subscripts) + "->" + output)
    return editor.emit(op, einsum.args, True, value_type)


# ------------------------------------------------------------------ matmuls
def einsums_as_matmuls(program):
    """Two-operand ``einsum`` s that are (batched) matrix or vector products
    become ``matmul`` s: one backend call where an ``einsum`` parses its
    equation and plans on every call (3x slower on numpy and torch, 15x on
    jax without jit). Vector operands with batch axes get a unit axis by
    ``reshape`` (and the result loses it)."""

    def rule(editor, operation, args, value_type):
        if not (isinstance(operation.op, ops.EinsumOp) and len(args) == 2):
            return None
        types = [editor.value_type(a) for a in args]
        if value_type is None or None in types:
            return None
        plan = _matmul_plan(operation.op.defaults["equation"], types)
        if plan is None:
            return None
        # 1-d vectors are matmul's own; vectors with batch axes are not
        vectors = [v and len(t.shape) > 1 for v, t in zip(plan, types)]
        return emit_matmul(editor, args, types, vectors, value_type)

    return rewrite(program, rule)


def emit_matmul(editor, args, types, vectors, value_type):
    """Emit ``args[0] @ args[1]`` of result type ``value_type``, where an
    operand marked in ``vectors`` is a (batched) vector: it becomes a row
    (left) or column (right) matrix, and the product loses that unit axis."""
    operands = []
    for position, (arg, t, vector) in enumerate(zip(args, types, vectors)):
        if vector:
            n = t.shape[-1]
            shape = t.shape[:-1] + ((1, n) if position == 0 else (n, 1))
            arg = editor.emit(
                ops.ReshapeOp(shape=shape), (arg,), False, ValueType(shape, t.kind)
            )
        operands.append(arg)
    if not any(vectors):
        return editor.emit(ops.matmul, operands, False, value_type)
    a, b = (editor.value_type(o).shape for o in operands)
    shape = broadcast_shape(a[:-2], b[:-2]) + (a[-2], b[-1])
    product = editor.emit(
        ops.matmul, operands, False, ValueType(shape, value_type.kind)
    )
    return editor.emit(
        ops.ReshapeOp(shape=value_type.shape), (product,), False, value_type
    )


def _matmul_plan(equation, types):
    """For an einsum ``batch+left+k, batch+k+right -> batch+left+right``
    (``left``, ``right``: one letter or none; batch: ``...`` or letters of
    equal sizes), per operand whether it is a vector (no ``left`` or
    ``right`` letter); ``None`` where the einsum is no such product."""
    if "->" not in equation or equation.count(",") != 1:
        return None
    (a, b), out = _parse_einsum(equation)
    batch = ""
    if a.startswith("...") and b.startswith("...") and out.startswith("..."):
        a, b, out, batch = a[3:], b[3:], out[3:], "..."
    elif "." in equation:
        return None
    else:  # explicit batch letters: a common prefix of all three
        while a and b and out and a[0] == b[0] == out[0]:
            batch, a, b, out = batch + a[0], a[1:], b[1:], out[1:]
        sizes = [t.shape[: len(batch)] for t in types]
        if batch and sizes[0] != sizes[1]:
            return None
    if not a or not b or len(set(a)) < len(a) or len(set(b)) < len(b):
        return None
    k, left, right = a[-1], a[:-1], b[1:]
    if b[0] != k or k in out or out != left + right:
        return None
    if len(left) > 1 or len(right) > 1 or (left and left == right):
        return None
    return not left, not right


# ------------------------------------------------------------------------ CSE
def eliminate_common_subexpressions(program):
    """Equal (non-random) operations on equal arguments compute once; equal
    constants (by value: index arrays that several gathers build alike)
    are one argument."""
    seen = {}
    first_equal = _first_equal_constants(program)

    def rule(editor, operation, args, value_type):
        if is_random(operation.op):
            return None
        same = tuple(first_equal.get(a, a) for a in args)
        key = (operation.op, same, operation.packed)
        if key in seen:
            return seen[key]
        if same != tuple(args):
            ref = editor.emit(operation.op, same, operation.packed, value_type)
            seen[key] = ref
            return ref
        seen[key] = Ref("o", len(editor.operations))  # the one emitted next
        return None

    return rewrite(program, rule)


# Constants compared by value up to this many elements (larger ones are
# data, compared by identity).
_COMPARED_CONSTANT_SIZE = 1 << 16


def _first_equal_constants(program):
    """Constant ref -> the ref of the first constant equal to it (same type,
    dtype, shape and values), for constants that have an earlier equal."""
    first, equal = {}, {}
    for k, value in enumerate(program.constants):
        key = _constant_key(value)
        if key is None:
            continue
        ref = first.setdefault(key, Ref("c", k))
        if ref.k != k:
            equal[Ref("c", k)] = ref
    return equal


def _constant_key(value):
    if isinstance(value, (bool, int, float, complex, str)):
        return type(value), repr(value)  # repr tells -0.0 from 0.0
    try:
        array = np.asarray(value)
    except Exception:  # noqa: BLE001 - not an array (or one needing grad)
        return None
    if array.dtype == object or array.size > _COMPARED_CONSTANT_SIZE:
        return None
    return type(value), array.dtype.str, array.shape, array.tobytes()


# ------------------------------------------------------------------------ DCE
def eliminate_dead_code(program):
    """Drop operations and constants that no output depends on."""
    editor = Editor.of(program)
    output = editor.copy_operations(program)
    live = editor.live(output)
    values = len(program.constants) + len(program.operations)
    if sum(ref.kind != "i" for ref in live) == values:
        return PassResult(program, False)  # every value is live
    return pass_result(program, editor.finish(output, live))


# ------------------------------------------------------------------- pipeline
PASSES = (
    vectorize,
    fold_constants,
    simplify,
    defer_expands,
    einsums_as_matmuls,
    eliminate_common_subexpressions,
    eliminate_dead_code,
)


# Passes run in the first round only: ``vectorize`` batches every level of
# a program at once, and rebuilding a large program it cannot batch again
# each round costs more than the other passes together.
FIRST_ROUND_ONLY = (vectorize,)


# Passes run once, after the others: they write ops the others know nothing
# of (``qr_projections`` a QR whose factors the identities no longer read).
FINAL_PASSES = (qr_projections,)


def optimize(program, passes=PASSES, max_rounds=4, final_passes=FINAL_PASSES):
    """Run ``passes`` in order until none changes the program, then
    ``final_passes`` once each. A pass is not run again on the very program
    it last left unchanged (passes are deterministic: it would leave it
    unchanged again)."""
    left_unchanged = {}  # pass -> the program it last left unchanged
    for round_ in range(max_rounds):
        modified = False
        for run_pass in passes:
            if round_ and run_pass in FIRST_ROUND_ONLY:
                continue
            if left_unchanged.get(run_pass) is program:
                continue
            program, changed = run_pass(program)
            if changed:
                modified = True
            else:
                left_unchanged[run_pass] = program
        if not modified:
            break
    for run_pass in final_passes:
        program = run_pass(program).program
    return program


__all__ = [
    "PassResult",
    "eliminate_common_subexpressions",
    "einsums_as_matmuls",
    "eliminate_dead_code",
    "fold_constants",
    "optimize",
    "simplify",
]
