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

from ..ir.structure import call_signature  # noqa: E402
from ..ops.extra_ops import RANDOM_OP_TYPES, RandnWithKeyOp  # noqa: E402

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
    key = _key(operands, params)
    if key is None:
        return None
    key = (op_type, implementation, *key)
    kernel = _TIERED.get(key)
    if kernel is None:
        static = tuple(i for i, x in enumerate(operands) if _is_number(x))
        kernel = _TIERED.setdefault(key, Tiered(function, static))  # first wins
    return kernel


def _is_number(value):
    return isinstance(value, numbers.Number)


def _is_array(value):
    return isinstance(value, (jax.Array, np.ndarray))


def _is_plain_operand(value):
    if isinstance(value, tuple):  # packed: a number in it could not be static
        return all(map(_is_array, value))
    return _is_array(value) or _is_number(value)


def _key(operands, params):
    """What a kernel is compiled for (operands' shapes and dtypes, Python
    numbers' values: static) and with, or ``None`` where an operand is no
    array, number or tuple of arrays (packed), or a parameter no plain
    value (an array parameter would be baked into the kernel)."""
    if not all(map(_is_plain_operand, operands)):
        return None
    try:
        key = (
            call_signature(tuple(operands), _is_array),
            call_signature(tuple(params), lambda _: False),
        )
        hash(key)
    except TypeError:
        return None
    return key


__all__ = ["HOT_CALLS", "Tiered", "tiered"]
