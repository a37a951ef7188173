"""Nestings of tuples, lists and dicts (program inputs and outputs): walk
their leaves and paths, and map over them.

Example::

    >>> list(iter_paths({"loc": [1, 2], "scale": 3}))
    [(('loc', 0), 1), (('loc', 1), 2), (('scale',), 3)]
    >>> map_leaves(lambda x: x * 10, (1, [2], {"a": 3}))
    (10, [20], {'a': 30})
"""

import numbers

import numpy as np

_BY_VALUE = (numbers.Number, str, slice, np.dtype)


def iter_paths(structure, path=()):
    """``(path, leaf)`` pairs of a nesting of tuples, lists and dicts."""
    if isinstance(structure, (tuple, list)):
        for i, item in enumerate(structure):
            yield from iter_paths(item, path + (i,))
    elif isinstance(structure, dict):
        for key, item in structure.items():
            yield from iter_paths(item, path + (key,))
    else:
        yield path, structure


def iter_leaves(structure):
    """Leaves of a nesting of tuples, lists and dicts, in order."""
    if isinstance(structure, (tuple, list)):
        for item in structure:
            yield from iter_leaves(item)
    elif isinstance(structure, dict):
        for item in structure.values():
            yield from iter_leaves(item)
    else:
        yield structure


def map_leaves(fn, structure):
    """Apply ``fn`` to each leaf of a nesting of tuples, lists and dicts."""
    if isinstance(structure, (tuple, list)):
        return type(structure)(map_leaves(fn, item) for item in structure)
    if isinstance(structure, dict):
        return {key: map_leaves(fn, item) for key, item in structure.items()}
    return fn(structure)


def call_signature(value, is_array):
    """A hashable description of a call argument, for caches keyed by what
    a call computes: arrays (``is_array``) by shape and dtype, numbers,
    strings, dtypes, ``None``, ``...`` and slices by value, tuples and lists
    of them; ``TypeError`` for anything else.

    >>> call_signature((2.0, slice(1, None), None), lambda x: False)
    ('tuple', ('float', '2.0'), ('slice', 'slice(1, None, None)'), ('NoneType', 'None'))
    """
    if is_array(value):
        return ("array", tuple(value.shape), str(value.dtype))
    if isinstance(value, (tuple, list)):
        return (type(value).__name__,) + tuple(
            call_signature(v, is_array) for v in value
        )
    if value is None or value is Ellipsis or isinstance(value, _BY_VALUE):
        return (type(value).__name__, repr(value))
    raise TypeError(type(value))


def path_suffix(path):
    """``['loc'][0]``: a path as Python indexing source."""
    return "".join(f"[{key!r}]" for key in path)


def lookup(value, key, name, path):
    """``value[key]`` for a nested program input, or a TypeError naming it."""
    try:
        if not isinstance(value, (tuple, list, dict)):
            raise TypeError
        if isinstance(value, (tuple, list)) and not isinstance(key, int):
            raise TypeError
        return value[key]
    except (TypeError, KeyError, IndexError):
        raise TypeError(
            f"input {name!r}: expected a nesting with {name}{path_suffix(path)}, "
            f"got {type(value).__name__} without {key!r}"
        ) from None
