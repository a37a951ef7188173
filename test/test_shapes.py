"""The package's shape rules (``funsor_lowering.ops.shapes.find_domain``:
funsor's with the package's rules first), checked against the shapes the
backend ops actually produce; funsor's terms get them in the package's own
work only."""

import pytest
from funsor import ops
from funsor.domains import Array, Real, Reals
from funsor.terms import Variable

from funsor_lowering.funsor_hooks import package_shape_rules
from funsor_lowering.ops.shapes import find_domain

from .helpers import backend_randn


def test_terms_get_the_package_rules_in_its_work_only():
    x = Variable("x", Reals[2, 3])
    with package_shape_rules():
        assert ops.sum(x, 0).output == Reals[3]
        assert ops.permute(x, (1, 0)).output == Reals[3, 2]
        assert ops.einsum((x, x), "ij,ij->i").output == Reals[2]
    assert ops.sum(x, 0).output == Real  # funsor 0.4.8's own answer


CASES = [
    (ops.SumOp(axis=0), (2, 3)),
    (ops.SumOp(axis=-1, keepdims=True), (2, 3)),
    (ops.SumOp(axis=(0, 2)), (2, 3, 4)),
    (ops.sum, (2, 3)),
    (ops.AmaxOp(axis=1), (2, 3)),
    (ops.AminOp(axis=0), (2, 3)),
    (ops.ProdOp(axis=-2), (2, 3)),
    (ops.LogsumexpOp(axis=1), (2, 3)),
    (ops.MeanOp(axis=0, keepdims=True), (2, 3)),
    (ops.ArgmaxOp(axis=1), (2, 3)),
    (ops.ArgminOp(axis=0), (2, 3)),
    (ops.PermuteOp(dims=(1, 0)), (2, 3)),
    (ops.PermuteOp(dims=(2, 0, 1)), (2, 3, 4)),
    (ops.ExpandOp(shape=(4, 2, 3)), (2, 3)),
    (ops.ExpandOp(shape=(2, 3)), (1, 3)),
    (ops.ExpandOp(shape=(5, -1, 3)), (2, 1)),
    (ops.UnsqueezeOp(dim=-1), (2, 3)),
    (ops.UnsqueezeOp(dim=0), (2, 3)),
    (ops.UnsqueezeOp(dim=1), (2, 3)),
    (ops.DiagonalOp(dim1=-1, dim2=-2), (4, 3, 3)),
    (ops.DiagonalOp(dim1=0, dim2=2), (3, 4, 2)),
    (ops.TransposeOp(axis1=-1, axis2=-2), (3, 2, 4)),
    (ops.TransposeOp(axis1=0, axis2=2), (3, 2, 4)),
]


@pytest.mark.parametrize(
    "op, shape", CASES, ids=[f"{o!r}{o.defaults}" for o, _ in CASES]
)
def test_find_domain_matches_backend(op, shape):
    x = backend_randn(*shape)
    actual = tuple(op(x).shape)
    assert find_domain(op, Reals[shape]).shape == actual


def test_argmax_dtype_is_the_reduced_size():
    assert find_domain(ops.ArgmaxOp(axis=1), Reals[2, 3]) == Array[3, (2,)]


def test_all_any_give_booleans():
    assert find_domain(ops.AllOp(axis=0), Reals[2, 3]) == Array[2, (3,)]


@pytest.mark.parametrize(
    "op, shape",
    [
        (ops.PermuteOp(dims=(0, 0)), (2, 3)),
        (ops.ExpandOp(shape=(4, 3)), (2, 3)),
        (ops.SumOp(axis=2), (2, 3)),
    ],
)
def test_invalid_shapes_raise(op, shape):
    with pytest.raises(ValueError, match=type(op).__name__.replace("Op", "").lower()):
        find_domain(op, Reals[shape])


@pytest.mark.parametrize(
    "equation, shapes",
    [
        ("...ij,...j->...i", [(2, 3, 4), (4,)]),
        ("...i,...ij->...j", [(5, 3), (1, 3, 2)]),
        ("ij,jk->ik", [(2, 3), (3, 4)]),
        ("i...,i->...", [(3, 2, 2), (3,)]),
    ],
)
def test_einsum_with_ellipsis_matches_backend(equation, shapes):
    op = ops.EinsumOp(equation=equation)
    arrays = tuple(backend_randn(*s) for s in shapes)
    expected = tuple(op(arrays).shape)
    assert find_domain(op, tuple(Reals[s] for s in shapes)).shape == expected


@pytest.mark.parametrize("x, y", [((3, 2, 1), (2, 2)), ((2, 3), (4, 1, 2, 2))])
def test_triangular_solve_matches_backend(x, y):
    op = ops.TriangularSolveOp(upper=False, transpose=True)
    lower = ops.cholesky(ops.add(ops.new_eye(backend_randn(1), y[-1:]), 0.0))
    tril = ops.expand(lower, y)
    expected = tuple(op(backend_randn(*x), tril).shape)
    assert find_domain(op, Reals[x], Reals[y]).shape == expected
