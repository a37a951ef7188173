"""Lowering rules, one file per family of funsor terms. Importing this package
registers them all with :data:`funsor_lowering.lowering.driver.LOWERING_RULES`."""

from . import (  # noqa: F401
    approximate,
    atoms,
    contraction,
    delta,
    distributions,
    elementwise,
    indexing,
    reductions,
    substitution,
    sum_product,
)
