"""Batch rules: a batched op on stacked inputs equals the op on each slice."""

import funsor
import numpy as np
import pytest
from funsor import ops

from funsor_lowering.ops.batching import batch_op

from .helpers import assert_matches, backend_randn, to_numpy

BATCH = (2, 3)
UNARY_CASES = [
    (ops.SumOp(axis=0), (4, 5)),
    (ops.SumOp(axis=None), (4, 5)),
    (ops.LogsumexpOp(axis=1), (4, 5)),
    (ops.AmaxOp(axis=(0, 1), keepdims=True), (4, 5)),
    (ops.AminOp(axis=-1), (4, 5)),
    (ops.ProdOp(axis=0), (4,)),
    (ops.MeanOp(axis=0), (4, 5)),
    (ops.ArgmaxOp(axis=1), (4, 5)),
    (ops.GetsliceOp(index=(slice(1, 3), 0)), (4, 5)),
    (ops.GetsliceOp(index=(Ellipsis, None)), (4,)),
    (ops.GetsliceOp(index=2), (4,)),
    (ops.ReshapeOp(shape=(5, 4)), (4, 5)),
    (ops.ExpandOp(shape=(3, 4, 5)), (1, 4, 5)),
    (ops.PermuteOp(dims=(1, 0)), (4, 5)),
    (ops.TransposeOp(axis1=0, axis2=1), (4, 5)),
    (ops.FlipOp(axis=(0,)), (4, 5)),  # funsor's torch flip needs a tuple
    (ops.DiagonalOp(dim1=0, dim2=1), (4, 4)),
    (ops.UnsqueezeOp(dim=0), (4,)),
    (ops.exp, (4,)),
    (ops.cholesky, (3, 3)),
]


def per_slice(fn, x, nb):
    """Apply ``fn`` to every batch slice of ``x`` and stack the results."""
    data = to_numpy(x)
    flat = data.reshape((-1,) + data.shape[nb:])
    outs = [to_numpy(fn(_from(s))) for s in flat]
    return np.stack(outs).reshape(data.shape[:nb] + outs[0].shape)


def _from(a):
    from .helpers import from_numpy

    return from_numpy(np.ascontiguousarray(a))


@pytest.mark.parametrize("op, event", UNARY_CASES, ids=[repr(c) for c in UNARY_CASES])
def test_unary_batch_rule(op, event):
    x = backend_randn(*BATCH, *event)
    if op is ops.cholesky:
        x = ops.matmul(x, ops.transpose(x, -1, -2)) + ops.new_eye(x, event[-1:]) * 3
    batched = batch_op(op, BATCH, len(event))
    assert batched is not None
    expected = per_slice(op, x, len(BATCH))
    assert_matches(batched(x), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "op",
    [ops.CatOp(axis=0), ops.CatOp(axis=-1), ops.StackOp(dim=0), ops.StackOp(dim=1)],
    ids=repr,
)
def test_finitary_batch_rule(op):
    x, y = backend_randn(*BATCH, 4, 5), backend_randn(*BATCH, 4, 5)
    batched = batch_op(op, BATCH, 2)
    stacked = ops.stack([x, y], 2)  # batch..., part, event...
    expected = per_slice(lambda s: op([s[0], s[1]]), stacked, len(BATCH))
    assert_matches(batched([x, y]), expected)


def test_ops_without_batch_rule_decline():
    assert batch_op(ops.ArgmaxOp(axis=None), BATCH, 2) is None
    assert batch_op(ops.ExpandOp(shape=(3, 4, 5)), BATCH, 2) is None


def test_true_min_on_every_backend():
    # funsor 0.4.8 registers ops.amin as jnp.amax on jax; funsor_lowering
    # registers the true min. Expected values come from numpy.
    import funsor_lowering  # noqa: F401

    data = np.array([[3.0, -1.0, 2.0], [0.5, 4.0, -2.0]], dtype=np.float32)
    x = _from(data)
    if funsor.get_backend() == "jax":
        from funsor_lowering.backends import array_backend

        array_backend("jax")  # importing the adapter registers the fix
    assert_matches(ops.amin(x, 1, False), data.min(1))
    from funsor.domains import Reals
    from funsor.terms import Variable

    from funsor_lowering import compile_funsor

    program = compile_funsor(Variable("m", Reals[2, 3])["i"].reduce(ops.min, "i"))
    assert_matches(program(m=x), data.min(0))
