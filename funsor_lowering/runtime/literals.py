"""Python literals for values in generated code that round-trip exactly."""

import importlib
import math


def python_literal(value):
    """A Python expression for a nested list of Python scalars that
    round-trips exactly (floats by ``repr``, non-finite floats spelled out).

    Example::

        >>> python_literal([1.5, float("nan"), [True, 2]])
        "[1.5, float('nan'), [True, 2]]"
    """
    if isinstance(value, (list, tuple)):
        inner = ", ".join(python_literal(v) for v in value)
        if isinstance(value, tuple):
            return f"({inner},)" if len(value) == 1 else f"({inner})"
        return f"[{inner}]"
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({repr(value)!r})"
    if isinstance(value, (bool, int, float, str, type(None))):
        return repr(value)
    if isinstance(value, slice):
        parts = (value.start, value.stop, value.step)
        return "slice({})".format(", ".join(python_literal(p) for p in parts))
    if value is Ellipsis:
        return "Ellipsis"
    if isinstance(value, type):
        module, name = value.__module__, value.__qualname__
        if getattr(importlib.import_module(module), name, None) is value:
            return f"__import__({module!r}, fromlist=[{name!r}]).{name}"
    raise TypeError(f"cannot write {type(value).__name__} {value!r} as a literal")
