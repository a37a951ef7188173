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

from funsor.util import get_backend

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


# Backends funsor 0.4.8 can use only while they are its active backend.
_ACTIVE_ONLY = frozenset({"jax"})


def usable_array_backend(name):
    """:func:`array_backend` for a program built on ``name``, once funsor can
    run it: a ``RuntimeError`` saying what to do where it cannot."""
    if name in _ACTIVE_ONLY and get_backend() != name:
        raise RuntimeError(
            f"this program runs on the {name} backend, but funsor's active "
            f"backend is {get_backend()!r}; funsor 0.4.8 cannot use {name} "
            f"beside another backend: call funsor.set_backend({name!r}) first"
        )
    return array_backend(name)


__all__ = ["ArrayBackend", "array_backend", "usable_array_backend"]
