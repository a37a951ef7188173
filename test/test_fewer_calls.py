"""Programs at the op-count limit (issue 16): chains planned in rounds that
batch into one call per round, einsums that are matrix products run as
``matmul``, numpy reductions as one ufunc call, jax layout ops as ``lax``
primitives. Every result equals eager funsor's (or the backend's own
function on the same arrays)."""

import itertools
import math
import string
import subprocess
import sys

import funsor
import numpy as np
import pytest
from funsor import ops
from funsor.domains import Reals
from funsor.interpretations import reflect
from funsor.tensor import Tensor
from funsor.terms import Variable
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from funsor_lowering import compile_funsor
from funsor_lowering.ir.program import Operation, OpProgram, ValueType
from funsor_lowering.lowering.rules.contraction import (
    ROUNDS_MIN_OPERANDS,
    einsum_path,
    plan_in_rounds,
)
from funsor_lowering.ops import extra_ops
from funsor_lowering.passes.basic_index import canonical_index
from funsor_lowering.passes.pipeline import einsums_as_matmuls, optimize
from funsor_lowering.passes.vectorize import vectorize

from .helpers import (
    assert_matches,
    backend_randn,
    chain_sum_product,
    from_numpy,
    to_numpy,
)

BACKEND = funsor.get_backend()


# ------------------------------------------------------------ plans in rounds
def replay(plan, inputs, output, arrays):
    """Run a plan's pairwise steps with numpy's einsum (the plan format of
    ``einsum_path``: pop the positions, append the result)."""
    operands = list(zip(inputs, arrays))
    for positions, equation in plan:
        args = [operands.pop(p) for p in positions]
        lhs, rhs = equation.split("->")
        assert lhs.split(",") == [letters for letters, _ in args], equation
        operands.append((rhs, np.einsum(equation, *(a for _, a in args))))
    ((letters, result),) = operands
    assert letters == output
    return result


@st.composite
def chains(draw):
    """Chains and trees of factors over letters, some with extra unary
    factors (emissions) and a prior, some letters kept in the output."""
    n = draw(st.integers(2, 24))
    letters = string.ascii_letters[:n]
    inputs = [letters[0]]
    for i in range(1, n):
        parent = draw(st.integers(max(0, i - 2), i - 1))  # chains, some forks
        inputs.append(letters[parent] + letters[i])
        if draw(st.booleans()):
            inputs.append(letters[i])
    kept = "".join(c for c in letters if draw(st.integers(0, 9)) == 0)
    sizes = {c: draw(st.integers(1, 3)) for c in letters}
    return inputs, kept, sizes


@given(chains())
def test_plans_in_rounds_compute_the_whole_contraction(chain):
    inputs, output, sizes = chain
    plan = plan_in_rounds(tuple(inputs), output)
    if plan is None:  # some round found no pair: the greedy plan is used
        return
    rng = np.random.RandomState(0)
    arrays = [rng.rand(*(sizes[c] for c in letters)) for letters in inputs]
    expected = np.einsum(",".join(inputs) + "->" + output, *arrays)
    np.testing.assert_allclose(replay(plan, inputs, output, arrays), expected)


def test_a_chain_takes_logarithmically_many_rounds():
    letters = string.ascii_letters
    inputs = ("a",) + tuple(letters[i : i + 2] for i in range(40))
    plan = plan_in_rounds(inputs, "")
    depth = [0] * len(inputs)
    for positions, _ in plan:
        depth.append(1 + max(depth.pop(p) for p in positions))
    assert max(depth) <= 8  # log2(41) rounded up, plus the ends' steps
    sequential = einsum_path(inputs, "", [(2,) * len(s) for s in inputs])
    assert len(plan) == len(sequential)  # as many steps, fewer dependent


def hmm_term(T, S, inputs, emissions):
    init, trans = inputs["init"], inputs["trans"]
    factors = [init["x0"]]
    for t in range(1, T):
        factors.append(trans[t][f"x{t - 1}", f"x{t}"])
        if emissions:
            factors.append(inputs["emit"][t][f"x{t}"])
    return chain_sum_product(factors, T)


def compiled_hmm_equals_eager(T, S, emissions):
    """The compiled program of an HMM's ``hmm_term``, checked against funsor's
    eager evaluation on random arrays."""
    shapes = {"init": (S,), "trans": (T, S, S), "emit": (T, S)}
    variables = {k: Variable(k, Reals[s]) for k, s in shapes.items()}
    program = compile_funsor(hmm_term(T, S, variables, emissions))
    arrays = {k: backend_randn(*s) for k, s in shapes.items()}
    expected = hmm_term(T, S, {k: Tensor(v) for k, v in arrays.items()}, emissions)
    with funsor.interpretations.eager:
        expected = funsor.interpreter.reinterpret(expected)
    arrays = {k: v for k, v in arrays.items() if k in program.inputs}
    assert_matches(program(**arrays), expected.data, rtol=1e-4, atol=1e-4)
    return program


@pytest.mark.parametrize("emissions", [False, True])
@pytest.mark.parametrize("T", [ROUNDS_MIN_OPERANDS, 37, 100])
def test_hmm_planned_in_rounds_equals_eager(T, emissions):
    program = compiled_hmm_equals_eager(T, 3, emissions)
    # a few batched calls per round, where a sequential forward pass makes
    # four operations per step (five with emissions)
    assert len(program.operations) < 2 * T + 24


def tree_term(inputs):
    """A tree r -> (a, b), a -> (c, d) summed out in log space, planned by
    funsor's ``apply_optimizer`` (which nests the sum over r inside a's)."""
    from funsor.optimizer import apply_optimizer
    from funsor.sum_product import sum_product

    edges = [("r", "a"), ("r", "b"), ("a", "c"), ("a", "d")]
    factors = [inputs["root"]["r"]]
    factors += [inputs[f"e{k}"][u, w] for k, (u, w) in enumerate(edges)]
    with reflect:
        expr = sum_product(
            ops.logaddexp, ops.add, factors, frozenset("rabcd"), frozenset()
        )
        return apply_optimizer(expr)


def test_a_tree_sums_each_variable_out_of_its_own_factors_first():
    shapes = {"root": (4,), "e0": (4, 4), "e1": (4, 4), "e2": (4, 4), "e3": (4, 4)}
    variables = {k: Variable(k, Reals[s]) for k, s in shapes.items()}
    program = compile_funsor(tree_term(variables))
    arrays = {k: backend_randn(*s) for k, s in shapes.items()}
    with funsor.interpretations.eager:
        expected = funsor.interpreter.reinterpret(
            tree_term({k: Tensor(v) for k, v in arrays.items()})
        )
    assert_matches(program(**arrays), expected.data, rtol=1e-5, atol=1e-5)
    # as by hand: one logsumexp per variable, the root's factor added to its
    # messages (not broadcast over an edge first), one 4 x 4 sum
    ops_used = [type(op.op).__name__ for op in program.operations]
    assert sorted(ops_used) == ["AddOp"] * 4 + ["LogsumexpOp"] * 5, ops_used
    assert sum(len(t.shape) == 2 for t in program._operation_types) == 1


# ------------------------------------------------------------ row broadcasts
@settings(deadline=None)
@given(
    batch=st.sampled_from([(), (3,), (2, 3)]),
    n=st.integers(1, 4),
    m=st.integers(1, 4),
    reduction=st.sampled_from(["logsumexp", "sum"]),
    negative_axis=st.booleans(),
    column_first=st.booleans(),
)
def test_reductions_of_column_broadcasts_equal_funsor(
    batch, n, m, reduction, negative_axis, column_first
):
    from funsor_lowering import trace_function

    reduce = getattr(ops, reduction)
    axis = -2 if negative_axis else len(batch)

    def fn(x, y):  # reduce the rows of x (as a column) + y
        column = x[:, None]
        return reduce(column + y if column_first else y + column, axis)

    arrays = {"x": backend_randn(n), "y": backend_randn(*batch, n, m)}
    program = trace_function(fn, arrays)
    assert_matches(program(**arrays), fn(**arrays), rtol=1e-5, atol=1e-5)
    names = [type(o.op).__name__ for o in program.operations]
    assert "ReshapeOp" not in names, names  # a row broadcast instead


def basic_indices(shape):
    """Basic indices of an array of ``shape``: per axis an int or a slice,
    whole slices also spelled with explicit bounds (``0:4`` of 4)."""

    def entry(size):
        whole = st.sampled_from([slice(None), slice(0, size), slice(0, size, 1)])
        part = st.integers(0, size - 1).flatmap(
            lambda a: st.integers(a + 1, size).map(lambda b: slice(a, b))
        )
        return st.one_of(st.integers(-size, size - 1), whole, part)

    return st.integers(1, len(shape)).flatmap(
        lambda k: st.tuples(*(entry(n) for n in shape[:k]))
    )


def _whole(entry, size):
    return isinstance(entry, slice) and entry.indices(size) == (0, size, 1)


@settings(deadline=None)
@given(index=basic_indices((3, 4, 5)), one_item_as_int=st.booleans())
def test_transposed_slices_equal_funsor(index, one_item_as_int):
    from funsor_lowering import trace_function

    shape = (3, 4, 5)
    if len(index) == 1 and one_item_as_int:
        index = index[0]
    entries = index if isinstance(index, tuple) else (index,)
    assume(len(shape) - sum(isinstance(e, int) for e in entries) >= 2)

    def fn(y):  # two slices of y, each transposed
        return ops.transpose(y[index], -1, -2), ops.transpose(y[(0,)], -1, -2)

    arrays = {"y": backend_randn(*shape)}
    program = trace_function(fn, arrays)
    assert_matches(program(**arrays), fn(**arrays), rtol=0, atol=0)
    names = [type(o.op).__name__ for o in program.operations]
    # slices of leading axes only: both slices of one transpose of y
    leading = all(_whole(e, n) for e, n in zip(entries[1:], shape[1:]))
    assert names.count("TransposeOp") == (1 if leading else 2), names


@settings(deadline=None)
@given(index=basic_indices((3, 6, 5)))
@example(index=(slice(None), slice(0, 4)))  # all of y, as AutoGaussian's case
@example(index=(1, slice(0, 4), slice(0, 5)))
def test_transposed_slices_of_concatenations_equal_funsor(index):
    # a slice of a cat within one part is a slice of that part, spelled with
    # explicit bounds (0:4 of 4): the transpose of it, as a slice of the
    # part's transpose, once took 0:4 of the other axis (AutoGaussian)
    from funsor_lowering import trace_function

    assume(3 - sum(isinstance(e, int) for e in index) >= 2)

    def fn(y, z):
        joined = ops.cat([y, z], -2)
        return ops.transpose(joined[index], -1, -2), ops.transpose(joined[1], -1, -2)

    arrays = {"y": backend_randn(3, 4, 5), "z": backend_randn(3, 2, 5)}
    program = trace_function(fn, arrays)
    assert_matches(program(**arrays), fn(**arrays), rtol=0, atol=0)


def test_a_forward_pass_adds_messages_to_rows_of_one_transpose():
    program = compiled_hmm_equals_eager(6, 3, False)
    if BACKEND != "jax":  # jax: one scan (rules/chains.py)
        names = [type(o.op).__name__ for o in program.operations]
        # per step a slice, an add and a logsumexp, as by hand
        assert names.count("TransposeOp") == 1 and "ReshapeOp" not in names, names


# ------------------------------------------------------------------ vectorize
def test_slices_of_one_array_at_scattered_positions_batch_into_one_gather():
    t = ValueType((3,), "real")
    positions = [4, 1, 7, 2]  # no progression: one gather
    leaves = [Operation(ops.GetsliceOp(index=i), (0,)) for i in positions]
    sums = [Operation(ops.exp, (1 + k,)) for k in range(4)]
    total = [Operation(ops.add, (5, 6)), Operation(ops.add, (7, 8))]
    total.append(Operation(ops.add, (9, 10)))
    p = OpProgram(
        [],
        {"x": Reals[8, 3]},
        leaves + sums + total,
        11,
        value_types=[t] * 11,
    )
    q = vectorize(p).program
    assert len(q.operations) < len(p.operations)
    x = backend_randn(8, 3)
    assert_matches(q(x=x), p(x=x))
    evenly = [
        Operation(ops.GetsliceOp(index=(i, slice(1, 3))), (0,)) for i in (1, 3, 5, 7)
    ]
    r = OpProgram(
        [],
        {"x": Reals[8, 3]},
        evenly + [Operation(ops.exp, (1 + k,)) for k in range(4)],
        (5, 6, 7, 8),
        value_types=[ValueType((2,), "real")] * 8,
    )
    batched = vectorize(r).program
    assert "getslice" in str(batched) and "gather" not in str(batched)
    assert_matches(batched(x=x), r(x=x))


def test_batched_slices_are_laid_out_by_position_so_later_rounds_read_slices():
    # the members come in scrambled program order (as funsor's sorted
    # variable names make them); laid out by position they are one strided
    # slice, and the pairs that read them read strided slices, not gathers
    t = ValueType((3,), "real")
    positions = [6, 2, 0, 4, 7, 3, 1, 5]
    leaves = [Operation(ops.GetsliceOp(index=i), (0,)) for i in positions]
    slot = {i: 1 + k for k, i in enumerate(positions)}  # position -> value
    pairs = [Operation(ops.mul, (slot[i], slot[i + 1])) for i in (4, 0, 6, 2)]
    total = [Operation(ops.add, (9, 10)), Operation(ops.add, (11, 12))]
    total.append(Operation(ops.add, (13, 14)))
    p = OpProgram(
        [], {"x": Reals[8, 3]}, leaves + pairs + total, 15, value_types=[t] * 15
    )
    q = vectorize(p).program
    assert "slice(0, 7, 2)" in str(q) and "slice(1, 8, 2)" in str(q)
    assert not any(isinstance(o.op, ops.GetitemOp) for o in q.operations[:3])
    x = backend_randn(8, 3)
    assert_matches(q(x=x), p(x=x))


@pytest.mark.parametrize(
    "positions, offset, strided",
    [
        ([1, 3, 5], 0, True),
        ([0, 2, 4, 6], 1, True),
        ([-7, -5], 0, True),  # 1, 3
        ([2], 0, True),
        ([4, 1, 7], 0, False),
        ([3, 2, 1], 0, False),  # counts down
        ([1, 1], 0, False),
    ],
)
def test_gathers_at_evenly_spaced_constant_positions_run_as_slices(
    positions, offset, strided
):
    shape = (8, 8)
    index = from_numpy(np.array(positions, np.int64))
    member = list(shape)
    member[offset] = len(positions)
    p = OpProgram(
        [index],
        {"x": Reals[shape]},
        [Operation(ops.GetitemOp(offset=offset), (1, 0)), Operation(ops.exp, (2,))],
        3,
        value_types=[ValueType(tuple(member), "real")] * 2,
    )
    q = optimize(p)
    names = [type(o.op).__name__ for o in q.operations]
    assert ("GetsliceOp" in names) == strided
    assert ("GetitemOp" in names) != strided
    x = backend_randn(*shape)
    assert_matches(q(x=x), np.exp(to_numpy(x)[(slice(None),) * offset + (positions,)]))


@pytest.mark.parametrize(
    "index, expected_ops",
    [
        ((slice(1, 4, 2), slice(None), None), ["GetsliceOp"]),  # [0, 6], new axis
        ((2, slice(None), None), ["GetsliceOp"]),  # one member, new axis
        ((slice(1, 4),), ["GetsliceOp"]),  # [0, 3, 6]
        ((slice(0, 3),), ["GetitemOp"]),  # [5, 0, 3]: a gather still
        ((slice(0, 3), None), ["GetitemOp", "GetsliceOp"]),
    ],
)
def test_slices_and_members_of_a_gather_index_its_source(index, expected_ops):
    # x[c][index] for a constant c: x indexed once, where that is basic
    positions = [5, 0, 3, 6]
    c = from_numpy(np.array(positions, np.int64))
    x = backend_randn(8, 2)
    expected = to_numpy(x)[positions][index]
    p = OpProgram(
        [c],
        {"x": Reals[8, 2]},
        [
            Operation(ops.GetitemOp(offset=0), (1, 0)),
            Operation(ops.GetsliceOp(index=index), (2,)),
        ],
        3,
        value_types=[ValueType((4, 2), "real"), ValueType(expected.shape, "real")],
    )
    q = optimize(p)
    assert sorted(type(o.op).__name__ for o in q.operations) == expected_ops
    assert_matches(q(x=x), expected)


def test_a_member_taken_out_of_a_gather_is_the_source_at_its_position():
    positions = [5, 0, 3, 1]
    c = from_numpy(np.array(positions, np.int64))
    x = backend_randn(6, 2)
    p = OpProgram(
        [c, 2],
        {"x": Reals[6, 2]},
        [
            Operation(ops.GetitemOp(offset=0), (2, 0)),
            Operation(ops.GetitemOp(offset=0), (3, 1)),
        ],
        4,
        value_types=[ValueType((4, 2), "real"), ValueType((2,), "real")],
    )
    q = optimize(p)
    assert [type(o.op).__name__ for o in q.operations] == ["GetsliceOp"]
    assert canonical_index(q.operations[0].op.defaults["index"], (6, 2)) == (3,)
    assert_matches(q(x=x), to_numpy(x)[3])


@pytest.mark.parametrize("of_a_cat", [False, True], ids=["of_an_input", "of_a_cat"])
def test_equal_slices_spelled_differently_become_one_value(of_a_cat):
    x, y = backend_randn(4, 4), backend_randn(4, 4)
    operations = [Operation(ops.CatOp(axis=0), (0, 1), packed=True)]  # 2: (8, 4)
    source = 2 if of_a_cat else 0  # slices 3:5 of the cat cross its parts
    start = 3 if of_a_cat else 2
    operations += [
        Operation(
            ops.GetsliceOp(index=(Ellipsis, slice(start, start + 2), slice(None))),
            (source,),
        ),
        Operation(ops.GetsliceOp(index=(slice(start, start + 2, 1),)), (source,)),
        Operation(ops.add, (3, 4)),
    ]
    p = OpProgram(
        [],
        {"x": Reals[4, 4], "y": Reals[4, 4]},
        operations,
        5,
        value_types=[ValueType((8, 4), "real")] + [ValueType((2, 4), "real")] * 3,
    )
    q = optimize(p)
    names = [type(o.op).__name__ for o in q.operations]
    assert names.count("GetsliceOp") == 1, q
    expected = np.concatenate([to_numpy(x), to_numpy(y)]) if of_a_cat else x
    assert_matches(q(x=x, y=y), 2 * to_numpy(expected)[start : start + 2])


def test_equal_constants_are_one_argument():
    # gathers at equal constant positions, built apart, gather once; 0.0 and
    # -0.0 stay apart (1 / x tells them apart)
    x = backend_randn(5)
    positions = [from_numpy(np.array([4, 0, 2])) for _ in range(2)]
    zeros = [from_numpy(np.array([0.0], np.float32)) for _ in range(2)]
    zeros.append(from_numpy(np.array([-0.0], np.float32)))
    p = OpProgram(
        positions + zeros,
        {"x": Reals[5]},
        [
            Operation(ops.GetitemOp(offset=0), (5, 0)),
            Operation(ops.GetitemOp(offset=0), (5, 1)),
            Operation(ops.truediv, (5, 2)),
            Operation(ops.truediv, (5, 3)),
            Operation(ops.truediv, (5, 4)),
        ],
        (6, 7, 8, 9, 10),
    )
    q = optimize(p)
    names = [type(o.op).__name__ for o in q.operations]
    assert names.count("GetitemOp") == 1 and names.count("TruedivOp") == 2, q
    with np.errstate(divide="ignore", invalid="ignore"):
        assert_matches(q(x=x), p(x=x))
        first, second, positive, again, negative = map(to_numpy, q(x=x))
    np.testing.assert_array_equal(first, to_numpy(x)[[4, 0, 2]])
    np.testing.assert_array_equal(positive, again)
    np.testing.assert_array_equal(np.signbit(positive), ~np.signbit(negative))


@pytest.mark.parametrize("batch", [(), (3,)], ids=str)
def test_the_gram_matrix_of_a_qr_factor_is_the_forward_product(batch):
    # cholesky(R^T R), R from qr(M^T), is cholesky(M M^T): funsor's backward
    # sampling redoes the forward pass's factor that way
    m = backend_randn(*batch, 2, 5)
    swap = ops.TransposeOp(axis1=-1, axis2=-2)
    square, wide, tall = (
        ValueType(batch + s, "real") for s in [(2, 2), (2, 5), (5, 2)]
    )
    p = OpProgram(
        [],
        {"m": Reals[batch + (2, 5)]},
        [
            Operation(swap, (0,)),  # 1: M^T
            Operation(ops.matmul, (0, 1)),  # 2: M M^T
            Operation(ops.cholesky, (2,)),  # 3
            Operation(ops.qr, (1,)),  # 4
            Operation(extra_ops.tuple_item, (4,)),  # 5: Q
            Operation(extra_ops.TupleItemOp(index=1), (4,)),  # 6: R
            Operation(swap, (6,)),  # 7
            Operation(ops.matmul, (7, 6)),  # 8: R^T R
            Operation(ops.cholesky, (8,)),  # 9
        ],
        (3, 9, 5),
        value_types=[tall, square, square, None, tall, square, square, square, square],
    )
    q = optimize(p)
    names = [type(o.op).__name__ for o in q.operations]
    assert names.count("CholeskyOp") == 1  # shared
    first, second, _ = q(m=m)
    assert_matches(second, first, rtol=1e-4, atol=1e-5)
    assert_matches(q(m=m), p(m=m), rtol=1e-4, atol=1e-5)


def _swap(x):
    return ops.transpose(x, -1, -2)


def _projection_as_column(m, u):  # R^T (Q^T u)
    q, r = ops.qr(m)
    return ops.matmul(_swap(r), ops.matmul(_swap(q), u))


def _projection_of_a_vector(m, u):  # R^T (u Q), u a vector
    q, r = ops.qr(m)
    return ops.matmul(_swap(r), ops.matmul(u[..., 0], q))


def _projection_of_a_row(m, u):  # R^T (u^T Q)^T, u^T a row
    q, r = ops.qr(m)
    row = ops.matmul(_swap(u), q)
    column = ops.ReshapeOp(shape=tuple(row.shape[:-2]) + (row.shape[-1], 1))(row)
    return ops.matmul(_swap(r), column)


def _noise_like_the_projection(m, u):  # a draw whose prototype reads Q
    q, r = ops.qr(m)
    projected = ops.matmul(_swap(u), q)
    return ops.randn(projected, tuple(projected.shape)), ops.matmul(_swap(r), r)


@pytest.mark.parametrize("batch", [(), (3,)], ids=str)
@pytest.mark.parametrize(
    "fn",
    [
        _projection_as_column,
        _projection_of_a_vector,
        _projection_of_a_row,
        _noise_like_the_projection,
    ],
)
def test_products_with_qr_factors_are_written_with_the_matrix(fn, batch):
    # funsor's backward sampling projects on Q only to multiply by R^T again;
    # written with M, the QR (the costliest op of an AutoGaussian) is dead
    if fn is _projection_of_a_vector and batch:
        pytest.skip("a vector times a batch of Q broadcasts another way")
    if fn is _noise_like_the_projection and BACKEND == "jax":
        pytest.skip("jax draws take explicit keys")
    from funsor_lowering import trace_function

    arrays = {"m": backend_randn(*batch, 6, 3), "u": backend_randn(*batch, 6, 1)}
    program = trace_function(fn, arrays)
    names = [type(o.op).__name__ for o in program.operations]
    # (numpy's and jax's matmuls promote dtypes: a draw's prototype computed
    # by one says more than its operands do)
    if fn is not _noise_like_the_projection or BACKEND == "torch":
        assert "QrOp" not in names, program
    if fn is _noise_like_the_projection:  # the same draws
        expected = _seeded(fn, **arrays)
        assert_matches(_seeded(program, **arrays), expected, rtol=1e-4, atol=1e-5)
    else:
        assert_matches(program(**arrays), fn(**arrays), rtol=1e-4, atol=1e-5)


def _cholesky_of(g):
    return ops.cholesky(g)


def _refactored(g, u):  # cholesky(L L^T) is L
    chol = _cholesky_of(g)
    return ops.cholesky(ops.matmul(chol, _swap(chol)))


def _solved_and_multiplied(g, u):  # L (L^-1 u) is u
    chol = _cholesky_of(g)
    return ops.matmul(chol, ops.triangular_solve(u, chol))


def _solved_vector_and_multiplied(g, u):  # L (L^-1 u)[:, 0] is u[:, 0]
    chol = _cholesky_of(g)
    vector = ops.getslice(ops.triangular_solve(u, chol), (Ellipsis, 0))
    return ops.matmul(chol, vector)


def _solved_transposed_and_multiplied(g, u):  # L (L^-T u): no identity
    chol = _cholesky_of(g)
    return ops.matmul(chol, ops.triangular_solve(u, chol, transpose=True))


@pytest.mark.parametrize(
    "fn, removed, batch",
    [
        (fn, removed, batch)
        for fn, removed in [
            (_refactored, "MatmulOp"),
            (_solved_and_multiplied, "TriangularSolveOp"),
            (_solved_vector_and_multiplied, "TriangularSolveOp"),
            (_solved_transposed_and_multiplied, None),
        ]
        for batch in [(), (3,)]
        # (a vector times a batch of matrices broadcasts another way)
        if not (fn is _solved_vector_and_multiplied and batch)
    ],
    ids=lambda x: getattr(x, "__name__", str(x)),
)
def test_products_with_cholesky_factors_are_written_without_them(fn, removed, batch):
    # a Gaussian compressed by Cholesky forms its precision L L^T and its
    # information vector L w (w = L^-1 u) again; written as the matrix and
    # u, common subexpression elimination shares the first factorization
    from funsor_lowering import trace_function

    m = backend_randn(*batch, 4, 4)
    g = ops.add(ops.matmul(m, _swap(m)), ops.new_eye(m, (4,)))
    arrays = {"g": g, "u": backend_randn(*batch, 4, 1)}
    program = trace_function(fn, arrays)
    names = [type(o.op).__name__ for o in program.operations]
    assert names.count("CholeskyOp") == (0 if removed == "TriangularSolveOp" else 1)
    if removed is not None:
        assert removed not in names, program
    else:
        assert names.count("MatmulOp") == 1, program
    assert_matches(program(**arrays), fn(**arrays), rtol=1e-4, atol=1e-5)


def _seeded(fn, **arrays):
    """``fn(**arrays)`` drawing from a freshly seeded global random state."""
    if BACKEND == "torch":
        import torch

        torch.manual_seed(0)
    np.random.seed(0)
    return fn(**arrays)


def test_ffbs_factors_each_precision_once(monkeypatch):
    # funsor's group-by-group recipe (traced where the dense draw does not
    # apply, here forced off): the backward pass samples from conditionals
    # whose precisions the forward pass factored already: no two Cholesky
    # factors are equal
    from benchmarks.cases import FFBS, random_inputs
    from funsor_lowering.runtime.codegen import evaluate
    from funsor_lowering.tracing import dense_ffbs

    monkeypatch.setattr(dense_ffbs, "MAX_DIM", 0)
    case = FFBS()
    arrays = random_inputs(case)
    program = case.program(arrays)
    values, _ = evaluate(program, program.validate(arrays))
    first = program.first_operation
    factors = [
        to_numpy(values[first + k])
        for k, o in enumerate(program.operations)
        if isinstance(o.op, ops.CholeskyOp)
    ]
    assert len(factors) == 4  # 7 before the forward factors were reused
    for a, b in itertools.combinations(factors, 2):
        assert a.shape != b.shape or not np.allclose(a, b)


# ----------------------------------------------------------- vector products
def _rows_times(spelling):
    """``v @ m`` for a batch of row vectors ``v``, as funsor's Gaussians
    write it: through a unit axis, added and dropped by slicing or reshape."""

    def product(v, m):
        *batch, n = v.shape
        if spelling == "slice":
            rows = ops.getslice(v, (Ellipsis, None, slice(None)))
        else:
            rows = ops.ReshapeOp(shape=(*batch, 1, n))(v)
        out = ops.matmul(rows, m)
        if spelling == "slice":
            return ops.getslice(out, (Ellipsis, 0, slice(None)))
        return ops.ReshapeOp(shape=(*batch, out.shape[-1]))(out)

    return product


def _matrix_times_columns(spelling):
    """``m @ v`` for a batch of column vectors ``v``, through a unit axis."""

    def product(v, m):
        *batch, n = v.shape
        if spelling == "slice":
            columns = ops.getslice(v, (Ellipsis, None))
        else:
            columns = ops.ReshapeOp(shape=(*batch, n, 1))(v)
        out = ops.matmul(m, columns)
        if spelling == "slice":
            return ops.getslice(out, (Ellipsis, 0))
        return ops.ReshapeOp(shape=(*batch, out.shape[-2]))(out)

    return product


@given(
    batch=st.lists(st.integers(1, 3), max_size=2).map(tuple),
    n=st.integers(1, 4),
    k=st.integers(1, 4),
    rows=st.booleans(),
    spelling=st.sampled_from(["slice", "reshape"]),
    batched_matrix=st.booleans(),
)
def test_vector_products_drop_their_unit_axis_where_the_matrix_has_no_batch(
    batch, n, k, rows, spelling, batched_matrix
):
    # (v[..., None, :] @ m)[..., 0, :] is v @ m, and (m @ v[..., None])[..., 0]
    # is v @ m^T, for a matrix m without batch axes: one or two calls, not three
    from funsor_lowering import trace_function

    matrix_batch = batch if batched_matrix else ()
    if rows:
        fn, m = _rows_times(spelling), backend_randn(*matrix_batch, n, k)
    else:
        fn, m = _matrix_times_columns(spelling), backend_randn(*matrix_batch, k, n)
    arrays = {"v": backend_randn(*batch, n), "m": m}
    program = trace_function(fn, arrays)
    names = sorted(type(o.op).__name__ for o in program.operations)
    if not (batched_matrix and batch):
        expected = ["MatmulOp"] if rows else ["MatmulOp", "TransposeOp"]
        assert names == expected, program
    else:  # a batch of matrices: the products keep their unit axes
        assert names.count("MatmulOp") == 1 and len(names) == 3, program
    assert_matches(program(**arrays), fn(**arrays), rtol=1e-5, atol=1e-5)


def test_ffbs_multiplies_vectors_without_unit_axes(monkeypatch):
    # funsor's backward sampling (group by group, the dense draw forced off)
    # multiplies each batch of draws by a factor: no product of a unit-axis
    # row or column with a matrix is left
    from benchmarks.cases import FFBS, random_inputs
    from funsor_lowering.tracing import dense_ffbs

    monkeypatch.setattr(dense_ffbs, "MAX_DIM", 0)
    case = FFBS()
    program = case.program(random_inputs(case))
    shapes = [getattr(t, "shape", None) for t in program.value_types]
    first = program.first_operation
    reshaped = {  # values whose unit axis a reshape drops
        a
        for o in program.operations
        if isinstance(o.op, ops.ReshapeOp)
        for a in o.args
        if len(shapes[a]) == len(o.op.defaults["shape"]) + 1
    }
    products = 0
    for k, operation in enumerate(program.operations, first):
        if isinstance(operation.op, ops.MatmulOp):
            left, right = (shapes[a] for a in operation.args)
            products += 1
            if k in reshaped:
                assert len(right) != 2 or left[-2] != 1, program
                assert len(left) != 2 or right[-1] != 1, program
    assert products > 15


# -------------------------------------------------------------------- matmuls
EINSUMS = [
    ("...ij,...jk->...ik", (5, 2, 3), (5, 3, 4)),
    ("...ij,...jk->...ik", (2, 3), (5, 3, 4)),
    ("...ij,...j->...i", (5, 2, 3), (5, 3)),
    ("...ij,...j->...i", (5, 2, 3), (3,)),
    ("...i,...ij->...j", (5, 3), (5, 3, 4)),
    ("...i,...ij->...j", (3,), (3, 4)),
    ("ab,bc->ac", (2, 3), (3, 4)),
    ("nab,nbc->nac", (6, 2, 3), (6, 3, 4)),
    ("ab,b->a", (2, 3), (3,)),
    ("a,a->", (3,), (3,)),
    ("ab,ab->a", (2, 3), (2, 3)),
]
NOT_MATMULS = [
    ("ab,bc->ca", (2, 3), (3, 4)),  # permuted output
    ("ab,cb->ac", (2, 3), (4, 3)),  # transposed operand
    ("abc,cd->abd", (2, 5, 3), (3, 4)),  # two free letters on the left
]


def einsum_program(equation, a, b):
    inputs = {"a": Reals[a], "b": Reals[b]}
    out = np.einsum(equation, np.zeros(a), np.zeros(b)).shape
    operation = Operation(ops.EinsumOp(equation=equation), (0, 1), packed=True)
    return OpProgram([], inputs, [operation], 2, value_types=[ValueType(out, "real")])


@pytest.mark.parametrize("equation,a,b", EINSUMS)
def test_einsums_that_are_matrix_products_run_as_matmul(equation, a, b):
    program = einsum_program(equation, a, b)
    rewritten = einsums_as_matmuls(program).program
    assert "einsum" not in rewritten.stats()["by_op"]
    assert rewritten.stats()["by_op"]["matmul"] == 1
    arrays = {"a": backend_randn(*a), "b": backend_randn(*b)}
    assert_matches(rewritten(**arrays), program(**arrays), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("equation,a,b", NOT_MATMULS)
def test_other_einsums_stay(equation, a, b):
    program = einsum_program(equation, a, b)
    assert not einsums_as_matmuls(program).modified


def test_traced_gaussian_programs_hold_no_einsum():
    from benchmarks.cases import FFBS, Kalman, random_inputs

    for case in (Kalman(10), FFBS()):
        program = case.program(random_inputs(case))
        stats = program.stats()
        assert "einsum" not in stats["by_op"], case.name
        # items of qr's (Q, R) are Python indexing, not backend calls (the
        # Kalman filter compresses by QR; the FFBS draw is dense: no QR)
        tuple_items = stats["by_op"].get("tuple_item", 0)
        assert tuple_items > 0 or case.name.startswith("ffbs")
        assert stats["backend_calls"] == stats["operations"] - tuple_items


# ------------------------------------------------------- backend fast calls
@pytest.mark.skipif(BACKEND != "numpy", reason="numpy's fast implementations")
def test_numpy_logsumexp_is_exact_on_small_and_large_arrays_with_infinities():
    from funsor_lowering.backends.numpy_backend import LOGSUMEXP_SHIFT_SIZE

    for size in (4, LOGSUMEXP_SHIFT_SIZE + 1):
        x = np.random.RandomState(0).randn(size, 3).astype(np.float32)
        x[1] = -np.inf
        x[2, 0] = np.inf
        for axis, keepdims in itertools.product((None, 0, 1, (0, 1)), (False, True)):
            term = Variable("x", Reals[size, 3])
            program = compile_funsor(ops.logsumexp(term, axis, keepdims))
            expected = ops.logsumexp(x, axis, keepdims)  # funsor's numpy version
            actual = program(x=x)
            assert actual.shape == np.shape(expected) and actual.dtype == x.dtype
            np.testing.assert_allclose(actual, expected, rtol=1e-6)


@pytest.mark.skipif(BACKEND != "numpy", reason="numpy's fast implementations")
@settings(deadline=None, max_examples=40)
@given(st.data())
def test_numpy_logsumexp_over_a_short_axis_of_a_large_array_equals_funsors(data):
    from funsor_lowering.backends.numpy_backend import (
        LOGSUMEXP_SHIFT_SIZE,
        SHORT_AXIS,
        _short_axis,
    )

    rank = data.draw(st.integers(2, 4), label="rank")
    axis = data.draw(st.integers(-rank, rank - 1), label="axis")
    shape = [data.draw(st.integers(1, 6)) for _ in range(rank)]
    shape[axis] = data.draw(st.integers(1, SHORT_AXIS), label="length")
    other = (axis + 1) % rank  # large enough for the slices' path
    rest = math.prod(shape) // shape[axis] // shape[other]
    shape[other] = -(-LOGSUMEXP_SHIFT_SIZE // rest)
    dtype = data.draw(st.sampled_from([np.float32, np.float64]), label="dtype")
    rng = np.random.RandomState(data.draw(st.integers(0, 2**16), label="seed"))
    x = rng.randn(*shape).astype(dtype)
    for special in (-np.inf, np.inf, np.nan):  # a few of each
        x[rng.rand(*shape) < data.draw(st.sampled_from([0.0, 0.05, 0.9]))] = special
    keepdims = data.draw(st.booleans(), label="keepdims")
    if data.draw(st.booleans(), label="as a tuple"):
        axis = (axis,)
    assert _short_axis(x, axis) is not None  # the path under test

    term = Variable("x", Reals[tuple(shape)])
    program = compile_funsor(ops.logsumexp(term, axis, keepdims))
    with np.errstate(invalid="ignore"):  # funsor's inf - inf
        expected = ops.logsumexp(x, axis, keepdims)  # funsor's numpy version
    actual = program(x=x)
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    # a sum of exps near 1 leaves a result near 0 with the inputs' rounding
    atol = 8 * np.finfo(dtype).eps  # inputs are standard normal
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=atol)


@pytest.mark.skipif(BACKEND != "numpy", reason="numpy's fast implementations")
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int8, np.bool_])
@pytest.mark.parametrize("axis", [None, 1, (0, 1)])
def test_numpy_reductions_equal_funsors_with_its_dtypes(dtype, axis):
    from funsor_lowering.backends import array_backend
    from funsor_lowering.runtime.codegen import resolve

    x = (np.arange(12).reshape(3, 4) % 3).astype(dtype)
    for op_type in (ops.SumOp, ops.ProdOp, ops.AmaxOp, ops.AminOp, ops.AllOp):
        op = op_type(axis=axis, keepdims=False)
        impl, extra, kwargs = resolve(op, [x], array_backend("numpy"))
        assert impl is not op_type.dispatcher.partial_call(x)  # the fast one
        actual, expected = impl(x, *extra, **kwargs), op(x)
        np.testing.assert_array_equal(actual, expected)
        assert np.asarray(actual).dtype == np.asarray(expected).dtype, op


@pytest.mark.skipif(BACKEND != "numpy", reason="numpy's fast implementations")
@settings(deadline=None, max_examples=60)
@given(st.data())
def test_numpy_array_methods_equal_funsors_functions(data):
    # swapaxes / diagonal methods, take for a gather by an integer array
    from funsor_lowering.backends import array_backend
    from funsor_lowering.runtime.codegen import resolve

    shape = data.draw(st.lists(st.integers(1, 4), min_size=2, max_size=4), "shape")
    x = np.random.default_rng(len(shape)).normal(size=shape)
    rank = len(shape)
    axes = st.integers(-rank, rank - 1)
    a1, a2 = data.draw(axes, "axis1"), data.draw(axes, "axis2")
    offset = data.draw(st.integers(0, rank - 1), "offset")
    index_shape = data.draw(st.lists(st.integers(0, 3), max_size=2), "index")
    index = np.random.default_rng(1).integers(
        -shape[offset], shape[offset], size=index_shape
    )
    cases = [(ops.TransposeOp(a1, a2), [x]), (ops.GetitemOp(offset), [x, index])]
    if a1 % rank != a2 % rank:
        cases.append((ops.DiagonalOp(a1, a2), [x]))
    for op, operands in cases:
        impl, extra, kwargs = resolve(op, operands, array_backend("numpy"))
        assert impl is not type(op).dispatcher.partial_call(*operands), op
        actual, expected = impl(*operands, *extra, **kwargs), op(*operands)
        assert actual.shape == expected.shape and actual.dtype == expected.dtype
        np.testing.assert_array_equal(actual, expected)


def _numpy_program_warnings(fn, **arrays):
    """The source of ``fn``'s compiled program's body, and ``(outputs,
    warning messages)`` of eager funsor (``fn`` of funsor ops on the arrays)
    and of the program, second call (its generated entry)."""
    import warnings

    from funsor_lowering import compile_function

    program = compile_function(fn, **{k: Reals[v.shape] for k, v in arrays.items()})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program(**arrays)  # the first call builds the body
    body = program.specialized(program.validate(arrays)).__source__
    results = [body]
    for run in (lambda: fn(**arrays), lambda: program(**arrays)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = run()
        results.append((out, sorted(str(w.message) for w in caught)))
    return results


@pytest.mark.skipif(BACKEND != "numpy", reason="numpy's floating point errors")
def test_numpy_logs_of_zero_are_quiet_as_funsors():
    # several logs run under one errstate per call: log(0) = -inf, no warning
    def fn(x, y):
        return ops.exp(ops.log(x) + ops.log(y)) + ops.log(x)

    x, y = np.array([0.0, 1.0, 2.0]), np.array([3.0, 0.0, 1.0])
    body, (expected, eager_warnings), (actual, warnings_) = _numpy_program_warnings(
        fn, x=x, y=y
    )
    assert body.count("with ") == 1  # the logs' errstate, once
    np.testing.assert_array_equal(actual, expected)
    assert warnings_ == eager_warnings == []


@pytest.mark.skipif(BACKEND != "numpy", reason="numpy's floating point errors")
def test_numpy_division_by_zero_still_warns_beside_logs():
    def fn(x, y):
        return ops.log(x) + ops.log(y) + ops.reciprocal(y)

    x, y = np.array([0.0, 1.0, 2.0]), np.array([3.0, 0.0, 1.0])
    body, (expected, eager_warnings), (actual, warnings_) = _numpy_program_warnings(
        fn, x=x, y=y
    )
    assert "with " not in body  # each log ignores its own divide errors
    np.testing.assert_array_equal(actual, expected)
    assert warnings_ == eager_warnings
    assert any("divide by zero" in w for w in warnings_)


@pytest.mark.skipif(BACKEND != "jax", reason="jax's lax specializations")
@given(st.data())
def test_jax_layout_specializations_equal_jax_numpy(data):
    import jax.numpy as jnp

    from funsor_lowering.backends.jax_primitives import specialize

    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    x = jnp.asarray(np.arange(np.prod(shape), dtype=np.float32).reshape(shape))
    items = []
    for size in shape[: data.draw(st.integers(0, len(shape)))]:
        items.append(
            data.draw(
                st.one_of(
                    st.integers(-size, size - 1),
                    st.builds(
                        slice,
                        st.one_of(st.none(), st.integers(-size - 1, size + 1)),
                        st.one_of(st.none(), st.integers(-size - 1, size + 1)),
                        st.one_of(st.none(), st.integers(1, 3)),
                    ),
                )
            )
        )
    for _ in range(data.draw(st.integers(0, 2))):  # new axes anywhere
        items.insert(data.draw(st.integers(0, len(items))), None)
    if data.draw(st.booleans()):  # after the items, so they keep their axes
        items.append(Ellipsis)
    index = tuple(items)
    take = specialize(ops.GetsliceOp, (x,), (index,))
    np.testing.assert_array_equal(take(x), x[index])
    perm = tuple(data.draw(st.permutations(range(len(shape)))))
    np.testing.assert_array_equal(
        specialize(ops.PermuteOp, (x,), (perm,))(x), jnp.transpose(x, perm)
    )
    flat = specialize(ops.ReshapeOp, (x,), ((-1,),))(x)
    np.testing.assert_array_equal(flat, x.reshape(-1))
    grown = specialize(ops.ExpandOp, (x,), ((2,) + shape,))(x)
    np.testing.assert_array_equal(grown, jnp.broadcast_to(x, (2,) + shape))
    dim = data.draw(st.integers(-len(shape) - 1, len(shape)))
    np.testing.assert_array_equal(
        specialize(ops.UnsqueezeOp, (x,), (dim,))(x), jnp.expand_dims(x, dim)
    )
    parts = (x, x + 1)
    np.testing.assert_array_equal(
        specialize(ops.CatOp, (parts,), (-1,))(parts), jnp.concatenate(parts, -1)
    )


@pytest.mark.skipif(BACKEND != "jax", reason="jax's jitted kernels")
@pytest.mark.parametrize(
    "x_shape, y_shape",
    [((3, 2), (3, 3)), ((4, 3, 2), (4, 3, 3)), ((4, 2, 3, 2), (4, 1, 3, 3))],
)
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("transpose", [False, True])
def test_jax_linear_algebra_runs_as_one_kernel_equal_to_funsors(
    x_shape, y_shape, upper, transpose
):
    from funsor_lowering.backends import array_backend
    from funsor_lowering.runtime.codegen import resolve

    def kernel(op, operands):
        impl, extra, kwargs = resolve(op, operands, array_backend("jax"))
        assert type(impl).__name__ == "PjitFunction"  # one jitted call
        return impl(*operands, *extra, **kwargs)

    rng = np.random.RandomState(0)
    x = from_numpy(rng.randn(*x_shape).astype(np.float32))
    tri = np.tril(rng.randn(*y_shape)) + 3 * np.eye(y_shape[-1])
    y = from_numpy((np.swapaxes(tri, -1, -2) if upper else tri).astype(np.float32))
    op = ops.TriangularSolveOp(upper=upper, transpose=transpose)
    np.testing.assert_array_equal(kernel(op, [x, y]), op(x, y))
    square = from_numpy(tri.astype(np.float32))
    for op in (ops.TriangularInvOp(upper=False), ops.CholeskyInverseOp()):
        np.testing.assert_allclose(
            kernel(op, [square]), op(square), rtol=1e-6, atol=1e-6
        )


@pytest.mark.skipif(BACKEND != "jax", reason="jax's tiered kernels")
def test_jax_programs_called_often_run_jitted_ops_with_equal_results():
    from funsor_lowering.backends.jax_tiering import _TIERED, HOT_CALLS, Tiered

    T, S = 20, 3
    shapes = {"init": (S,), "trans": (T, S, S), "emit": (T, S)}
    variables = {k: Variable(k, Reals[s]) for k, s in shapes.items()}
    term = hmm_term(T, S, variables, True) * 0.5 + 1.0  # number operands
    program = compile_funsor(term)
    arrays = {k: backend_randn(*s) for k, s in shapes.items()}
    expected = hmm_term(T, S, {k: Tensor(v) for k, v in arrays.items()}, True)
    with funsor.interpretations.eager:
        expected = funsor.interpreter.reinterpret(expected).data * 0.5 + 1.0
    before = {id(k): k.calls for k in _TIERED.values()}
    results = [program(**arrays)]  # kernels this program calls count it
    kernels = [
        k
        for k in _TIERED.values()
        if k.jitted is None and k.calls > before.get(id(k), 0)
    ]
    results += [program(**arrays) for _ in range(HOT_CALLS + 1)]
    assert kernels and all(k.jitted is not None for k in kernels)  # now jitted
    assert all(isinstance(k, Tiered) for k in kernels)
    assert_matches(results[0], expected, rtol=1e-4, atol=1e-4)
    for result in results[1:]:  # eager calls and jitted ones agree exactly
        np.testing.assert_array_equal(to_numpy(result), to_numpy(results[0]))


def test_programs_make_no_more_backend_calls_than_operations():
    """The counted backend calls of a batched HMM program: about one per
    operation (numpy's large logsumexp makes a few), and fewer than a
    sequential forward pass makes (at least 2 a step)."""
    from benchmarks.calls import count_calls

    T, S = 64, 3
    shapes = {"init": (S,), "trans": (T, S, S)}
    variables = {k: Variable(k, Reals[s]) for k, s in shapes.items()}
    program = compile_funsor(hmm_term(T, S, variables, False))
    arrays = {k: backend_randn(*s) for k, s in shapes.items()}
    calls = count_calls(program, arrays, BACKEND)
    assert calls <= 2 * len(program.operations) < 3 * (T - 1)


def test_counted_calls_of_hand_written_code():
    from benchmarks.calls import count_calls

    def three(x):
        return ops.exp(x + 1).sum()  # add, exp, sum: three backend calls

    x = from_numpy(np.ones((3, 2), np.float32))
    assert count_calls(three, {"x": x}, BACKEND) == 3
    np.testing.assert_allclose(to_numpy(three(x)), 6 * np.e**2, rtol=1e-6)


@pytest.mark.parametrize("c", [1.5, -2.0, 3])
def test_negations_fold_into_products_and_sums_with_numbers(c):
    x = Variable("x", Reals[4])
    with reflect:  # funsor's normal form would write -x as x * -1
        terms = [-x * c, c * -x, -x + c, c + -x, -ops.tanh(x) * c]
        kept = ops.exp(-x) * c  # nothing to fold the negation into
    data = backend_randn(4)
    for term in terms:
        program = compile_funsor(term)
        assert "neg" not in program.stats()["by_op"], term
        assert_matches(program(x=data), term(x=Tensor(data)).data)
    program = compile_funsor(kept)
    assert program.stats()["by_op"]["neg"] == 1
    assert_matches(program(x=data), kept(x=Tensor(data)).data)


_TUPLE_INDEXING_SCRIPT = """
import importlib, sys
import funsor
from funsor.domains import Reals
from funsor.tensor import Tensor
from funsor.terms import Tuple, Variable
from funsor_lowering import compile_funsor, trace_function
from funsor_lowering.ops.extra_ops import getslice_op

backend = sys.argv[1]
funsor.set_backend(backend)
modules = {"numpy": "numpy", "torch": "torch", "jax": "jax.numpy"}
xp = importlib.import_module(modules[backend])
x = Variable("x", Reals[4, 3])
arrays = {"y": xp.ones((4, 3))}
programs = [  # kept alive (funsor's op cache holds ops weakly); trace first
    trace_function(lambda y: y[(1,)] + y[(slice(2, 3),)].sum(0), arrays),
    compile_funsor(x[1] + x[2:3].sum(0)),
]
for program in programs:
    for operation in program.operations:
        index = operation.op.defaults.get("index")
        assert not (isinstance(index, tuple) and len(index) == 1), operation
assert getslice_op((1,)).defaults["index"] == 1
pair = Tuple((Tensor(xp.ones(3)), Tensor(xp.zeros(2))))
assert pair[1].data.shape == (2,) and float(pair[1].data.sum()) == 0.0
print("ok")
"""


def test_funsor_tuple_indexing_still_works_after_programs_slice_arrays():
    """funsor caches getslice ops by ``(index,)``: an op made with the index
    ``(1,)`` would be the one ``Tuple(...)[1]`` gets, and funsor's eager
    Tuple indexing fails with it. Ops made by compiling or tracing (``y[(1,)]``
    of a traced array) never hold one-item tuples. Run in a fresh process:
    any code of this one may have made such an op first (``funsor`` does for
    ``t[(1,)]``), and funsor keeps the first one made."""
    result = subprocess.run(
        [sys.executable, "-c", _TUPLE_INDEXING_SCRIPT, BACKEND],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
