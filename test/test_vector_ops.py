"""Triangular solves and dot products of batches of vectors as one backend
call each: ``triangular_solve(v[..., None], L)[..., 0]`` (how funsor's
Gaussians draw) becomes ``extra_ops.triangular_solve_vectors(v, L)`` and
``sum(x * y, -1)`` (their squared norms) ``extra_ops.vecdot(x, y)``.
Programs equal funsor's own evaluation of the same ops, called, from
``as_code`` and unpickled, and vmapped."""

import funsor
import numpy as np
import pytest
from funsor import ops
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.cases import FFBS, Kalman, random_inputs
from funsor_lowering import trace_function
from funsor_lowering.ops.extra_ops import TriangularSolveVectorsOp, VecdotOp

from .helpers import assert_matches, from_numpy, run_three_ways, to_numpy

BACKEND = funsor.get_backend()


def op_names(program):
    return [type(o.op).__name__ for o in program.operations]


def _triangular(rng, batch, n, upper, dtype):
    m = rng.standard_normal((*batch, n, n))
    m = np.triu(m) if upper else np.tril(m)
    diagonal = np.abs(np.diagonal(m, 0, -2, -1)) + n  # well conditioned
    m = m - np.diagonal(m, 0, -2, -1)[..., None] * np.eye(n)
    return from_numpy((m + diagonal[..., None] * np.eye(n)).astype(dtype))


def _solve_of_columns(upper, transpose):
    def solve(v, chol):
        column = ops.unsqueeze(v, -1)
        return ops.triangular_solve(column, chol, upper, transpose)[..., 0]

    return solve


def _tolerances(dtype):
    return {"rtol": 1e-4, "atol": 1e-5} if dtype == "float32" else {}


batches = st.lists(st.integers(1, 3), max_size=2)


@settings(deadline=None, max_examples=40)
@given(
    n=st.integers(1, 4),
    batch=batches,
    chol_batched=st.booleans(),
    upper=st.booleans(),
    transpose=st.booleans(),
    dtype=st.sampled_from(["float32", "float64"]),
    seed=st.integers(0, 2**16),
)
def test_solves_of_vectors_equal_funsors_solve_of_columns(
    n, batch, chol_batched, upper, transpose, dtype, seed
):
    rng = np.random.default_rng(seed)
    v = from_numpy(rng.standard_normal((*batch, n)).astype(dtype))
    chol = _triangular(rng, batch if chol_batched else (), n, upper, dtype)
    fn = _solve_of_columns(upper, transpose)
    arrays = {"v": v, "chol": chol}
    program = trace_function(fn, arrays)
    names = op_names(program)
    assert "TriangularSolveVectorsOp" in names and "ReshapeOp" not in names, program
    expected = fn(**arrays)  # funsor's ops on the arrays
    for actual in run_three_ways(program, arrays):
        assert_matches(actual, expected, **_tolerances(dtype))


@st.composite
def broadcasting_batches(draw):
    """Two batch shapes that broadcast: each keeps a suffix of one shape,
    some of its dims made 1."""
    batch = draw(batches)

    def one():
        kept = batch[len(batch) - draw(st.integers(0, len(batch))) :]
        return [1 if draw(st.booleans()) else size for size in kept]

    return one(), one()


@settings(deadline=None, max_examples=40)
@given(
    n=st.integers(1, 4),
    shapes=broadcasting_batches(),
    dtype=st.sampled_from(["float32", "float64"]),
    seed=st.integers(0, 2**16),
)
def test_dot_products_equal_funsors_sum_of_products(n, shapes, dtype, seed):
    rng = np.random.default_rng(seed)
    x_batch, y_batch = shapes
    x = from_numpy(rng.standard_normal((*x_batch, n)).astype(dtype))
    y = from_numpy(rng.standard_normal((*y_batch, n)).astype(dtype))

    def dot(x, y):
        return ops.sum(ops.mul(x, y), -1)

    arrays = {"x": x, "y": y}
    program = trace_function(dot, arrays)
    assert op_names(program) == ["VecdotOp"], program
    for actual in run_three_ways(program, arrays):
        assert_matches(actual, dot(**arrays), **_tolerances(dtype))


def test_sums_that_are_not_dot_products_stay():
    x = from_numpy(np.arange(6.0).reshape(2, 3))
    cases = {  # summed over another axis, kept dims, an integer product
        "axis 0": lambda x: ops.sum(ops.mul(x, x), 0),
        "keepdims": lambda x: ops.sum(ops.mul(x, x), -1, True),
        "integers": lambda x: ops.sum(ops.mul(ops.astype(x, "int32"), 2), -1),
    }
    for name, fn in cases.items():
        program = trace_function(fn, {"x": x})
        assert "VecdotOp" not in op_names(program), name
        assert_matches(program(x=x), fn(x))


def test_solve_of_a_product_with_columns_is_a_solve_of_row_products():
    # a draw's conditional mean: L^-1 (M v) for a batch of vectors v
    rng = np.random.default_rng(0)
    v = from_numpy(rng.standard_normal((4, 3)))
    m = from_numpy(rng.standard_normal((2, 3)))
    chol = _triangular(rng, (), 2, False, "float64")

    def conditional_mean(v, m, chol):
        product = ops.matmul(m, ops.unsqueeze(v, -1))
        return ops.triangular_solve(product, chol)[..., 0]

    arrays = {"v": v, "m": m, "chol": chol}
    program = trace_function(conditional_mean, arrays)
    names = op_names(program)
    assert "ReshapeOp" not in names and "TriangularSolveOp" not in names, program
    assert_matches(program(**arrays), conditional_mean(**arrays))


def test_factor_times_solve_of_a_vector_is_the_vector():
    # L (L^-1 u) = u for a Cholesky factor L, also where u is a vector
    rng = np.random.default_rng(1)
    m = rng.standard_normal((3, 3))
    g = from_numpy(m @ m.T + np.eye(3))
    u = from_numpy(rng.standard_normal(3))

    def solved_and_multiplied(g, u):
        chol = ops.cholesky(g)
        solved = ops.triangular_solve(ops.unsqueeze(u, -1), chol)[..., 0]
        return ops.matmul(chol, solved)

    arrays = {"g": g, "u": u}
    program = trace_function(solved_and_multiplied, arrays)
    assert not program.operations, program
    assert_matches(program(**arrays), solved_and_multiplied(**arrays))


def test_broadcast_factor_is_not_expanded_for_a_solve_of_vectors():
    # funsor expands a Gaussian's factor over its particles before solving
    rng = np.random.default_rng(2)
    chol = _triangular(rng, (), 2, False, "float64")
    v = from_numpy(rng.standard_normal((4, 2)))

    def solve_expanded(v, chol):
        expanded = ops.expand(chol, (4, 2, 2))
        return _solve_of_columns(False, True)(v, expanded)

    arrays = {"v": v, "chol": chol}
    program = trace_function(solve_expanded, arrays)
    assert op_names(program) == ["TriangularSolveVectorsOp"], program
    assert_matches(program(**arrays), solve_expanded(**arrays))


@pytest.mark.parametrize("case", [Kalman(10), FFBS()], ids=lambda c: c.name)
def test_gaussian_programs_solve_vectors_without_unit_axes(case):
    program = case.program(random_inputs(case))
    names = op_names(program)
    assert "VecdotOp" in names
    for operation in program.operations:  # no solve of columns is left
        if isinstance(operation.op, ops.TriangularSolveOp):
            column = program.value_types[operation.args[0]]
            assert column.shape[-1] != 1, program
    if isinstance(case, FFBS):
        assert "TriangularSolveVectorsOp" in names


@pytest.mark.parametrize("mapped", [("v",), ("chol",), ("v", "chol")])
@pytest.mark.parametrize("v_batch,chol_batch", [((), ()), ((3,), ()), ((), (3,))])
def test_vmapped_vector_ops_equal_a_loop(mapped, v_batch, chol_batch):
    rng = np.random.default_rng(3)
    v = from_numpy(rng.standard_normal((*v_batch, 2)))
    chol = _triangular(rng, chol_batch, 2, False, "float64")

    def draw_and_norm(v, chol):
        draw = _solve_of_columns(False, True)(v, chol)
        return draw, ops.sum(ops.mul(draw, v), -1)

    program = trace_function(draw_and_norm, {"v": v, "chol": chol})
    types = {type(o.op) for o in program.operations}
    assert {TriangularSolveVectorsOp, VecdotOp} <= types, program
    members = [
        {
            k: x * (1 + 0.5 * i) if k in mapped else x
            for k, x in (("v", v), ("chol", chol))
        }
        for i in range(3)
    ]
    stacked = {
        k: from_numpy(np.stack([to_numpy(m[k]) for m in members])) for k in mapped
    }
    in_axes = {k: 0 if k in mapped else None for k in ("v", "chol")}
    actual = program.vmap(in_axes)(**{"v": v, "chol": chol, **stacked})
    for i, member in enumerate(members):
        expected = draw_and_norm(**member)
        assert_matches(tuple(a[i] for a in actual), tuple(expected))
