"""Identities of a QR factorization ``M = Q R`` (``Q`` with orthonormal
columns) that let a program use ``M`` where funsor's Gaussians go through
the factors:

- ``R^T R = M^T M``: funsor forms this Gram matrix from a QR to factor it
  by Cholesky; written from ``M`` it is the product the forward pass
  already formed, so common subexpression elimination shares it and its
  Cholesky factor.
- ``R^T (Q^T y) = M^T y``: backward sampling projects the white noise
  vector on ``Q`` only to multiply it by ``R^T`` again.

Once nothing else reads the factors, the QR (the costliest op of an
AutoGaussian guide) is dead code.

Example::

    >>> import numpy as np
    >>> from funsor import ops
    >>> from funsor_lowering import trace_function
    >>> def project(m, y):  # R^T (Q^T y)
    ...     q, r = ops.qr(m)
    ...     q_t, r_t = ops.transpose(q, -1, -2), ops.transpose(r, -1, -2)
    ...     return ops.matmul(r_t, ops.matmul(q_t, y))
    >>> print(trace_function(project, {"m": np.ones((5, 2)), "y": np.ones((5, 1))}))
    OpProgram(m: real[5,2], y: real[5,1]) on numpy:
      transpose: real[2,5] = transpose(m, axis1=-1, axis2=-2)
      matmul: real[2,1] = matmul(transpose, y)
      return matmul
"""

from funsor import ops

from ..extra_ops import TupleItemOp
from ..shapes import permutation_dims
from .ir import ValueType

SWAP_LAST_TWO = ops.TransposeOp(axis1=-1, axis2=-2)


def is_qr(editor, ref):
    """Whether ``ref`` is the ``(Q, R)`` pair of a QR whose ``Q`` has
    orthonormal columns."""
    producer = editor.producer(ref)
    return (
        producer is not None
        and isinstance(producer.op, ops.QrOp)
        and producer.op.defaults["mode"] in ("reduced", "complete")
    )


def qr_identities(editor, args, value_type):
    """``matmul(*args)`` written with ``M`` instead of the factors of
    ``qr(M)`` where one of the identities above applies, else ``None``."""
    left, right = args
    r = swapped(editor, left)
    pair = _factor_of(editor, r, 1)
    if pair is None:
        return None
    if right is r:  # R^T R
        return _transposed_times(editor, pair, right=None, value_type=value_type)
    y = _projected(editor, right, pair)
    if y is not None:  # R^T (Q^T y)
        return _transposed_times(editor, pair, right=y, value_type=value_type)
    return None


def _transposed_times(editor, pair, right, value_type):
    """``M^T @ right`` (``M^T @ M`` where ``right`` is ``None``) for the
    QR ``pair`` of ``M``."""
    (m,) = editor.producer(pair).args
    m_type = editor.value_type(m)
    if m_type is None:
        return None
    m_t_type = ValueType(_transposed(m_type.shape), m_type.kind)
    m_t = editor.emit(SWAP_LAST_TWO, [m], False, m_t_type)
    return editor.emit(
        ops.matmul, [m_t, m if right is None else right], False, value_type
    )


def _transposed(shape):
    """``shape`` with its last two axes swapped."""
    return shape[:-2] + shape[:-3:-1]


def swapped(editor, ref):
    """The value whose last two axes ``ref`` swaps, else ``None``."""
    producer = editor.producer(ref)
    if producer is None or not isinstance(
        producer.op, (ops.TransposeOp, ops.PermuteOp)
    ):
        return None
    value_type = editor.value_type(ref)
    rank = None if value_type is None else len(value_type.shape)
    if not rank or rank < 2:
        return None
    dims = permutation_dims(producer.op, value_type.shape)
    return producer.args[0] if dims == _transposed(tuple(range(rank))) else None


def _factor_of(editor, ref, index):
    """The QR pair whose factor ``index`` (0: Q, 1: R) ``ref`` is, else
    ``None``."""
    producer = None if ref is None else editor.producer(ref)
    if (
        producer is None
        or not isinstance(producer.op, TupleItemOp)
        or producer.op.defaults["index"] != index
        or not is_qr(editor, producer.args[0])
    ):
        return None
    return producer.args[0]


def _projected(editor, ref, pair):
    """``y`` where ``ref`` is ``Q^T y`` for the ``Q`` of QR ``pair``: a
    ``matmul(Q^T, y)``, a ``matmul(y, Q)`` of a vector ``y``, or a row
    ``matmul(u, Q)`` reshaped to a column (then ``y`` is ``u`` as a
    column, emitted); else ``None``."""
    producer = editor.producer(ref)
    if producer is None:
        return None
    if isinstance(producer.op, ops.MatmulOp) and len(producer.args) == 2:
        u, q = producer.args
        if _factor_of(editor, swapped(editor, u), 0) is pair:
            return q  # Q^T @ y
        u_type = editor.value_type(u)
        if u_type is not None and len(u_type.shape) == 1:
            if _factor_of(editor, q, 0) is pair:
                return u  # u @ Q, with u a vector: Q^T u
        return None
    if not isinstance(producer.op, ops.ReshapeOp):
        return None
    row = producer.args[0]
    product = editor.producer(row)
    column_type, row_type = editor.value_type(ref), editor.value_type(row)
    if (
        product is None
        or not isinstance(product.op, ops.MatmulOp)
        or len(product.args) != 2
        or _factor_of(editor, product.args[1], 0) is not pair
        or column_type is None
        or row_type is None
        or column_type.shape != _transposed(row_type.shape)
        or row_type.shape[-2:-1] != (1,)
    ):
        return None
    u = product.args[0]
    u_type = editor.value_type(u)
    if u_type is None or u_type.shape[-2:-1] != (1,):
        return None
    shape = _transposed(u_type.shape)
    return editor.emit(
        ops.ReshapeOp(shape=shape), [u], False, ValueType(shape, u_type.kind)
    )


__all__ = ["is_qr", "qr_identities", "swapped"]
