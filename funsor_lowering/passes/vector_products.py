"""Vector-matrix products and triangular solves without unit axes.

funsor's Gaussians multiply batches of vectors by matrices as matrix
products with a unit axis (``(v[..., None, :] @ m)[..., 0, :]`` and
``(m @ v[..., None])[..., 0]``), and einsums lowered to ``matmul`` do the
same: three backend calls where, for a matrix ``m`` without batch axes,
one or two do: ``v @ m`` (matmul treats the rows of ``v`` as the vectors)
and ``v @ m^T``. Their draws solve triangular systems for batches of
vectors the same way (``triangular_solve(v[..., None], l)[..., 0]``, also
of ``m @ v[..., None]``): one ``extra_ops.triangular_solve_vectors``.
Their squared norms and dot products, ``sum(x * y, -1)``, are one
``extra_ops.vecdot``.

Example::

    >>> import numpy as np
    >>> from funsor import ops
    >>> from funsor_lowering import trace_function
    >>> def rows_times(v, m):  # v: a batch of row vectors
    ...     return ops.matmul(v[:, None, :], m)[:, 0, :]
    >>> print(trace_function(rows_times, {"v": np.ones((4, 2)), "m": np.eye(2)}))
    OpProgram(v: real[4,2], m: real[2,2]) on numpy:
      matmul: real[4,2] = matmul(v, m)
      return matmul
"""

from funsor import ops

from ..ir.program import ValueType
from ..ops.extra_ops import TriangularSolveVectorsOp, vecdot
from .basic_index import keeps_order
from .qr_algebra import SWAP_LAST_TWO


def reshapes(editor, ref):
    """The value ``ref`` holds the elements of, in order (``ref`` is its
    ``reshape``, or a ``getslice`` that only adds or drops unit axes), else
    ``None``."""
    reshape = editor.producer(ref, ops.ReshapeOp)
    if reshape is not None:
        return None if reshape.packed else reshape.args[0]
    producer = editor.producer(ref, ops.GetsliceOp)
    if producer is None or producer.packed:
        return None
    source = editor.value_type(producer.args[0])
    index = producer.op.defaults["index"]
    if source is not None and keeps_order(index, source.shape):
        return producer.args[0]
    return None


def without_unit_axis(editor, product, value_type):
    """A product of type ``value_type`` equal to ``product`` (a ``matmul``
    of a unit-axis reshape of a batch of vectors and a matrix without
    batch axes) reshaped without its unit axis, as a product of the vectors
    themselves; else ``None``."""
    producer = editor.producer(product, ops.MatmulOp)
    if producer is None:
        return None
    if len(producer.args) != 2 or value_type is None:
        return None
    left, right = producer.args
    matrix = editor.value_type(right)
    if _is_matrix(matrix):  # rows: (v[..., None, :] @ m)[..., 0, :] is v @ m
        vectors = _vectors(editor, left, True, value_type, matrix.shape[1])
        if vectors is not None:
            return editor.emit(ops.matmul, (vectors, right), False, value_type)
    matrix = editor.value_type(left)
    if _is_matrix(matrix):  # columns: (m @ v[..., None])[..., 0] is v @ m^T
        vectors = _vectors(editor, right, False, value_type, matrix.shape[0])
        if vectors is not None:
            transposed_type = ValueType(matrix.shape[::-1], matrix.kind)
            transposed = editor.emit(SWAP_LAST_TWO, (left,), False, transposed_type)
            return editor.emit(ops.matmul, (vectors, transposed), False, value_type)
    return None


def vector_solve(editor, solution, value_type, x_read_once):
    """A ``triangular_solve_vectors`` of type ``value_type`` equal to
    ``solution`` (a ``triangular_solve`` of vectors as columns: of a
    unit-axis reshape of a batch of vectors, or, where ``x_read_once``, of
    their product ``m @ v[..., None]``) reshaped without its unit axis;
    else ``None``."""
    producer = editor.producer(solution, ops.TriangularSolveOp)
    if producer is None or producer.packed or value_type is None:
        return None
    if len(producer.args) != 2:
        return None
    x, y = producer.args
    x_type, solution_type = editor.value_type(x), editor.value_type(solution)
    if x_type is None or solution_type is None or len(x_type.shape) < 2:
        return None
    shape = tuple(solution_type.shape)
    if shape[-1] != 1 or x_type.shape[-1] != 1 or tuple(value_type.shape) != shape[:-1]:
        return None
    x_vectors = ValueType(tuple(x_type.shape[:-1]), x_type.kind)
    vectors = _vectors(editor, x, False, x_vectors, shape[-2])
    if vectors is None and x_read_once:
        vectors = without_unit_axis(editor, x, x_vectors)
    if vectors is None:
        return None
    solve = TriangularSolveVectorsOp(**producer.op.defaults)  # upper, transpose
    return editor.emit(solve, (vectors, y), False, value_type)


def dot_products(editor, op, summed, value_type):
    """``vecdot(x, y)`` of type ``value_type`` equal to ``op`` (a ``sum``)
    of ``summed``, where that is ``x * y`` summed over its last axis for
    real arrays ``x`` and ``y`` of equal last dims; else ``None``."""
    producer = editor.producer(summed, ops.MulOp)
    if producer is None or producer.packed or value_type is None:
        return None
    if len(producer.args) != 2:
        return None
    summed_type = editor.value_type(summed)
    if summed_type is None or not summed_type.shape or op.defaults["keepdims"]:
        return None
    axis, rank = op.defaults["axis"], len(summed_type.shape)
    if axis not in (-1, rank - 1, (-1,), (rank - 1,)):
        return None
    types = [editor.value_type(a) for a in producer.args]
    if any(t is None or t.kind != "real" or not t.shape for t in types):
        return None
    if types[0].shape[-1] != types[1].shape[-1]:
        return None  # (one broadcast along the summed axis)
    return editor.emit(vecdot, producer.args, False, value_type)


def _vectors(editor, operand, row, value_type, size):
    """The batch of vectors ``v`` (shape ``(*batch, n)``) that ``operand``
    holds as rows (``(*batch, 1, n)``) or columns (``(*batch, n, 1)``),
    where their products have ``size`` elements each and ``value_type``'s
    shape ``(*batch, size)``; else ``None``."""
    source = reshapes(editor, operand)
    operand_type = editor.value_type(operand)
    if source is None or operand_type is None or len(operand_type.shape) < 2:
        return None
    *batch, rows, columns = operand_type.shape
    if (rows, columns)[0 if row else 1] != 1:
        return None
    n = columns if row else rows
    if tuple(value_type.shape) != (*batch, size):
        return None
    source_type = editor.value_type(source)
    if source_type is None:
        return None
    shape = (*batch, n)
    if tuple(source_type.shape) == shape:
        return source
    vectors_type = ValueType(shape, source_type.kind)
    return editor.emit(ops.ReshapeOp(shape=shape), (source,), False, vectors_type)


def _is_matrix(value_type):
    return value_type is not None and len(value_type.shape) == 2
