"""trace_function refuses Python branches and conversions on values
computed from its inputs, naming the user's line (numpy, where inputs are
passed as TracedArray views); library code's own conversions still work."""

import funsor
import numpy as np
import pytest
from funsor import ops
from funsor.tensor import Tensor

from funsor_lowering import trace_function
from funsor_lowering.concretization import ConcretizationError

from .helpers import assert_matches

pytestmark = pytest.mark.skipif(
    funsor.get_backend() != "numpy",
    reason="torch and jax inputs are not yet traced values (issue #14)",
)


def branch(x):
    return ops.exp(x) if ops.sum(x) > 0 else -x


@pytest.mark.parametrize(
    "fn",
    [
        branch,
        lambda x: ops.exp(x) * float(ops.sum(x)),
        lambda x: ops.exp(x) * int(x[0]),
        lambda x: ops.exp(x) * x.sum().item(),
        lambda x: x if bool((x > 0).all()) else -x,
    ],
    ids=["if", "float", "int", "item", "bool"],
)
def test_conversions_of_traced_values_name_the_user_line(fn):
    with pytest.raises(ConcretizationError, match=rf"at {__file__}:\d+"):
        trace_function(fn, {"x": np.arange(3.0)})


def test_library_code_and_constants_still_convert():
    def fn(x, logits):
        # funsor converts shapes and validates internally; constants convert
        n = int(np.array(2))
        t = Tensor(logits)["i"] + Tensor(x)["i", "j"]
        return ops.mul(t.reduce(ops.logaddexp, "i").data, float(n))

    x, logits = np.random.randn(3, 2), np.random.randn(3)
    program = trace_function(fn, {"x": x, "logits": logits})
    assert_matches(program(x=x, logits=logits), fn(x, logits))
    assert not any(type(c).__name__ == "TracedArray" for c in program.constants)


def test_traced_values_convert_after_the_trace():
    kept = []

    def fn(x):
        kept.append(x)
        return ops.exp(x)

    trace_function(fn, {"x": np.ones(2)})
    assert bool(kept[0].sum() > 0)  # outside the trace: an ordinary array
