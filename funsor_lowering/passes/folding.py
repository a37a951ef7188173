"""The constant folding pass: operations on constants only are computed
at compile time (never random ops, ops on values needing grad, or results
much larger than their inputs)."""

import math
import numbers

from ..ir.editor import rewrite
from ..ir.program import array_backend
from ..ops.extra_ops import RANDOM_OP_TYPES

# Largest constant folding may create, in elements, unless its inputs are
# as large (expanding a constant is cheaper at run time than storing it).
FOLD_LIMIT = 4096


def is_random(op):
    return isinstance(op, RANDOM_OP_TYPES)


def fold_constants(program):
    """Compute operations whose arguments are all constants (not random
    ones, none requiring grad), unless the result would be much larger
    than its inputs."""
    backend = array_backend(program.backend)

    def rule(editor, operation, args, value_type):
        values = [editor.constant_value(a) for a in args]
        if is_random(operation.op) or any(v is None for v in values):
            return None
        if any(map(backend.requires_grad, values)):
            return None  # computed on each call, as autograd needs
        if value_type is not None:
            size = math.prod(value_type.shape)
            inputs = sum(_size(v) for v in values)
            if size > max(FOLD_LIMIT, inputs):
                return None
        op = operation.op
        result = op(tuple(values)) if operation.packed else op(*values)
        if not (backend.is_array(result) or isinstance(result, numbers.Number)):
            return None
        return editor.add_constant(backend.as_traceable(result))

    return rewrite(program, rule)


def _size(value):
    shape = getattr(value, "shape", ())
    return math.prod(shape)
