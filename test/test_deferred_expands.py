"""Expands moved past the operations they feed (``defer_expands``): a
traced function that factorizes, solves and slices expanded matrices, as
funsor's Gaussian sampling does per particle, runs each factorization once
per matrix, and its results equal the function run eagerly."""

import funsor
import numpy as np
from funsor import ops

from funsor_lowering import trace_function

from .helpers import assert_matches, from_numpy

BACKEND = funsor.get_backend()
PARTICLES = 4


def per_particle_algebra(prec, rhs, tall, row):
    """Linear algebra of matrices expanded over particles, as funsor's
    Gaussian ``sample`` writes it."""
    batch = ops.expand(prec, (PARTICLES, 3, 3))
    chol = ops.cholesky(batch)
    # one right-hand side per particle against the shared factor
    solved = ops.triangular_solve(ops.unsqueeze(rhs, -1), chol)[..., 0]
    back = ops.triangular_solve(
        ops.unsqueeze(solved, -1), chol, upper=False, transpose=True
    )
    q, r = ops.qr(ops.expand(tall, (PARTICLES, 5, 3)))
    flipped = ops.transpose(batch, -1, -2)
    corner = batch[:, 1:, :2]
    first_row = batch[2]
    shifted = ops.exp(ops.expand(row, (PARTICLES, 3))) + solved
    gram = ops.matmul(ops.transpose(chol, -1, -2), chol)
    return {
        "solved": solved,
        "back": back[..., 0],
        "q_r": ops.matmul(q, r),
        "r": r,
        "flipped": flipped,
        "corner": corner,
        "first_row": first_row,
        "shifted": shifted,
        "gram": gram,
    }


def arrays(seed=0):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(3, 3))
    return {
        "prec": from_numpy(a @ a.T + 3 * np.eye(3)),
        "rhs": from_numpy(rng.normal(size=(PARTICLES, 3))),
        "tall": from_numpy(rng.normal(size=(5, 3))),
        "row": from_numpy(rng.normal(size=(3,))),
    }


def test_results_equal_the_function_run_eagerly():
    inputs = arrays()
    program = trace_function(per_particle_algebra, inputs)
    expected = per_particle_algebra(**inputs)
    assert_matches(program(**inputs), expected, rtol=1e-6, atol=1e-8)
    other = arrays(seed=1)  # the program is not specialized to the arrays
    assert_matches(program(**other), per_particle_algebra(**other), atol=1e-8)


def test_each_matrix_is_factorized_once_not_per_particle():
    program = trace_function(per_particle_algebra, arrays())
    types = program.value_types
    factorized = [
        types[o.args[0]].shape
        for o in program.operations
        if isinstance(o.op, (ops.CholeskyOp, ops.QrOp))
    ]
    assert sorted(factorized) == [(3, 3), (5, 3)]
    expands = [o for o in program.operations if isinstance(o.op, ops.ExpandOp)]
    # what the outputs need expanded; none feeds a broadcasting operation
    assert len(expands) <= 5
