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

from ..ir.editor import Editor, PassResult, pass_result
from ..ir.program import ValueType, array_backend
from ..ir.structure import iter_leaves, map_leaves
from ..ops.extra_ops import TupleItemOp, qr_project
from ..ops.shapes import permutation_dims

SWAP_LAST_TWO = ops.TransposeOp(axis1=-1, axis2=-2)


def is_qr(editor, ref):
    """Whether ``ref`` is the ``(Q, R)`` pair of a QR whose ``Q`` has
    orthonormal columns."""
    producer = editor.producer(ref, ops.QrOp)
    return producer is not None and producer.op.defaults["mode"] in (
        "reduced",
        "complete",
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
    producer = editor.producer(ref, ops.MatmulOp)
    if producer is not None:
        if len(producer.args) != 2:
            return None
        u, q = producer.args
        if _factor_of(editor, swapped(editor, u), 0) is pair:
            return q  # Q^T @ y
        u_type = editor.value_type(u)
        if u_type is not None and len(u_type.shape) == 1:
            if _factor_of(editor, q, 0) is pair:
                return u  # u @ Q, with u a vector: Q^T u
        return None
    reshape = editor.producer(ref, ops.ReshapeOp)
    if reshape is None:
        return None
    row = reshape.args[0]
    product = editor.producer(row, ops.MatmulOp)
    column_type, row_type = editor.value_type(ref), editor.value_type(row)
    if (
        product is None
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


def qr_projections(program):
    """The :class:`~.editor.PassResult` of writing, on jax, each reduced QR
    of a tall or square ``M`` whose ``Q`` only multiplies one value ``u``
    (``u @ Q``, what a Gaussian's compression or marginal reads of ``Q``) as
    ``qr_project(M, u)`` (a vector ``u`` as a row), which never forms ``Q``.
    (Under ``jax.jit`` forming ``Q`` takes two thirds of a small QR;
    numpy's and torch's QRs take about as long without it.) Run after the
    identities above, which may make a QR dead.
    """
    if not array_backend(program.backend).projects_qrs:
        return PassResult(program, False)
    plans = _projected_qrs(program)
    if not plans:
        return PassResult(program, False)
    editor = Editor.of(program)
    projections = _Projections(program, editor, plans)
    first = program.first_operation
    for k, operation in enumerate(program.operations):
        value = first + k
        if value in plans or value in projections.replaced:
            continue
        args = [projections.ref_of(a) for a in operation.args]
        editor.remap[value] = editor.emit(
            operation.op, args, operation.packed, program.value_types[value]
        )
    output = map_leaves(projections.ref_of, program.output)
    return pass_result(program, editor.finish(output))


class _Projections:
    """The values :func:`qr_projections` replaces, emitted where they are
    first read (``u`` may be computed after the QR, never after its first
    reader): a QR's ``R`` and ``u @ Q`` as the items of one
    ``qr_project``."""

    def __init__(self, program, editor, plans):
        self.program, self.editor, self.plans = program, editor, plans
        self.types = program.value_types
        self.replaced = {}  # value -> (QR value, item of qr_project)
        for qr_value, (_, r_items, q_items, products) in plans.items():
            self.replaced.update({v: (qr_value, 0) for v in r_items})
            self.replaced.update({v: (qr_value, 1) for v in products})
            self.replaced.update({v: (qr_value, None) for v in q_items})
        self.projections = {}  # QR value -> the ref of its qr_project

    def ref_of(self, value):
        editor, types = self.editor, self.types
        if value in editor.remap:
            return editor.remap[value]
        qr_value, index = self.replaced[value]
        vector = len(types[self.plans[qr_value][0]].shape) == 1  # u as a row
        item_type = types[value]
        if index == 1 and vector:  # the product as a row
            item_type = ValueType(
                item_type.shape[:-1] + (1,) + item_type.shape[-1:], item_type.kind
            )
        item = TupleItemOp(index=index)
        ref = editor.emit(item, [self._projection(qr_value)], False, item_type)
        if item_type is not types[value]:
            reshape = ops.ReshapeOp(shape=types[value].shape)
            ref = editor.emit(reshape, [ref], False, types[value])
        editor.remap[value] = ref
        return ref

    def _projection(self, qr_value):
        """The ref of the ``qr_project`` replacing QR ``qr_value``."""
        if qr_value not in self.projections:
            u = self.plans[qr_value][0]
            first = self.program.first_operation
            m = self.ref_of(self.program.operations[qr_value - first].args[0])
            rows = self.ref_of(u)
            if len(self.types[u].shape) == 1:  # u @ Q of a vector u, as a row
                row_type = ValueType((1,) + self.types[u].shape, self.types[u].kind)
                reshape = ops.ReshapeOp(shape=row_type.shape)
                rows = self.editor.emit(reshape, [rows], False, row_type)
            self.projections[qr_value] = self.editor.emit(
                qr_project, [m, rows], False, None
            )
        return self.projections[qr_value]


def _projected_qrs(program):
    """``{qr value: (u, R items, Q items, products)}`` for the QRs
    :func:`qr_projections` rewrites (values numbered as in ``program``)."""
    first = program.first_operation
    types = program.value_types
    readers = {}
    for k, operation in enumerate(program.operations):
        for a in set(operation.args):
            readers.setdefault(a, []).append(first + k)
    outputs = set(iter_leaves(program.output))
    plans = {}
    for k, operation in enumerate(program.operations):
        value = first + k
        if not (
            isinstance(operation.op, ops.QrOp)
            and operation.op.defaults["mode"] == "reduced"
            and value not in outputs
        ):
            continue
        m_type = types[operation.args[0]]
        if m_type is None or len(m_type.shape) < 2:
            continue
        rows, cols = m_type.shape[-2:]
        if rows < cols:
            continue
        items = [(v, program.operations[v - first]) for v in readers.get(value, ())]
        if not all(isinstance(item.op, TupleItemOp) for _, item in items):
            continue
        r_items = [v for v, item in items if item.op.defaults["index"] == 1]
        q_items = [v for v, item in items if item.op.defaults["index"] == 0]
        products, users = [], set()
        for q in q_items:
            for v in readers.get(q, ()):
                product = program.operations[v - first]
                if isinstance(product.op, ops.MatmulOp) and product.args[1] == q:
                    if product.args[0] != q:
                        products.append(v)
                        users.add(product.args[0])
                        continue
                users.add(None)  # another reader: Q is needed
        if len(users) != 1 or None in users or outputs & set(q_items):
            continue
        (u,) = users
        u_type = types[u]
        read_at = [r for v in r_items + products for r in readers.get(v, ())]
        if (
            u_type is None
            or any(types[v] is None for v in r_items + products)
            or not u_type.shape
            or u_type.shape[-1] != rows
            or u >= min(read_at, default=u + 1)  # u is computed too late
        ):
            continue
        plans[value] = (u, r_items, q_items, products)
    return plans


__all__ = ["is_qr", "qr_identities", "qr_projections", "swapped"]
