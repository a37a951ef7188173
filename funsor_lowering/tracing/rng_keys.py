"""PRNG keys of draws on the jax backend, while tracing: a draw given no
key splits one off the key of the innermost active :class:`KeySource`
(a program input, split by recorded ops).

Example::

    >>> draw_key(None) is None  # numpy and torch draws are not keyed
    True
"""

import contextvars

from funsor.util import get_backend

from ..backends import array_backend
from ..ir.program import ValueType
from ..ops.extra_ops import split_key

# The input name and type of the key of programs that draw on jax (a raw
# ``jax.random.PRNGKey``: two uint32).
KEY_INPUT = "rng_key"
KEY_TYPE = ValueType((2,), "int")
# The innermost active KeySource in this context (thread, task).
_ACTIVE = contextvars.ContextVar("funsor_lowering key source", default=None)


class KeySource:
    """Where keyed draws (jax) that were given no key take theirs: each draw
    splits a fresh key off ``key``, a program input (recorded ops)."""

    def __init__(self, key):
        self.key = key  # None: draws need a key of their own
        self.used = False

    def next(self):
        self.used = True
        key, self.key = split_key(self.key, index=0), split_key(self.key, index=1)
        return key

    def __enter__(self):
        self._token = _ACTIVE.set(self)
        return self

    def __exit__(self, *args):
        _ACTIVE.reset(self._token)


def draw_key(rng_key):
    """The key a draw uses: ``None`` where draws are not keyed."""
    if not array_backend(get_backend()).keyed:
        return None
    if rng_key is not None:
        return rng_key
    source = _ACTIVE.get()
    if source is None or source.key is None:
        raise ValueError(
            "sampling on the jax backend needs an rng_key: pass one to "
            "funsor's sample / MonteCarlo(rng_key=...) as a traced input"
        )
    return source.next()
