"""numpy adapter."""

import functools
import operator

import numpy as np
from funsor import ops

from ..ops.dtypes import dtype_kind
from ..ops.extra_ops import (
    LogsumexpScanEmittingOp,
    LogsumexpScanOp,
    TriangularSolveVectorsOp,
    TupleItemOp,
    VecdotOp,
)
from ..runtime.literals import python_literal
from . import numpy_lapack
from .base import ArrayBackend


def numpy_literal(value, module="np"):
    """Source for a numpy array or scalar that rebuilds it exactly.

    Example::

        >>> numpy_literal(np.array([0.1, 2.0], dtype=np.float32))
        'np.array([0.10000000149011612, 2.0], dtype=np.float32)'
    """
    dtype = f"{module}.{np.dtype(value.dtype).name}"
    if isinstance(value, np.generic):
        return f"{dtype}({python_literal(value.item())})"
    if value.size == 0:
        return f"{module}.zeros({value.shape!r}, dtype={dtype})"
    return f"{module}.array({python_literal(value.tolist())}, dtype={dtype})"


# Arithmetic whose Python number operand costs ~0.3 us a call more than a
# 0-d array of the other operand's dtype (same results: numpy casts a
# Python number to the array's dtype). float32 / float64 only.
_NUMBER_ARITHMETIC = frozenset(
    {
        operator.add,
        operator.sub,
        operator.mul,
        operator.truediv,
        np.add,
        np.subtract,
        np.multiply,
        np.divide,
    }
)
_EXACT_NUMBER_DTYPES = (np.dtype("float32"), np.dtype("float64"))


# Above this many elements, logsumexp by max-shift and exp (fast per element)
# beats one logaddexp reduction (one call, but a slow ufunc per element).
LOGSUMEXP_SHIFT_SIZE = 512


# A reduction over a short axis (at most this long) of a large array runs as
# elementwise operations on the axis' slices: numpy's own reductions run an
# inner loop per few elements there, 2-3x slower.
SHORT_AXIS = 16


def logsumexp(x, axis=None, keepdims=False):
    """funsor's ``ops.logsumexp``: one numpy ufunc reduction on small arrays;
    ``log(sum(exp(x - max))) + max`` on large ones, over a short axis as
    elementwise operations on its slices. (funsor 0.4.8's numpy version
    makes ~10 calls, one through funsor's op dispatch.)

    >>> x = np.array([[0.0, -np.inf], [-np.inf, -np.inf]])
    >>> logsumexp(x, 1)
    array([  0., -inf])
    """
    if np.size(x) <= LOGSUMEXP_SHIFT_SIZE:
        return np.logaddexp.reduce(x, axis=axis, keepdims=keepdims)
    short = _short_axis(x, axis)
    if short is not None:
        total = _logsumexp_of_slices(x, short)
        return np.expand_dims(total, short) if keepdims else total
    shift = np.max(x, axis=axis, keepdims=True)
    shift = np.where(np.isfinite(shift), shift, 0)  # all -inf (or inf, nan)
    with np.errstate(divide="ignore"):  # log(0) = -inf, as the reduction gives
        total = np.log(np.sum(np.exp(x - shift), axis=axis, keepdims=True))
    total = total + shift
    return total if keepdims else np.squeeze(total, axis=axis)


def _short_axis(x, axis):
    """``axis`` as a non-negative int where it is one axis of at most
    ``SHORT_AXIS`` elements and the result has at least
    ``LOGSUMEXP_SHIFT_SIZE`` elements; else ``None``."""
    if isinstance(axis, tuple):
        if len(axis) != 1:
            return None
        (axis,) = axis
    if axis is None or not -x.ndim <= axis < x.ndim:
        return None
    axis %= x.ndim
    length = x.shape[axis]
    if not 0 < length <= SHORT_AXIS or x.size // length < LOGSUMEXP_SHIFT_SIZE:
        return None
    return axis


def _logsumexp_of_slices(x, axis):
    """``logsumexp(x, axis)`` from the views ``x[..., i, ...]`` along
    ``axis``: a maximum, a shifted exp and a sum of them, elementwise."""
    parts = [x[(slice(None),) * axis + (i,)] for i in range(x.shape[axis])]
    shift = functools.reduce(np.maximum, parts)
    shift = np.where(np.isfinite(shift), shift, 0)  # all -inf (or inf, nan)
    total = functools.reduce(np.add, [np.exp(part - shift) for part in parts])
    with np.errstate(divide="ignore"):  # log(0) = -inf, as the reduction gives
        return np.log(total) + shift


def logsumexp_scan(alpha, steps, emissions=None):
    """``extra_ops.logsumexp_scan``: one add and one reduction per step
    (and an add of the step's emission, given ``emissions``)."""
    for n in range(steps.shape[-3]):
        alpha = logsumexp(alpha[..., :, None] + steps[..., n, :, :], -2)
        if emissions is not None:
            alpha = alpha + emissions[..., n, :]
    return alpha


def logsumexp_scan_emitting(parts):
    """``extra_ops.logsumexp_scan_emitting`` of ``(alpha, steps,
    emissions)``."""
    return logsumexp_scan(*parts)


@functools.cache
def _sigmoid():
    """``1 / (1 + exp(-x))``: scipy's ``expit`` ufunc where scipy is
    installed (funsor 0.4.8's version calls ``ops.exp`` through dispatch).
    Looked up when a program first needs it: ``scipy.special`` takes a third
    of a second to import."""
    try:
        from scipy.special import expit
    except ImportError:  # scipy is optional

        def expit(x):
            return 1 / (1 + np.exp(-x))

    return expit


def log_ignoring_divide(x):
    """funsor's ``ops.log`` of a float array: ``log(0) = -inf`` without
    numpy's divide-by-zero warning."""
    with np.errstate(divide="ignore"):
        return np.log(x)


# Op types (exactly) whose numpy implementations never report a division by
# zero (numpy's ``divide`` floating point error): a body made of these alone
# may run under one ``errstate(divide="ignore")`` for all its logs.
_DIVIDE_FREE_OPS = (
    ops.AddOp,
    ops.SubOp,
    ops.MulOp,
    ops.NegOp,
    ops.ExpOp,
    ops.LogOp,
    ops.SqrtOp,
    ops.AbsOp,
    ops.MatmulOp,
    ops.EinsumOp,
    ops.SumOp,
    ops.AmaxOp,
    ops.AminOp,
    ops.MaxOp,
    ops.MinOp,
    ops.LogsumexpOp,
    ops.LogaddexpOp,
    ops.CatOp,
    ops.StackOp,
    ops.ReshapeOp,
    ops.TransposeOp,
    ops.PermuteOp,
    ops.ExpandOp,
    ops.GetsliceOp,
    ops.GetitemOp,
    ops.DiagonalOp,
    ops.NewZerosOp,
    ops.CholeskyOp,
    ops.TriangularSolveOp,
    TriangularSolveVectorsOp,
    VecdotOp,
    ops.QrOp,
    ops.RandnOp,
    TupleItemOp,
    LogsumexpScanOp,
    LogsumexpScanEmittingOp,
)


def _ignoring_divide():
    return np.errstate(divide="ignore")


def cholesky_inverse(x):
    """funsor's ``ops.cholesky_inverse`` (``(L Lᵀ)⁻¹`` of a lower triangular
    ``L``) in numpy calls, as funsor's ``cholesky_solve`` computes it."""
    x_inv = np.linalg.inv(x)
    return np.swapaxes(x_inv, -2, -1) @ x_inv


_REDUCING_UFUNCS = {
    ops.SumOp: np.add,
    ops.ProdOp: np.multiply,
    ops.AmaxOp: np.maximum,
    ops.AminOp: np.minimum,
    ops.AllOp: np.logical_and,
    ops.AnyOp: np.logical_or,
}


def qr(x, mode="reduced"):
    """``np.linalg.qr``, batched by numpy itself (funsor 0.4.8 loops over
    the batch in Python for numpy arrays of rank > 2)."""
    return np.linalg.qr(x, mode=mode)


def _real_arrays(operands):
    """Whether the operands are arrays of booleans, integers or floats (not
    complex numbers, which ``np.vecdot`` conjugates)."""
    return all(isinstance(x, np.ndarray) and x.dtype.kind in "biuf" for x in operands)


def _method_call(op_type, operands, params):
    """The array's own method where funsor calls a ``np.`` function that
    only forwards to it (``np.swapaxes``, ``np.diagonal``: ~1.5 us of
    argument handling each), and ``take`` for funsor's ``getitem`` of one
    integer index array (what ``x[:, ..., index]`` gathers, a third of the
    time)."""
    x = operands[0]
    if not isinstance(x, np.ndarray):
        return None
    if op_type is ops.TransposeOp:
        return np.ndarray.swapaxes, tuple(params), {}
    if op_type is ops.DiagonalOp:
        dim1, dim2 = params
        return np.ndarray.diagonal, (0, dim1, dim2), {}
    if op_type is ops.GetitemOp:
        index = operands[1]
        if isinstance(index, np.ndarray) and index.dtype.kind in "iu":
            (offset,) = params
            return np.ndarray.take, (offset,), {}
    return None


_LAPACK_OPS = (
    ops.CholeskyOp,
    ops.QrOp,
    ops.TriangularSolveOp,
    TriangularSolveVectorsOp,
)


def _lapack_call(op_type, operands, params):
    """Direct LAPACK calls (:mod:`.numpy_lapack`) for the factorizations
    and solves of single matrices, where scipy is installed."""
    if op_type not in _LAPACK_OPS or not numpy_lapack.AVAILABLE:
        return None
    if op_type is TriangularSolveVectorsOp:
        x, y = operands  # one matrix y, any batch of vectors x
        if not (numpy_lapack.is_single_matrix(y) and isinstance(x, np.ndarray)):
            return None
        if x.ndim == 0 or x.size == 0:
            return None
        shape = np.broadcast_shapes(x.shape[:-1], y.shape[:-2]) + x.shape[-1:]
        return numpy_lapack.triangular_solve_vectors, (*params, shape), {}
    if op_type is ops.TriangularSolveOp:
        x, y = operands  # one matrix y, any batch of x
        if not (numpy_lapack.is_single_matrix(y) and numpy_lapack.is_matrices(x)):
            return None
        shape = np.broadcast_shapes(x.shape[:-2], y.shape[:-2]) + x.shape[-2:]
        return numpy_lapack.triangular_solve, (*params, shape), {}
    if not numpy_lapack.is_single_matrix(*operands):
        return None
    if op_type is ops.CholeskyOp:
        return numpy_lapack.cholesky, (), {}
    if op_type is ops.QrOp and tuple(params) == ("reduced",):
        return numpy_lapack.qr, (), {}
    return None


class NumpyBackend(ArrayBackend):
    name = "numpy"
    array_type_name = "numpy.ndarray"
    call_cost = 280
    # funsor 0.4.8's numpy versions of these call other ops through dispatch
    fast_implementations = {
        ops.LogsumexpOp: logsumexp,
        ops.LogaddexpOp: np.logaddexp,
        ops.CholeskyInverseOp: cholesky_inverse,
        LogsumexpScanOp: logsumexp_scan,
        LogsumexpScanEmittingOp: logsumexp_scan_emitting,
    }
    if np.lib.NumpyVersion(np.__version__) >= "2.0.0":  # batched linalg.qr
        fast_implementations[ops.QrOp] = qr
    # a copy (numpy scalars become 0-d arrays, as the program's outputs are)
    copy_function, copy_source = staticmethod(np.array), "np.array"

    def fast_implementation(self, op_type, params):
        if op_type is ops.SigmoidOp:
            return _sigmoid()
        return super().fast_implementation(op_type, params)

    def fast_call(self, op_type, operands, params, dispatched):
        lapack_call = _lapack_call(op_type, operands, params)
        if lapack_call is not None:
            return lapack_call
        if op_type is ops.LogsumexpOp and np.size(operands[0]) <= LOGSUMEXP_SHIFT_SIZE:
            axis, keepdims = params
            return np.logaddexp.reduce, (axis,), {"keepdims": keepdims}
        if op_type is ops.LogOp and operands[0].dtype.kind == "f":
            return log_ignoring_divide, (), {}
        if op_type is VecdotOp and _real_arrays(operands) and hasattr(np, "vecdot"):
            return np.vecdot, (), {}  # one ufunc call (numpy 2)
        method_call = _method_call(op_type, operands, params)
        if method_call is not None:
            return method_call
        ufunc = _REDUCING_UFUNCS.get(op_type)
        if ufunc is not None and np.size(operands[0]) > 0:
            # the ufunc's reduction itself (what np.sum and np.amax call
            # after ~2 us of argument handling)
            axis, keepdims = params
            return ufunc.reduce, (axis,), {"keepdims": keepdims}
        return super().fast_call(op_type, operands, params, dispatched)

    def body_context(self, operations, resolved):
        # two logs or more: one errstate for the whole body (~2 us each),
        # where no other op could have its divide-by-zero warning hidden
        logs = [k for k, r in enumerate(resolved) if r[0] is log_ignoring_divide]
        if len(logs) < 2 or not all(type(o.op) in _DIVIDE_FREE_OPS for o in operations):
            return None, resolved
        resolved = list(resolved)
        for k in logs:
            resolved[k] = (np.log, (), {})
        return _ignoring_divide, resolved

    native_array_types = (np.ndarray, np.generic)
    is_funsor_default = True
    returns_scalars = True

    number_arithmetic = _NUMBER_ARITHMETIC
    exact_number_dtypes = _EXACT_NUMBER_DTYPES

    def zero_d_array(self, number, dtype):
        value = np.array(number, dtype=dtype)
        value.flags.writeable = False  # shared by every call of a body
        return value

    def dtype_kind(self, value):
        return dtype_kind(value.dtype)

    def as_traceable(self, value):
        return np.asarray(value) if isinstance(value, np.generic) else value

    def array_literal(self, value):
        return numpy_literal(value), ("import numpy as np",)

    def from_numpy(self, array):
        return array


BACKEND = NumpyBackend()
