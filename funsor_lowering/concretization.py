"""Refusing Python branches and conversions on traced values.

``trace_function`` runs the user's function once on its input arrays and
records every ``funsor.ops`` call. A Python ``if`` on, or ``bool()``,
``float()``, ``int()``, ``.item()`` of, a value computed from the inputs
would be decided once, on these inputs, and baked into the program. While a
trace records, such a conversion raises :class:`ConcretizationError` naming
the user's source line, as jax's tracers do. Conversions made by library
code (funsor, numpy, torch, jax, Pyro: argument validation, shape logic)
are left alone.

The values refused: input arrays, values recorded ops computed from them
and, on numpy, any array derived from an input (inputs are passed as
:class:`TracedArray` views, which numpy propagates).

Example::

    >>> import numpy as np
    >>> from funsor import ops
    >>> from funsor_lowering import trace_function
    >>> def h(x):
    ...     return ops.exp(x) if ops.sum(x) > 0 else -x
    >>> trace_function(h, {"x": np.arange(3.0)})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    funsor_lowering.concretization.ConcretizationError: bool() of a traced value ...
"""

import contextvars
import sys

import numpy as np

from .errors import in_libraries, location

# The OpRecorder recording in this context, or None.
ACTIVE_RECORDER = contextvars.ContextVar("funsor_lowering recorder", default=None)

LIBRARIES = ("funsor", "funsor_lowering", "numpy", "torch", "jax", "jaxlib")
LIBRARIES += ("pyro", "numpyro", "opt_einsum", "multipledispatch", "scipy")
CONVERSIONS = ("__bool__", "__float__", "__int__", "__index__", "item", "tolist")


class ConcretizationError(TypeError):
    """A Python branch or conversion on a traced value."""


def _caller():
    """``file:line`` of the code converting the value, or ``None`` where
    that is library code (or Python's own)."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back
    if frame is None or in_libraries(frame, LIBRARIES):
        return None
    return location(frame)


def is_traced(value):
    """Whether ``value`` depends on the inputs of the trace recording here."""
    recorder = ACTIVE_RECORDER.get()
    if recorder is None:
        return False
    if isinstance(value, TracedArray):
        return True
    node = recorder.node(value)
    return node is not None and node.live


def refuse_if_traced(value, what):
    """Raise :class:`ConcretizationError` if user code converts a traced
    value (``what``: the conversion's name)."""
    if not is_traced(value):
        return
    where = _caller()
    if where is None:
        return
    shape = tuple(getattr(value, "shape", ()))
    raise ConcretizationError(
        f"{what.strip('_')}() of a traced value (shape {shape}) at {where}: "
        f"trace_function runs the function once and records funsor.ops calls, "
        f"so a Python branch or conversion on a value computed from the inputs "
        f"would be baked into the program. Compute it with funsor.ops instead "
        f"(e.g. ops.where, ops.max, ops.clamp)."
    )


def guarded(name, original):
    """``original`` (a conversion method) refusing traced values."""

    def conversion(self, *args, **kwargs):
        refuse_if_traced(self, name)
        return original(self, *args, **kwargs)

    conversion.__name__ = name
    return conversion


def plain(value):
    """``value`` without the :class:`TracedArray` class (for constants)."""
    return value.view(np.ndarray) if isinstance(value, TracedArray) else value


class TracedArray(np.ndarray):
    """A numpy input of a trace (a view): numpy propagates the class to
    everything computed from it, and its conversions refuse while the trace
    records. Reductions and elements are 0-d arrays, so ``if x.sum() > 0`` and
    ``int(x[0])`` are caught."""

    def __array_wrap__(self, array, context=None, return_scalar=False):
        return super().__array_wrap__(array, context, False)

    def __getitem__(self, key):
        result = super().__getitem__(key)
        if isinstance(result, np.generic):  # an element: a 0-d array instead
            result = np.asarray(result).view(TracedArray)
        return result


for _name in CONVERSIONS:
    setattr(TracedArray, _name, guarded(_name, getattr(np.ndarray, _name)))
