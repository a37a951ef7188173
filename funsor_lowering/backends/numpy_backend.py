"""numpy adapter."""

import numpy as np
from funsor import ops

from ..dtypes import dtype_kind
from .base import ArrayBackend, python_literal


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


def logsumexp(x, axis=None, keepdims=False):
    """funsor's ``ops.logsumexp`` as one numpy ufunc reduction (funsor 0.4.8's
    numpy version makes ~10 calls, one through funsor's op dispatch)."""
    return np.logaddexp.reduce(x, axis=axis, keepdims=keepdims)


def _sigmoid():
    """``1 / (1 + exp(-x))``: scipy's ``expit`` ufunc where scipy is
    installed (funsor 0.4.8's version calls ``ops.exp`` through dispatch)."""
    try:
        from scipy.special import expit
    except ImportError:  # scipy is optional

        def expit(x):
            return 1 / (1 + np.exp(-x))

    return expit


def cholesky_inverse(x):
    """funsor's ``ops.cholesky_inverse`` (``(L Lᵀ)⁻¹`` of a lower triangular
    ``L``) in numpy calls, as funsor's ``cholesky_solve`` computes it."""
    x_inv = np.linalg.inv(x)
    return np.swapaxes(x_inv, -2, -1) @ x_inv


class NumpyBackend(ArrayBackend):
    name = "numpy"
    array_type_name = "numpy.ndarray"
    # funsor 0.4.8's numpy versions of these call other ops through dispatch
    fast_implementations = {
        ops.LogsumexpOp: logsumexp,
        ops.LogaddexpOp: np.logaddexp,
        ops.SigmoidOp: _sigmoid(),
        ops.CholeskyInverseOp: cholesky_inverse,
    }
    # a copy (numpy scalars become 0-d arrays, as the program's outputs are)
    copy_function, copy_source = staticmethod(np.array), "np.array"

    def is_array(self, value):
        return isinstance(value, (np.ndarray, np.generic))

    def dtype_kind(self, value):
        return dtype_kind(value.dtype)

    def as_traceable(self, value):
        return np.asarray(value) if isinstance(value, np.generic) else value

    def array_literal(self, value):
        return numpy_literal(value), ("import numpy as np",)

    def from_numpy(self, array):
        return array


BACKEND = NumpyBackend()
