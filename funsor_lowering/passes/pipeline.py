"""The pass pipeline. A pass takes an :class:`~funsor_lowering.OpProgram` and
returns a :class:`~funsor_lowering.ir.editor.PassResult`: an equivalent
program (same inputs, same outputs on every input) and whether it changed.
Passes edit programs through :class:`~funsor_lowering.ir.editor.Editor`, one
pass per module of this package:

- :func:`~funsor_lowering.passes.folding.fold_constants`: operations on
  constants only are computed now (never random ops, and never into
  constants much larger than their inputs);
- :func:`~funsor_lowering.passes.simplify.simplify`: algebraic
  identities, as rules registered per op type (see that module);
- :func:`~funsor_lowering.passes.broadcasts.defer_expands`: ``expand`` s
  moved past the operations they feed, or dropped where those broadcast;
- :func:`~funsor_lowering.passes.matmuls.einsums_as_matmuls`: two-operand
  einsums that are (batched) matrix or vector products run as ``matmul``;
- :func:`~funsor_lowering.passes.common_subexpressions.eliminate_common_subexpressions`:
  equal operations on equal values compute once (never random ops);
- :func:`~funsor_lowering.passes.dead_code.eliminate_dead_code`: operations
  and constants no output needs go;
- :func:`~funsor_lowering.passes.vectorize.vectorize` (first round only)
  and, once at the end,
  :func:`~funsor_lowering.passes.qr_algebra.qr_projections`.

:func:`optimize` runs them, after ``vectorize`` (first round only), to a
fixed point; compiled and traced programs get it by default.

Example::

    >>> import numpy as np
    >>> from funsor import ops
    >>> from funsor.domains import Reals
    >>> from funsor_lowering.ir.program import OpProgram, Operation, ValueType
    >>> p = OpProgram(
    ...     [0.0],
    ...     {"x": Reals[2]},
    ...     [Operation(ops.exp, (1,)), Operation(ops.exp, (1,)),
    ...      Operation(ops.add, (2, 0)), Operation(ops.mul, (3, 4))],
    ...     5,
    ...     value_types=[ValueType((2,), "real")] * 4,
    ... )
    >>> print(optimize(p))
    OpProgram(x: real[2]) on numpy:
      exp: real[2] = exp(x)
      mul: real[2] = mul(exp, exp)
      return mul
"""

from .broadcasts import defer_expands
from .common_subexpressions import eliminate_common_subexpressions
from .dead_code import eliminate_dead_code
from .folding import fold_constants
from .matmuls import einsums_as_matmuls
from .qr_algebra import qr_projections
from .simplify import simplify
from .vectorize import vectorize

PASSES = (
    vectorize,
    fold_constants,
    simplify,
    defer_expands,
    einsums_as_matmuls,
    eliminate_common_subexpressions,
    eliminate_dead_code,
)


# Passes run in the first round only: ``vectorize`` batches every level of
# a program at once, and rebuilding a large program it cannot batch again
# each round costs more than the other passes together.
FIRST_ROUND_ONLY = (vectorize,)


# Passes run once, after the others: they write ops the others know nothing
# of (``qr_projections`` a QR whose factors the identities no longer read).
FINAL_PASSES = (qr_projections,)


def optimize(program, passes=PASSES, max_rounds=4, final_passes=FINAL_PASSES):
    """Run ``passes`` in order until none changes the program, then
    ``final_passes`` once each. A pass is not run again on the very program
    it last left unchanged (passes are deterministic: it would leave it
    unchanged again)."""
    left_unchanged = {}  # pass -> the program it last left unchanged
    for round_ in range(max_rounds):
        modified = False
        for run_pass in passes:
            if round_ and run_pass in FIRST_ROUND_ONLY:
                continue
            if left_unchanged.get(run_pass) is program:
                continue
            program, changed = run_pass(program)
            if changed:
                modified = True
            else:
                left_unchanged[run_pass] = program
        if not modified:
            break
    for run_pass in final_passes:
        program = run_pass(program).program
    return program


__all__ = [
    "FINAL_PASSES",
    "PASSES",
    "defer_expands",
    "eliminate_common_subexpressions",
    "einsums_as_matmuls",
    "eliminate_dead_code",
    "fold_constants",
    "optimize",
    "qr_projections",
    "simplify",
    "vectorize",
]
