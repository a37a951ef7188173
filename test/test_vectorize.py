"""Vectorization of unrolled programs (``program/vectorize.py``): chains funsor
unrolled before compiling run as a few batched operations per level, and
every result equals eager funsor's."""

import math

import funsor
import numpy as np
import pytest
from funsor import ops
from funsor.domains import Bint, Real, Reals
from funsor.interpretations import lazy
from funsor.sum_product import MarkovProduct, sequential_sum_product
from funsor.tensor import Tensor
from funsor.terms import Variable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from funsor_lowering import compile_funsor
from funsor_lowering.funsor_hooks import package_shape_rules
from funsor_lowering.ir.program import Operation, OpProgram, ValueType
from funsor_lowering.passes.pipeline import optimize
from funsor_lowering.passes.vectorize import vectorize

from .helpers import assert_matches, backend_randn, check_compiled, from_numpy
from .strategies import VARIABLES, expressions

SEMIRINGS = [(ops.logaddexp, ops.add), (ops.add, ops.mul)]


def lazy_chain(sum_op, prod_op, T, batch):
    """``sequential_sum_product`` built under ``lazy``: funsor unrolls it
    into a tree of per-step contractions."""
    shape = (batch, T, 3, 3) if batch else (T, 3, 3)
    trans = Variable("trans", Reals[shape])
    trans = (
        trans["b", "time", "prev", "curr"] if batch else trans["time", "prev", "curr"]
    )
    with lazy:
        return sequential_sum_product(
            sum_op, prod_op, trans, Variable("time", Bint[T]), {"prev": "curr"}
        )


@pytest.mark.parametrize("batch", [0, 2])
@pytest.mark.parametrize("semiring", SEMIRINGS, ids=["logaddexp", "add"])
@pytest.mark.parametrize("T", [1, 2, 3, 5, 8, 13, 100])
def test_lazy_sequential_sum_product_equals_eager(T, semiring, batch):
    sum_op, prod_op = semiring
    expr = lazy_chain(sum_op, prod_op, T, batch)
    data = backend_randn(*((batch, T, 3, 3) if batch else (T, 3, 3)))
    if prod_op is ops.mul:
        data = ops.exp(data * 0.1)
    names = ("b", "time", "prev", "curr") if batch else ("time", "prev", "curr")
    expected = sequential_sum_product(
        sum_op,
        prod_op,
        Tensor(data)[names],
        Variable("time", Bint[T]),
        {"prev": "curr"},
    )
    program = compile_funsor(expr)
    order = [n for n in expected.inputs]
    assert_matches(program(trans=data), expected.align(tuple(order)).data, rtol=1e-4)
    check_compiled(expr, arrays={"trans": data}, rtol=1e-4)


@pytest.mark.parametrize("how", ["sequential_sum_product", "MarkovProduct"])
def test_operations_grow_like_log_T(how):
    """An unrolled chain compiles to O(log T) operations, as a chain built in
    a compiling block does: the count per doubling of T stays bounded."""
    counts = {}
    for T in (16, 128, 1024):
        if how == "MarkovProduct":
            trans = Variable("trans", Reals[T, 3, 3])["time", "prev", "curr"]
            with lazy:
                expr = MarkovProduct(
                    ops.logaddexp, ops.add, trans, "time", {"prev": "curr"}
                )
        else:
            expr = lazy_chain(ops.logaddexp, ops.add, T, 0)
        counts[T] = len(compile_funsor(expr).operations)
    # 7 doublings from 16 to 1024 (a third of the unrolled program's 6 per
    # step at T=16 is already more than this bound allows per doubling).
    assert counts[1024] <= counts[16] + 7 * 12, counts
    assert counts[1024] < 1024, counts


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    template=expressions((), depth=2),
    n=st.integers(4, 9),
    combine=st.sampled_from(["add", "logaddexp", "max"]),
    seed=st.integers(0, 2**16),
)
def test_unrolled_copies_of_an_expression_equal_eager(template, n, combine, seed):
    """``n`` copies of a random expression, each over its own constant in
    place of ``a``, combined by a balanced tree: the copies are isomorphic,
    so they batch; the result equals eager funsor."""
    rng = np.random.RandomState(seed)
    with package_shape_rules():  # as the template was built (strategies.py)
        copies = [
            template(a=Tensor(from_numpy(np.asarray(rng.randn(), np.float32))))
            for _ in range(n)
        ]
        op = {"add": ops.add, "logaddexp": ops.logaddexp, "max": ops.max}[combine]
        while len(copies) > 1:
            pairs = [op(x, y) for x, y in zip(copies[::2], copies[1::2])]
            copies = pairs + ([copies[-1]] if len(copies) % 2 else [])
    (expr,) = copies
    if not any(d.dtype == "real" for d in expr.inputs.values()):
        return  # a constant: nothing to compile against
    arrays = {
        k: backend_randn(*v.output.shape)
        for vs in VARIABLES.values()
        for v in vs
        for k in [v.name]
        if k in expr.inputs
    }
    check_compiled(expr, arrays=arrays, rtol=1e-4, atol=1e-5)


def _tree_program(n, draws=False):
    """``n`` leaves ``x * c_k`` summed pairwise, then (``draws``) minus
    ``randn(root)`` and ``2 * randn(x)``, drawn in that order."""
    t = ValueType((3,), "real")
    constants = [np.full(3, float(k)) for k in range(n)] + [2.0]
    x, first = n + 1, n + 2
    operations = [Operation(ops.mul, (x, k)) for k in range(n)]
    level = [first + k for k in range(n)]
    while len(level) > 1:
        nxt = []
        for a, b in zip(level[::2], level[1::2]):
            operations.append(Operation(ops.add, (a, b)))
            nxt.append(first + len(operations) - 1)
        level = nxt + ([level[-1]] if len(level) % 2 else [])
    output = level[0]
    if draws:
        randn = ops.RandnOp(shape=(3,))
        # The first draw stands deeper than the second: emitting by depth
        # alone would swap them.
        operations.append(Operation(randn, (output,)))
        operations.append(Operation(randn, (x,)))
        r1, r2 = first + len(operations) - 2, first + len(operations) - 1
        operations.append(Operation(ops.mul, (n, r2)))
        operations.append(Operation(ops.sub, (output, r1)))
        operations.append(
            Operation(
                ops.sub, (first + len(operations) - 1, first + len(operations) - 2)
            )
        )
        output = first + len(operations) - 1
    return OpProgram(
        constants,
        {"x": Reals[3]},
        operations,
        output,
        value_types=[t] * len(operations),
        backend="numpy",  # numpy programs (and numpy's seeded RNG) on any suite
    )


@pytest.mark.parametrize("n", [4, 7, 16, 33])
def test_tree_of_constants_batches_to_log_depth(n):
    program = _tree_program(n)
    batched = vectorize(program).program
    x = np.array([1.0, -2.0, 0.5])
    np.testing.assert_allclose(batched(x=x), x * sum(range(n)))
    assert len(batched.operations) <= 4 * math.ceil(math.log2(n)) + 4


@pytest.mark.skipif(
    funsor.get_backend() == "jax",
    reason="numpy's global RNG: with funsor's jax backend, ops.randn needs a key "
    "(keyed draws are operands, kept in order by the same chaining)",
)
def test_random_operations_keep_their_order():
    """Random draws are never batched, and their order (hence the stream of
    draws under a seed) is kept while the rest batches."""
    program = _tree_program(8, draws=True)
    batched = optimize(program)
    assert len(batched.operations) < len(program.operations)
    randn = [o for o in batched.operations if isinstance(o.op, ops.RandnOp)]
    assert len(randn) == 2
    x = np.array([1.0, 2.0, 3.0])
    np.random.seed(0)
    expected = program(x=x)
    np.random.seed(0)
    np.testing.assert_allclose(batched(x=x), expected)
    np.random.seed(0)
    first, second = np.random.randn(3), np.random.randn(3)
    np.testing.assert_allclose(expected, x * 28 - first - 2 * second)


def test_shared_real_constants_are_not_stacked():
    """Members that read one Python float share it (stacking Python floats
    could change a result's dtype)."""
    t = ValueType((), "real")
    # c0 * a, c0 * b, c1 * c, c1 * d: the float constants stay scalars
    operations = [Operation(ops.mul, (0, 2)), Operation(ops.mul, (0, 3))]
    operations += [Operation(ops.mul, (1, 4)), Operation(ops.mul, (1, 5))]
    operations += [Operation(ops.add, (6, 7)), Operation(ops.add, (8, 9))]
    operations += [Operation(ops.add, (10, 11))]
    inputs = {"a": Real, "b": Real, "c": Real, "d": Real}
    program = OpProgram(
        [0.5, 1.5], inputs, operations, 12, value_types=[t] * 7, backend="numpy"
    )
    out = vectorize(program, min_group=2).program
    assert all(np.ndim(c) == 0 for c in out.constants)
    arrays = {k: np.array(float(i), np.float32) for i, k in enumerate("abcd")}
    np.testing.assert_allclose(out(**arrays), program(**arrays))
    assert out(**arrays).dtype == np.float32
