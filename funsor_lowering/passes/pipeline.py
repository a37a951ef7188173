"""Program passes: each takes an :class:`~funsor_lowering.OpProgram` and
returns a :class:`PassResult`: an equivalent program (same inputs, same
outputs on every input) and whether it changed. They edit programs through
:class:`~funsor_lowering.ir.editor.Editor`.

- :func:`fold_constants`: operations on constants only are computed now
  (never random ops, and never into constants much larger than their inputs);
- :func:`~funsor_lowering.passes.simplify.simplify`: algebraic
  identities, as rules registered per op type (see that module);
- :func:`~funsor_lowering.passes.broadcasts.defer_expands`: ``expand`` s
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
    >>> from funsor_lowering.ir.program import OpProgram, Operation, ValueType
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
from ..ir.editor import Editor, PassResult, Ref, pass_result, rewrite
from ..ir.program import ValueType
from ..ops.extra_ops import RANDOM_OP_TYPES
from ..ops.shapes import broadcast_shape
from .broadcasts import defer_expands
from .qr_algebra import qr_projections
from .simplify import parse_einsum, simplify
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
    (a, b), out = parse_einsum(equation)
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
