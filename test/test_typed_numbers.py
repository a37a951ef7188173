"""Number constants of elementwise arithmetic: torch bodies pass them as
0-d tensors of the other operand's dtype (a Python number is wrapped in a
tensor on every call), so a body serves one dtype. Results are funsor's own
eager results, in every dtype, whichever dtype a program sees first."""

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


torch_only = pytest.mark.skipif(BACKEND != "torch", reason="torch's typed numbers")


@torch_only
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_torch_bodies_pass_numbers_as_tensors_of_the_operands_dtype(dtype):
    import torch

    program = compile_funsor(arithmetic((0.5, 1.5, -2.0)))
    x = torch.randn(3, dtype=getattr(torch, dtype))
    program(x=x)
    body = program._runtime.bodies[program._runtime.type_key([x])]
    typed = [v for k, v in body.__globals__.items() if k.endswith("_typed")]
    assert typed and all(
        isinstance(v, torch.Tensor) and v.dim() == 0 and v.dtype == x.dtype
        for v in typed
    )


@torch_only
def test_torch_half_precision_keeps_python_numbers():
    # float16 kernels take a Python number in float32: 0 * 1e5 stays 0 where
    # a float16 tensor of 1e5 (inf) would make it nan
    import torch

    x = Variable("x", Reals[3])
    expr = x * 1e5 + 1.0
    program = compile_funsor(expr)
    data = torch.tensor([0.0, 1e-4, -2e-4], dtype=torch.float16)
    expected = reference(expr, data)
    assert torch.equal(program(x=data), expected)
    body = program._runtime.bodies[program._runtime.type_key([data])]
    assert not [k for k in body.__globals__ if k.endswith("_typed")]


@torch_only
def test_torch_gradients_through_typed_numbers():
    import torch

    expr = arithmetic((0.5, 1.5, -2.0))
    program = compile_funsor(expr)
    x = torch.randn(3, dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(program(x=x).sum(), [x])
    (expected,) = torch.autograd.grad(reference(expr, x).sum(), [x])
    assert_matches(grad, expected, rtol=1e-12, atol=1e-12)
