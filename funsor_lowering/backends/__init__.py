"""Backend-specific facts the rest of the library needs, behind one interface.

This package is the only place (with ``pyro/`` and the tests) that imports
``torch`` or ``jax``, and it imports them lazily, only for programs built on
that backend: importing jax in a process whose funsor backend is numpy breaks
funsor 0.4.8.

Example::

    >>> import numpy as np
    >>> from funsor_lowering.backends import array_backend
    >>> array_backend("numpy").is_array(np.zeros(2))
    True
"""

import importlib

from .base import ArrayBackend

_MODULES = {
    "numpy": "funsor_lowering.backends.numpy_backend",
    "torch": "funsor_lowering.backends.torch_backend",
    "jax": "funsor_lowering.backends.jax_backend",
}
_CACHE = {}


def array_backend(name):
    """Return the :class:`ArrayBackend` for funsor backend ``name``."""
    backend = _CACHE.get(name)
    if backend is None:
        if name not in _MODULES:
            raise ValueError(
                f"unknown funsor backend {name!r}; supported: {', '.join(_MODULES)}"
            )
        backend = importlib.import_module(_MODULES[name]).BACKEND
        _CACHE[name] = backend
    return backend


__all__ = ["ArrayBackend", "array_backend"]
