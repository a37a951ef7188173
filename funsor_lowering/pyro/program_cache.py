"""A bounded, thread-safe cache of compiled programs by model structure."""

import threading
from collections import OrderedDict


class ProgramCache:
    """Programs by key, at most ``size`` (the oldest is dropped first).

    Example::

        >>> cache = ProgramCache(size=2)
        >>> cache.get("a", lambda: "program a")
        'program a'
        >>> cache.get("a", lambda: "never built")
        'program a'
    """

    def __init__(self, size=64):
        self._programs = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, key, build):
        """The program for ``key``, built by ``build()`` the first time."""
        program = self._programs.get(key)
        if program is None:
            program = build()
            with self._lock:
                self._programs[key] = program
                while len(self._programs) > self._size:
                    self._programs.popitem(last=False)
        return program

    def clear(self):
        with self._lock:
            self._programs.clear()

    def __len__(self):
        return len(self._programs)
