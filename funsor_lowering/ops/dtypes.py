"""The kind of an array dtype, for numpy, jax and torch alike, without
importing torch or jax (a leaf module: tracing and backends both use it)."""

import numpy as np


def dtype_kind(dtype):
    """``"real"``, ``"int"`` or ``"bool"`` (else the dtype's name) of a numpy,
    jax or torch dtype, without importing torch or jax.

    Example::

        >>> dtype_kind(np.dtype("float32")), dtype_kind(np.int64)
        ('real', 'int')
    """
    if hasattr(dtype, "is_floating_point"):  # torch.dtype
        if dtype.is_floating_point:
            return "real"
        if dtype.is_complex:
            return str(dtype)
        return "bool" if str(dtype) == "torch.bool" else "int"
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return "bool"
    if np.issubdtype(dtype, np.integer):
        return "int"
    if np.issubdtype(dtype, np.floating):
        return "real"
    if dtype.kind == "V" and dtype.name.startswith(("bfloat", "float")):
        return "real"  # ml_dtypes' (jax's) bfloat16, float8_* ...
    return dtype.name


__all__ = ["dtype_kind"]
