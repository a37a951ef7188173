"""Compiling without the cyclic garbage collector's pauses."""

import contextlib
import gc


@contextlib.contextmanager
def gc_paused():
    """Pause Python's cyclic garbage collector: compiling and tracing
    allocate many long-lived objects (funsor terms, operations), and the
    collector's full passes over them would make compile time grow faster
    than the program. The collector's state is restored after (it stays off
    if it was off).

    >>> import gc
    >>> with gc_paused():
    ...     gc.isenabled()
    False
    >>> gc.isenabled()
    True
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
