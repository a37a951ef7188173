"""compile_function's outputs have the array layout of eager funsor's
``.data`` for the same code (batch inputs in the order eager funsor's
result lists them), where substitution reorders inputs."""

from collections import OrderedDict

import numpy as np
import pytest
from funsor import ops
from funsor.domains import Bint, Real, Reals
from funsor.tensor import Tensor
from funsor.terms import Variable

from funsor_lowering import compile_function

from .helpers import assert_matches, from_numpy

RNG = np.random.RandomState(0)
F = from_numpy(RNG.randn(3, 5))
X = from_numpy(RNG.randn(4))


def index(names, size=3):
    shape = tuple({"j": 5, "k": 2, "m": 4}[n] for n in names)
    data = from_numpy(RNG.randint(0, size, shape))
    return Tensor(data, OrderedDict((n, Bint[s]) for n, s in zip(names, shape)), size)


IDX_K, IDX_JK, IDX_KJ, IDX_KM = index("k"), index("jk"), index("kj"), index("km")

CASES = {
    "rename": lambda f, x: f["i", "j"](i="k"),
    "rename_both": lambda f, x: f["i", "j"](i="k", j="m"),
    "rename_in_sum": lambda f, x: (f["i", "j"] + x["m"])(i="k"),
    "gather_k": lambda f, x: f["i", "j"](i=IDX_K),
    "gather_jk": lambda f, x: f["i", "j"](i=IDX_JK),
    "gather_kj": lambda f, x: f["i", "j"](i=IDX_KJ),
    "gather_km": lambda f, x: (f["i", "j"].exp() * 2)(i=IDX_KM),
    # the reordered term inside reductions (funsor renames bound variables)
    "gather_kj_reduced": lambda f, x: (
        f["i", "j"](i=IDX_KJ).reduce(ops.add, "k").exp().reduce(ops.logaddexp, "j")
    ),
    "gather_kj_sum_reduced": lambda f, x: (
        f["i", "j"](i=IDX_KJ) + f["i", "j"](i=IDX_KJ).exp()
    ).reduce(ops.logaddexp, frozenset({"k", "j"})),
    "real_by_batched": lambda f, x: (Variable("y", Real) * f["i", "j"])(y=x["k"]),
    "real_by_batched_sum": lambda f, x: (Variable("y", Real) + f["i", "j"]).reduce(
        ops.logaddexp, "j"
    )(y=x["k"]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_layout_matches_eager_data(name):
    fn = CASES[name]
    expected = fn(Tensor(F), Tensor(X))
    program = compile_function(fn, f=Reals[3, 5], x=Reals[4])
    arrays = {"f": F, "x": X}
    actual = program(**{k: arrays[k] for k in program.inputs})
    assert_matches(actual, expected.data)
