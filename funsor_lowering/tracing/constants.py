"""Arrays that tracing code builds from Python data (index tables), kept
as constants of the program being recorded.

An array that no recorded op produced is refused when a traced op reads it
(:class:`~funsor_lowering.tracing.tracer.UntracedValueError`): it may be the
user's data computed outside ``funsor.ops``. :func:`constant_array` is the
way for our own tracing code to say that an array is a constant.

Example::

    >>> import numpy as np
    >>> constant_array(np.arange(3))  # outside a recording: the array itself
    array([0, 1, 2])
"""

import contextlib
import contextvars

from funsor.tensor import numeric_array

# The active recorder's ``constant`` method, in this context (thread, task).
_SINK = contextvars.ContextVar("funsor_lowering constant sink", default=None)


def constant_array(values):
    """``values`` (a numpy array) as a backend array; while a recorder is
    active, recorded as a constant of its program."""
    sink = _SINK.get()
    return numeric_array(values) if sink is None else sink(values)


@contextlib.contextmanager
def recorded_by(sink):
    """A context in which :func:`constant_array` calls ``sink(values)``."""
    token = _SINK.set(sink)
    try:
        yield
    finally:
        _SINK.reset(token)
