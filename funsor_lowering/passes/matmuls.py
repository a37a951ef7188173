"""The pass turning two-operand einsums that are (batched) matrix or vector
products into ``matmul`` s."""

from funsor import ops

from ..ir.editor import rewrite
from ..ir.program import ValueType
from ..ops.shapes import broadcast_shape
from .simplify import parse_einsum


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
