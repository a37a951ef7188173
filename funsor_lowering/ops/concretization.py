"""Refusing Python branches and conversions on traced values.

Tracing runs the user's function once on symbolic arrays
(:class:`~funsor_lowering.ops.symbolic.SymbolicArray`) and records every
``funsor.ops`` call. A Python ``if`` on, or ``bool()``, ``float()``,
``int()``, ``.item()`` of, a value computed from the inputs has no value to
decide with: it raises :class:`ConcretizationError` naming the user's source
line, as jax's tracers do. So does a backend call (``np.exp``,
``torch.exp``, ``jnp.exp``) on one, which ``funsor.ops`` would record.

Example::

    >>> import numpy as np
    >>> from funsor import ops
    >>> from funsor_lowering import trace_function
    >>> def h(x):
    ...     return ops.exp(x) if ops.sum(x) > 0 else -x
    >>> trace_function(h, {"x": np.arange(3.0)})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    funsor_lowering.ops.concretization.ConcretizationError: bool() of a traced ...
"""

import contextlib
import sys

from ..errors import in_libraries, location

LIBRARIES = ("funsor", "funsor_lowering", "numpy", "torch", "jax", "jaxlib")
LIBRARIES += ("pyro", "numpyro", "opt_einsum", "multipledispatch", "scipy")


class ConcretizationError(TypeError):
    """A Python branch, conversion or backend call on a traced value."""


def _frames():
    """The innermost frame outside this package's tracing code, and the
    innermost frame of user code (not in :data:`LIBRARIES`), or ``None``."""
    frame = sys._getframe(3)  # the caller of the conversion
    converting = frame
    user = None
    while frame is not None:
        if user is None and not in_libraries(frame, LIBRARIES):
            user = frame
        frame = frame.f_back
    return converting, user


def refuse(value, what):
    """Raise :class:`ConcretizationError` for conversion ``what`` (e.g.
    ``"bool"``, ``"numpy.exp"``) of the traced ``value``."""
    converting, user = _frames()
    where = f"at {location(user)}" if user is not None else "in library code"
    if user is not None and converting is not user:
        where += f" (in {converting.f_code.co_name} at {location(converting)})"
    shape = tuple(getattr(value, "shape", ()))
    backend_call = "." in what
    hint = (
        "use the funsor.ops function instead (it is recorded)"
        if backend_call
        else "compute it with funsor.ops (comparisons as arrays, ops.max, ops.clamp)"
    )
    raise ConcretizationError(
        _message(f"{what}() of a traced value (shape {shape}) {where}", hint)
    )


def _message(what, hint):
    return (
        f"{what}: tracing runs the "
        f"function once on symbolic arrays and records funsor.ops calls, so a "
        f"Python branch, conversion or backend call on a value computed from "
        f"the inputs has no value to use and would be baked into the program; "
        f"{hint}"
    )


@contextlib.contextmanager
def backend_errors_named():
    """Where a backend refuses a symbolic array with its own ``TypeError``
    (jax converts arguments in compiled code, which swallows ours), raise
    :class:`ConcretizationError` naming the user's line instead."""
    try:
        yield
    except ConcretizationError:
        raise
    except TypeError as error:
        if "SymbolicArray" not in str(error):
            raise
        user = None
        tb = error.__traceback__
        while tb is not None:
            if not in_libraries(tb.tb_frame, LIBRARIES):
                user, line = tb.tb_frame, tb.tb_lineno
            tb = tb.tb_next
        where = (
            "in library code"
            if user is None
            else f"at {user.f_code.co_filename}:{line}"
        )
        first_line = str(error).splitlines()[0]
        what = f"a backend call on a traced value {where} ({first_line})"
        raise ConcretizationError(
            _message(what, "use the funsor.ops function instead (it is recorded)")
        ) from error
