"""Identities of a Cholesky factor ``L = cholesky(G)`` (``G = L L^T``) that
let a program use ``G`` or a solve's right-hand side where funsor's
Gaussians go through the factor:

- ``L L^T = G``: a Gaussian whose square-root precision is a Cholesky
  factor (compressed by Cholesky, or triangularized for sampling) forms its
  precision ``L L^T`` again, often to factor it again; written as ``G``,
  common subexpression elimination shares ``G``'s factor;
- ``L (L^-1 u) = u``: its information vector ``P w`` where ``w`` was solved
  from ``u`` by the same factor.

Example::

    >>> import numpy as np
    >>> from funsor import ops
    >>> from funsor_lowering import trace_function
    >>> def refactor(g):  # cholesky(L L^T) is L
    ...     chol = ops.cholesky(g)
    ...     return ops.cholesky(ops.matmul(chol, ops.transpose(chol, -1, -2)))
    >>> print(trace_function(refactor, {"g": np.eye(2)}))
    OpProgram(g: real[2,2]) on numpy:
      cholesky: real[2,2] = cholesky(g)
      return cholesky
"""

from funsor import ops

from ..ops.extra_ops import TriangularSolveVectorsOp
from .qr_algebra import swapped
from .vector_products import reshapes

_SOLVES = (ops.TriangularSolveOp, TriangularSolveVectorsOp)


def cholesky_identities(editor, args, value_type):
    """``matmul(*args)`` written without the product by a Cholesky factor
    where one of the identities above applies, else ``None``."""
    left, right = args
    gram = _factored(editor, left)
    if gram is None or value_type is None:
        return None
    if swapped(editor, right) is left:  # L L^T
        return gram if editor.value_type(gram) == value_type else None
    solved = _solved_by(editor, _as_matrix(editor, right), left)
    if solved is None:
        return None
    if editor.value_type(solved) == value_type:  # L (L^-1 u)
        return solved
    return _as_vector(editor, solved, value_type)


def _factored(editor, ref):
    """``G`` where ``ref`` is ``cholesky(G)``, else ``None``."""
    producer = editor.producer(ref, ops.CholeskyOp)
    if producer is None:
        return None
    return producer.args[0]


def _solved_by(editor, ref, chol):
    """``u`` where ``ref`` is ``triangular_solve(u, chol)`` (``chol^-1 u``,
    ``chol`` lower triangular; or its ``triangular_solve_vectors``), else
    ``None``."""
    producer = None if ref is None else editor.producer(ref)
    if producer is None or not isinstance(producer.op, _SOLVES):
        return None
    u, factor = producer.args
    defaults = producer.op.defaults
    if factor is not chol or defaults["upper"] or defaults["transpose"]:
        return None
    return u


def _as_matrix(editor, ref):
    """The column ``m`` (shape ``(n, 1)``) where ``ref`` is the vector
    ``m[:, 0]`` (as a reshape or a slice), else ``ref``."""
    ref_type = editor.value_type(ref)
    if ref_type is None or len(ref_type.shape) != 1:
        return ref  # (a batched vector would be a matrix to matmul)
    m = reshapes(editor, ref)
    m_type = None if m is None else editor.value_type(m)
    if m_type is None or m_type.shape != ref_type.shape + (1,):
        return ref
    return m


def _as_vector(editor, column, value_type):
    """``column`` (shape ``(n, 1)``) as a vector of ``value_type``: the
    vector it reshapes, else the reshaped column."""
    column_type = editor.value_type(column)
    if column_type is None or column_type.shape != value_type.shape + (1,):
        return None
    vector = reshapes(editor, column)
    if vector is not None and editor.value_type(vector) == value_type:
        return vector
    squeeze = ops.ReshapeOp(shape=value_type.shape)
    return editor.emit(squeeze, (column,), False, value_type)


__all__ = ["cholesky_identities"]
