"""Vector-matrix products without unit axes.

funsor's Gaussians multiply batches of vectors by matrices as matrix
products with a unit axis (``(v[..., None, :] @ m)[..., 0, :]`` and
``(m @ v[..., None])[..., 0]``), and einsums lowered to ``matmul`` do the
same: three backend calls where, for a matrix ``m`` without batch axes,
one or two do: ``v @ m`` (matmul treats the rows of ``v`` as the vectors)
and ``v @ m^T``.

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

from .basic_index import keeps_order
from .ir import ValueType
from .qr_algebra import SWAP_LAST_TWO


def reshapes(editor, ref):
    """The value ``ref`` holds the elements of, in order (``ref`` is its
    ``reshape``, or a ``getslice`` that only adds or drops unit axes), else
    ``None``."""
    producer = editor.producer(ref)
    if producer is None or producer.packed:
        return None
    if isinstance(producer.op, ops.ReshapeOp):
        return producer.args[0]
    if isinstance(producer.op, ops.GetsliceOp):
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
    producer = editor.producer(product)
    if producer is None or not isinstance(producer.op, ops.MatmulOp):
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
