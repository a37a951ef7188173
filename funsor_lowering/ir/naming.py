"""Stable, readable, collision-free names for program values (like torch.fx's
``_Namespace``): ``mul``, ``mul_1``, ``x``, ``c0``."""

import builtins
import keyword
import re
import unicodedata

RESERVED = (
    frozenset(keyword.kwlist)
    | frozenset(dir(builtins))
    | {"ops", "extra_ops", "funsor", "np", "torch", "jnp", "inputs"}
)
# The generated entry's own names (see codegen.build_entry): never value names.
ENTRY_NAMES = ("args", "kwargs", "body", "table", "slow", "signature", "program")


class Namespace:
    """Hands out unique Python identifiers.

    Example::

        >>> ns = Namespace()
        >>> ns.create("mul"), ns.create("ｍｕｌ"), ns.create("2x"), ns.create("sum")
        ('mul', 'mul_1', '_2x', 'sum_1')
        >>> ns.create("x²"), ns.create('a "b"!')
        ('x2', 'a__b__')
    """

    def __init__(self, reserved=()):
        self._used = set(RESERVED) | set(reserved)
        self._counts = {}

    def create(self, hint):
        # ASCII only: Python folds identifiers by NFKC, so "ｍｕｌ" in source
        # would be "mul"; fold first to keep such names readable.
        hint = unicodedata.normalize("NFKC", str(hint))
        base = re.sub(r"[^0-9A-Za-z_]", "_", hint) or "v"
        if base[0].isdigit():
            base = "_" + base
        name = base
        while name in self._used:
            count = self._counts.get(base, 0) + 1
            self._counts[base] = count
            name = f"{base}_{count}"
        self._used.add(name)
        return name


def is_plain_identifier(name):
    """Whether ``name`` can be a Python keyword argument written in source."""
    return name.isidentifier() and not keyword.iskeyword(name)
