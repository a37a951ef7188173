"""Lowering rules, one file per family of funsor terms. Importing this package
registers them all with :data:`funsor_lowering.lowering.LOWERING_RULES`."""

from . import atoms, contraction, elementwise  # noqa: F401
