"""Temporarily replacing methods of funsor classes.

funsor's typed subclasses (``Gaussian[ndarray, ndarray, ...]``) are created on
demand and copy their base class's ``__dict__``, so a method patched on the
base alone would be missed by subclasses made before the patch and would
stick in subclasses made during it. :class:`MethodPatch` patches the base and
every subclass holding the same function, and restores them all.

Example::

    >>> class A:
    ...     def f(self):
    ...         return "original"
    >>> class B(A):
    ...     f = A.f  # a copy, as funsor's typed subclasses hold
    >>> with MethodPatch(A, "f", lambda self: "patched"):
    ...     B().f()
    'patched'
    >>> B().f()
    'original'
"""


def _tree(cls):
    seen, stack = [], [cls]
    while stack:
        c = stack.pop()
        if c not in seen:
            seen.append(c)
            stack.extend(type.__subclasses__(c))
    return seen


class MethodPatch:
    """Context manager: ``owner.name = replacement`` in ``owner`` and its
    subclasses that hold ``owner``'s function, restored on exit (also in
    subclasses created meanwhile)."""

    def __init__(self, owner, name, replacement):
        self.owner, self.name, self.replacement = owner, name, replacement
        self.original = owner.__dict__[name]

    def __enter__(self):
        for cls in _tree(self.owner):
            if cls.__dict__.get(self.name) is self.original:
                setattr(cls, self.name, self.replacement)
        return self

    def __exit__(self, *args):
        for cls in _tree(self.owner):
            if cls.__dict__.get(self.name) is self.replacement:
                setattr(cls, self.name, self.original)


class PatternPatch:
    """Context manager: funsor's eager pattern for ``key`` registered on
    exactly ``types`` is ``replacement`` meanwhile (for funsor code that
    dispatches to eager patterns directly, bypassing interpretations)."""

    def __init__(self, interpretation, key, types, replacement):
        registry = interpretation._subinterpretations[0].registry
        self.dispatcher = registry[key]
        matches = [t for t in self.dispatcher.funcs if _same_types(t, types)]
        if len(matches) != 1:
            raise LookupError(f"no single {key.__name__} pattern on {types}")
        (self.signature,) = matches
        self.original = self.dispatcher.funcs[self.signature]
        self.replacement = replacement

    def __enter__(self):
        self.dispatcher.add(self.signature, self.replacement)
        return self

    def __exit__(self, *args):
        self.dispatcher.add(self.signature, self.original)


class FunctionPatch:
    """Context manager: every eager pattern of ``interpretation`` that is
    ``original`` (funsor registers some functions for many signatures) is
    ``replacement`` meanwhile."""

    def __init__(self, interpretation, original, replacement):
        registry = interpretation._subinterpretations[0].registry.registry
        self.entries = [
            (dispatcher, signature)
            for dispatcher in registry.values()
            for signature, fn in dispatcher.funcs.items()
            if fn is original
        ]
        self.original, self.replacement = original, replacement

    def __enter__(self):
        for dispatcher, signature in self.entries:
            dispatcher.add(signature, self.replacement)
        return self

    def __exit__(self, *args):
        for dispatcher, signature in self.entries:
            dispatcher.add(signature, self.original)


def _same_types(signature, types):
    # funsor registers op types wrapped, as typing_wrap[AddOp]
    return len(signature) == len(types) and all(
        s is t or getattr(s, "__args__", None) == (t,) for s, t in zip(signature, types)
    )


class Patches:
    """Several :class:`MethodPatch` es as one context manager."""

    def __init__(self, *patches):
        self.patches = patches

    def __enter__(self):
        for patch in self.patches:
            patch.__enter__()
        return self

    def __exit__(self, *args):
        for patch in reversed(self.patches):
            patch.__exit__(*args)
