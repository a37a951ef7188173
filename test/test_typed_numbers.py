"""Number constants of elementwise arithmetic: numpy and torch bodies pass
them as 0-d arrays of the other operand's dtype (torch wraps a Python number
in a tensor on every call; numpy converts it), so a body serves one dtype.
Results are funsor's own eager results, in every dtype, whichever dtype a
program sees first."""

import funsor
import numpy as np
import pytest
from funsor.domains import Reals
from funsor.tensor import Tensor
from funsor.terms import Number, Variable
from hypothesis import given, settings
from hypothesis import strategies as st

from funsor_lowering import compile_funsor

from .helpers import assert_matches, evaluate, from_numpy, to_numpy

BACKEND = funsor.get_backend()

numbers = st.floats(-1e3, 1e3, allow_nan=False).filter(lambda c: abs(c) > 1e-3)


def arithmetic(c):
    """Number constants on either side of +, -, * and /."""
    x = Variable("x", Reals[3])
    return (x * c[0] + c[1]) - Number(c[2]) * x + c[0] / (x * x + 1.0) - (c[1] - x)


def reference(expr, x):
    return evaluate(expr, {"x": Tensor(x)}).data


@settings(max_examples=25, deadline=None)
@given(c=st.tuples(numbers, numbers, numbers), float64_first=st.booleans())
def test_numbers_in_each_dtype_as_funsor_computes_them(c, float64_first):
    expr = arithmetic(c)
    program = compile_funsor(expr)
    data = np.random.default_rng(0).normal(size=3)
    order = ["float64", "float32"] if float64_first else ["float32", "float64"]
    for dtype in order + order:  # each dtype again after the other
        x = from_numpy(data.astype(dtype))
        expected = reference(expr, x)
        actual = program(x=x)
        assert to_numpy(actual).dtype == to_numpy(expected).dtype
        rtol = 1e-6 if dtype == "float32" else 1e-13
        scale = float(np.abs(to_numpy(expected)).max())
        assert_matches(actual, expected, rtol=rtol, atol=rtol * scale)


torch_only = pytest.mark.skipif(BACKEND != "torch", reason="torch's autograd")
typing_backends = pytest.mark.skipif(
    BACKEND == "jax", reason="jax programs keep numbers (XLA folds them in)"
)


def body_globals(program, x):
    return program._runtime.bodies[program._runtime.type_key([x])].__globals__


@typing_backends
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_bodies_pass_numbers_as_arrays_of_the_operands_dtype(dtype):
    program = compile_funsor(arithmetic((0.5, 1.5, -2.0)))
    x = from_numpy(np.random.default_rng(1).normal(size=3).astype(dtype))
    program(x=x)
    typed = [v for k, v in body_globals(program, x).items() if k.endswith("_typed")]
    # the constants funsor's normalization leaves: 0.5, 2.0 (of -(-2.0 x)) and 1.0
    assert len(typed) == 3
    for value in typed:
        assert tuple(value.shape) == () and value.dtype == x.dtype


@typing_backends
def test_half_precision_keeps_python_numbers():
    # float16 kernels may take a Python number in float32: 0 * 1e5 stays 0
    # where a float16 array of 1e5 (inf) would make it nan
    x = Variable("x", Reals[3])
    expr = x * 1e5 + 1.0
    program = compile_funsor(expr)
    data = from_numpy(np.array([0.0, 1e-4, -2e-4], dtype="float16"))
    expected = reference(expr, data)
    np.testing.assert_array_equal(to_numpy(program(x=data)), to_numpy(expected))
    assert not [k for k in body_globals(program, data) if k.endswith("_typed")]


@torch_only
def test_torch_gradients_through_typed_numbers():
    import torch

    expr = arithmetic((0.5, 1.5, -2.0))
    program = compile_funsor(expr)
    x = torch.randn(3, dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(program(x=x).sum(), [x])
    (expected,) = torch.autograd.grad(reference(expr, x).sum(), [x])
    assert_matches(grad, expected, rtol=1e-12, atol=1e-12)
