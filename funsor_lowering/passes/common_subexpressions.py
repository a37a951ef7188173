"""The common-subexpression pass: equal (non-random) operations on equal
arguments compute once."""

import numpy as np

from ..ir.editor import Ref, rewrite
from .folding import is_random


def eliminate_common_subexpressions(program):
    """Equal (non-random) operations on equal arguments compute once; equal
    constants (by value: index arrays that several gathers build alike)
    are one argument."""
    seen = {}
    first_equal = _first_equal_constants(program)

    def rule(editor, operation, args, value_type):
        if is_random(operation.op):
            return None
        same = tuple(first_equal.get(a, a) for a in args)
        key = (operation.op, same, operation.packed)
        if key in seen:
            return seen[key]
        if same != tuple(args):
            ref = editor.emit(operation.op, same, operation.packed, value_type)
            seen[key] = ref
            return ref
        seen[key] = Ref("o", len(editor.operations))  # the one emitted next
        return None

    return rewrite(program, rule)


# Constants compared by value up to this many elements (larger ones are
# data, compared by identity).
_COMPARED_CONSTANT_SIZE = 1 << 16


def _first_equal_constants(program):
    """Constant ref -> the ref of the first constant equal to it (same type,
    dtype, shape and values), for constants that have an earlier equal."""
    first, equal = {}, {}
    for k, value in enumerate(program.constants):
        key = _constant_key(value)
        if key is None:
            continue
        ref = first.setdefault(key, Ref("c", k))
        if ref.k != k:
            equal[Ref("c", k)] = ref
    return equal


def _constant_key(value):
    if isinstance(value, (bool, int, float, complex, str)):
        return type(value), repr(value)  # repr tells -0.0 from 0.0
    try:
        array = np.asarray(value)
    except Exception:  # noqa: BLE001 - not an array (or one needing grad)
        return None
    if array.dtype == object or array.size > _COMPARED_CONSTANT_SIZE:
        return None
    return type(value), array.dtype.str, array.shape, array.tobytes()
