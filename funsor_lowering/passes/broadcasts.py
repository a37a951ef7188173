"""Expands moved past the operations they feed.

funsor broadcasts a Gaussian's parameters over sample or batch inputs with
``expand`` before its algebra, so a program may factorize the same matrix
once per particle, and an ``expand`` (``np.broadcast_to``: 2-4 us on
numpy) feeds operations that broadcast by themselves.
:func:`defer_expands` rewrites, for an argument ``expand(x)``:

- an operation that broadcasts its operands (elementwise binary ops,
  ``matmul``, triangular solves, ``vecdot``) to take ``x`` where the result keeps
  its shape; where the result gets smaller, it is computed on the smaller
  operands and expanded;
- an operation acting on each matrix or element of a batch alone
  (elementwise unary ops, ``cholesky``, ``transpose`` of trailing dims,
  ``getslice`` keeping the expanded dims whole) to run on ``x``, then
  expand.

Each keeps results equal: broadcasting commutes with these operations.

Example::

    >>> import numpy as np
    >>> from funsor import ops
    >>> from funsor_lowering.ir.program import OpProgram, Operation, ValueType
    >>> p = OpProgram(
    ...     [],
    ...     {"x": ValueType((2, 2), "real"), "y": ValueType((4, 2, 2), "real")},
    ...     [Operation(ops.ExpandOp(shape=(4, 2, 2)), (0,)),
    ...      Operation(ops.cholesky, (2,)),
    ...      Operation(ops.matmul, (3, 1))],
    ...     4,
    ...     value_types=[ValueType((4, 2, 2), "real")] * 3,
    ... )
    >>> from funsor_lowering.passes.dead_code import eliminate_dead_code
    >>> print(eliminate_dead_code(defer_expands(p).program).program)
    OpProgram(x: real[2,2], y: real[4,2,2]) on numpy:
      cholesky: real[2,2] = cholesky(x)
      matmul: real[4,2,2] = matmul(cholesky, y)
      return matmul
"""

import typing

from funsor import ops

from ..ir.editor import rewrite
from ..ir.program import ValueType
from ..ops.extra_ops import TriangularSolveVectorsOp, TupleItemOp, VecdotOp, getslice_op
from ..ops.op_rules import OpRules
from ..ops.shapes import broadcast_shape
from .basic_index import expand_index, is_int, is_whole
from .vectorize import BINARY_ELEMENTWISE, UNARY_ELEMENTWISE


class CoreDims(typing.NamedTuple):
    """An op on the last dims of batches of matrices or vectors, which
    broadcasts the batch dims before them: each operand's number of core
    dims, and the result's core dims for operand ``shapes``."""

    ranks: tuple
    result: typing.Callable


CORE_DIMS = OpRules("core dims")
CORE_DIMS.register(ops.MatmulOp)(
    CoreDims((2, 2), lambda shapes: (shapes[0][-2], shapes[1][-1]))
)
CORE_DIMS.register(ops.TriangularSolveOp)(
    CoreDims((2, 2), lambda shapes: tuple(shapes[0][-2:]))
)
CORE_DIMS.register(TriangularSolveVectorsOp)(
    CoreDims((1, 2), lambda shapes: tuple(shapes[0][-1:]))
)
CORE_DIMS.register(VecdotOp)(CoreDims((1, 1), lambda shapes: ()))


def defer_expands(program):
    """The program with expands moved past the operations they feed (see
    the module's docstring)."""
    return rewrite(program, _rule)


def _source(editor, ref):
    """``x`` where ``ref`` is ``expand(x)`` (both typed), else ``None``."""
    producer = editor.producer(ref, ops.ExpandOp)
    if producer is None:
        return None
    (source,) = producer.args
    if editor.value_type(source) is None:
        return None
    return source


def _rule(editor, operation, args, value_type):
    if value_type is None or operation.packed:
        return None
    op = operation.op
    binary = isinstance(op, BINARY_ELEMENTWISE) or CORE_DIMS.rule(op) is not None
    if binary and len(args) == 2:
        return _broadcasting(editor, op, args, value_type)
    if len(args) != 1:
        return None
    if isinstance(op, TupleItemOp):
        return _qr_item(editor, op, args[0], value_type)
    past_expand = PAST_EXPAND.rule(op)
    source = _source(editor, args[0])
    if past_expand is None or source is None or editor.value_type(args[0]) is None:
        return None
    source_shape = editor.value_type(source).shape
    moved = past_expand(op, source_shape, editor.value_type(args[0]).shape)
    if moved is None:
        return None
    op, shape = moved
    return _then_expand(editor, op, (source,), shape, value_type)


def _qr_item(editor, op, qr, value_type):
    """``tuple_item(qr(expand(x)), k)`` as ``tuple_item(qr(x), k)`` expanded
    (equal ``qr(x)`` s computed once by common subexpression elimination)."""
    producer = editor.producer(qr, ops.QrOp)
    if producer is None:
        return None
    (matrix,) = producer.args
    source = _source(editor, matrix)
    if source is None or producer.op.defaults["mode"] != "reduced":
        return None
    source_shape = editor.value_type(source).shape
    matrix_shape = editor.value_type(matrix).shape
    if len(source_shape) < 2 or source_shape[-2:] != matrix_shape[-2:]:
        return None  # the expand broadcast the matrix dims
    item_shape = source_shape[:-2] + value_type.shape[-2:]
    qr_source = editor.emit(producer.op, (source,), False, None)
    return _then_expand(editor, op, (qr_source,), item_shape, value_type)


def _then_expand(editor, op, args, shape, value_type):
    """``op(*args)`` of result ``shape``, expanded to ``value_type``."""
    result = editor.emit(op, args, False, ValueType(shape, value_type.kind))
    if tuple(shape) == value_type.shape:
        return result
    expand = ops.ExpandOp(shape=value_type.shape)
    return editor.emit(expand, (result,), False, value_type)


def _broadcasting(editor, op, args, value_type):
    sources = [_source(editor, a) for a in args]
    if all(s is None for s in sources):
        return None
    types = [editor.value_type(a) for a in args]
    if any(t is None for t in types):
        return None
    core_dims = CORE_DIMS.rule(op)
    cores = core_dims.ranks if core_dims else (0, 0)
    smaller = list(args)
    for k, source in enumerate(sources):
        if source is None:
            continue
        source_shape = editor.value_type(source).shape
        core = cores[k]
        if core and (
            len(source_shape) < core or source_shape[-core:] != types[k].shape[-core:]
        ):
            continue  # core dims must stay (no broadcasting there)
        smaller[k] = source
    if smaller == list(args):
        return None
    shapes = [editor.value_type(a).shape for a in smaller]
    if any(len(s) < core for s, core in zip(shapes, cores)):
        return None
    batch = broadcast_shape(*(s[: len(s) - core] for s, core in zip(shapes, cores)))
    shape = batch + (core_dims.result(shapes) if core_dims else ())
    return _then_expand(editor, op, smaller, shape, value_type)


def _from_end(dim, rank):
    return dim - rank if dim >= 0 else dim


# How a unary op applies to ``x`` instead of ``expand(x)`` (where it commutes
# with the expand): ``rule(op, source, expanded) -> (op, shape)``, the op to
# apply to ``x`` (of shape ``source``) and its result's shape, which then
# expands as ``op(expand(x))`` (``expand(x)`` of shape ``expanded``); or
# ``None`` where it does not commute.
PAST_EXPAND = OpRules("ops past expands")


@PAST_EXPAND.register(*UNARY_ELEMENTWISE)
def _elementwise_past_expand(op, source, expanded):
    return op, source


@PAST_EXPAND.register(ops.CholeskyOp)
def _cholesky_past_expand(op, source, expanded):
    if len(source) >= 2 and source[-2:] == expanded[-2:]:
        return op, source
    return None


@PAST_EXPAND.register(ops.TransposeOp)
def _transpose_past_expand(op, source, expanded):
    rank = len(expanded)
    dims = [_from_end(op.defaults[a], rank) for a in ("axis1", "axis2")]
    if not all(-len(source) <= d < 0 for d in dims):
        return None
    shape = list(source)
    shape[dims[0]], shape[dims[1]] = shape[dims[1]], shape[dims[0]]
    return ops.TransposeOp(axis1=dims[0], axis2=dims[1]), tuple(shape)


@PAST_EXPAND.register(ops.GetsliceOp)
def _getslice_past_expand(op, source, expanded):
    found = _getslice_on_source(op.defaults["index"], source, expanded)
    if found is None:
        return None
    shape, source_index = found
    return getslice_op(source_index), shape


def _getslice_on_source(index, source, expanded):
    """``(shape, source index)`` computing ``expand(x)[index]`` as
    ``x[source index]`` then expanded, where ``index`` (basic, no new
    axes) takes the new leading dims whole or one entry of each, and the
    broadcast dims whole or one entry."""
    parts = expand_index(index, len(expanded))
    if parts is None or any(p is None for p in parts):
        return None
    lead = len(expanded) - len(source)
    if not all(is_int(p) or is_whole(p, n) for p, n in zip(parts, expanded[:lead])):
        return None
    shape, source_index = [], []
    for p, size, full in zip(parts[lead:], source, expanded[lead:]):
        broadcast = size != full
        if is_int(p):
            if not -full <= p < full:
                return None
            source_index.append(0 if broadcast else p)
            continue
        if broadcast and not is_whole(p, full):
            return None
        source_index.append(p)
        shape.append(len(range(*p.indices(size))))
    return tuple(shape), tuple(source_index)


__all__ = ["defer_expands"]
