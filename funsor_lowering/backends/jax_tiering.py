"""Hot ops of jax programs compiled: each op runs as it is resolved for its
first :data:`HOT_CALLS` calls, then as one jitted kernel.

Eagerly, each ``jax.lax`` primitive or ``jax.numpy`` call is a dispatch of
its own (~15 us; a slice that is two primitives ~35 us), where a function
``jax.jit`` has compiled is one dispatch whatever it computes (~11 us).
Compiling takes a few milliseconds per op, parameters and operand shapes,
so it is done for ops called often (a JIT's tiers): a program called in a
loop compiles its ops once, after :data:`HOT_CALLS` calls; a program called
a few times compiles nothing. The kernel is the very function the op ran
eagerly, jitted: one op per kernel, the same computation.

Example::

    >>> import numpy as np
    >>> from funsor import ops
    >>> x = np.arange(6.0).reshape(2, 3)
    >>> total = tiered(ops.SumOp, (x,), (1, False), lambda x: x.sum(1), "sum")
    >>> [total(x).tolist() for _ in range(HOT_CALLS + 1)][-1]  # then jitted
    [3.0, 12.0]
    >>> total.jitted is not None
    True
"""

import numbers

import funsor

if funsor.get_backend() != "jax":  # as jax_backend: funsor breaks otherwise
    funsor.set_backend("jax")

import jax  # noqa: E402
import numpy as np  # noqa: E402
from funsor import ops  # noqa: E402

from ..extra_ops import RANDOM_OP_TYPES, RandnWithKeyOp  # noqa: E402

# Calls after which an op is compiled: about a kernel's compile time over
# what it saves a call (~4 ms / 20-40 us).
HOT_CALLS = 100
_TIERED = {}


class Tiered:
    """``function(*operands)``, run as is for :data:`HOT_CALLS` calls,
    then jitted (Python-number operands, constants of the program, static)."""

    __slots__ = ("function", "static", "calls", "jitted")

    def __init__(self, function, static=()):
        self.function, self.static = function, static
        self.calls, self.jitted = 0, None

    def __call__(self, *operands):
        if self.jitted is not None:
            return self.jitted(*operands)
        self.calls += 1
        if self.calls > HOT_CALLS:
            self.jitted = jax.jit(self.function, static_argnums=self.static)
        return self.function(*operands)


def tiered(op_type, operands, params, function, implementation):
    """``function`` (computing ``op_type(*params)`` on operands of these
    shapes and dtypes, by ``implementation``) as a :class:`Tiered` shared by
    every such call, or ``None`` for unkeyed draws, ops that are not
    functions of their operands, and parameters or operands that are not
    plain values and arrays."""
    if not issubclass(op_type, (ops.UnaryOp, ops.BinaryOp, ops.FinitaryOp)):
        return None
    if issubclass(op_type, RANDOM_OP_TYPES) and op_type is not RandnWithKeyOp:
        return None
    signature = tuple(map(_signature, operands))
    params_key = _plain(params)
    if None in signature or params_key is None:
        return None
    key = (op_type, implementation, params_key, signature)
    kernel = _TIERED.get(key)
    if kernel is None:
        static = tuple(i for i, x in enumerate(operands) if _is_number(x))
        kernel = _TIERED.setdefault(key, Tiered(function, static))  # first wins
    return kernel


def _is_number(value):
    return isinstance(value, numbers.Number)


def _signature(operand):
    """What a kernel is compiled for: an array's shape and dtype, a tuple of
    arrays' (packed operands), a Python number's value (static); ``None``
    for anything else."""
    if isinstance(operand, (jax.Array, np.ndarray)):
        return ("array", tuple(operand.shape), str(operand.dtype))
    if _is_number(operand):
        return ("number", type(operand), operand)
    if isinstance(operand, tuple):
        parts = tuple(map(_signature, operand))
        if None in parts or any(p[0] != "array" for p in parts):
            return None
        return ("tuple", parts)
    return None


def _plain(value):
    """A hashable stand-in for a parameter made of numbers, strings, dtypes,
    ``None``, ``...``, slices, tuples and lists; else ``None`` (an array
    parameter would be baked into the kernel)."""
    if value is None or value is Ellipsis:
        return (type(value),)
    if isinstance(value, (numbers.Number, str, np.dtype)):
        return (type(value), value)
    if isinstance(value, slice):
        parts = [_plain(p) for p in (value.start, value.stop, value.step)]
        return None if None in parts else (slice, *parts)
    if isinstance(value, (tuple, list)):
        parts = [_plain(p) for p in value]
        return None if None in parts else (type(value), *parts)
    return None


__all__ = ["HOT_CALLS", "Tiered", "tiered"]
