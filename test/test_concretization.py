"""Tracing runs the user's function once, on symbolic arrays: Python
branches, conversions and backend calls on traced values raise errors naming
the user's line, on every backend; no example arrays are drawn and no global
RNG is touched."""

import random
from collections import OrderedDict

import funsor
import numpy as np
import pytest
from funsor import ops
from funsor.adjoint import forward_backward
from funsor.domains import Bint, Reals
from funsor.gaussian import Gaussian
from funsor.montecarlo import MonteCarlo
from funsor.tensor import Tensor
from funsor.testing import randn

from funsor_lowering import compile_function, trace_function
from funsor_lowering.backends import array_backend
from funsor_lowering.ops.concretization import ConcretizationError
from funsor_lowering.ops.symbolic import SymbolicArray

from .helpers import assert_matches, backend_exp

BACKEND = funsor.get_backend()


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
        trace_function(fn, {"x": randn(3)})


def test_backend_calls_on_traced_values_name_the_user_line():
    # backend_exp calls np.exp / torch.exp / jnp.exp in test/helpers.py
    helpers = __file__.replace("test_concretization.py", "helpers.py")
    with pytest.raises(ConcretizationError, match=rf"traced value.* at {helpers}:\d+"):
        trace_function(backend_exp, {"x": randn(3)})


def test_a_value_dependent_branch_is_never_baked_in():
    # traced on arange(3), h would have taken the first branch for good
    x = ops.new_arange(randn(3), 3) * 1.0
    with pytest.raises(ConcretizationError, match="bool"):
        trace_function(branch, {"x": x})

    def branch_free(x):
        positive = ops.sum(x) > 0
        return ops.exp(x) * positive + (-x) * ~positive

    program = trace_function(branch_free, {"x": x})
    assert_matches(program(x=-x), x)  # the other branch, decided per call
    assert_matches(program(x=x), ops.exp(x))


def test_library_code_and_constants_still_convert():
    def fn(x, logits):
        # funsor converts shapes internally; constants convert
        n = int(np.array(2))
        t = Tensor(logits)["i"] + Tensor(x)["i", "j"]
        return ops.mul(t.reduce(ops.logaddexp, "i").data, float(n))

    x, logits = randn(3, 2), randn(3)
    program = trace_function(fn, {"x": x, "logits": logits})
    assert_matches(program(x=x, logits=logits), fn(x, logits))
    assert not any(isinstance(c, SymbolicArray) for c in program.constants)


def test_the_function_runs_once_on_symbolic_values():
    seen = []

    def fn(x):
        seen.append(x)
        return ops.exp(x)

    trace_function(fn, {"x": randn(2)})
    assert len(seen) == 1
    assert isinstance(seen[0], SymbolicArray) and seen[0].shape == (2,)
    with pytest.raises(ConcretizationError):
        bool(seen[0])  # kept after the trace: still no value


def _rng_states():
    states = {"numpy": np.random.get_state()[1].copy(), "random": random.getstate()}
    if BACKEND == "torch":
        import torch

        states["torch"] = torch.random.get_rng_state().clone()
    return states


def _same_states(before, after):
    return all(
        before[k] == after[k] if k == "random" else bool((before[k] == after[k]).all())
        for k in before
    )


def test_compiling_runs_user_code_once_and_leaves_rngs_untouched():
    calls = []

    def sampled(logits):
        calls.append("sampled")
        f = logits["k"]
        with MonteCarlo(particle=Bint[3]):
            draws = f.sample(frozenset({"k"}), OrderedDict(particle=Bint[3]))
        return draws

    def adjoint(f):
        calls.append("adjoint")
        forward, marginals = forward_backward(ops.logaddexp, ops.add, f["x"])
        return forward

    def positive_only(scale):
        calls.append("positive_only")
        return (scale.sqrt().log() * 2).sum()  # needs positive inputs

    if BACKEND == "jax":  # funsor samples on jax only with a key
        functions = [(adjoint, {"f": Reals[3]}), (positive_only, {"scale": Reals[2]})]
    else:
        functions = [
            (sampled, {"logits": Reals[4]}),
            (adjoint, {"f": Reals[3]}),
            (positive_only, {"scale": Reals[2]}),
        ]
    before = _rng_states()
    programs = [compile_function(fn, **domains) for fn, domains in functions]
    after = _rng_states()
    assert calls == [fn.__name__ for fn, _ in functions]
    assert _same_states(before, after)
    scale = ops.exp(randn(2))
    assert_matches(programs[-1](scale=scale), positive_only(Tensor(scale)).data)


def test_gaussian_route_runs_once_on_symbolic_values():
    calls = []

    def fn(loc, prec_sqrt):
        calls.append(1)
        g = Gaussian(white_vec=loc, prec_sqrt=prec_sqrt, inputs=OrderedDict(x=Reals[2]))
        return g.reduce(ops.logaddexp, "x")

    before = _rng_states()
    program = compile_function(fn, loc=Reals[2], prec_sqrt=Reals[2, 2])
    assert _same_states(before, _rng_states())
    loc, prec_sqrt = randn(2), ops.new_eye(randn(2), (2,)) + 0.1
    expected = fn(loc, prec_sqrt).data  # funsor's eager, on the arrays
    assert_matches(program(loc=loc, prec_sqrt=prec_sqrt), expected)
    assert calls == [1, 1]  # compiling, then the eager reference


def test_random_draws_never_run_on_stand_ins():
    # numpy and torch draw from a global RNG: a draw whose shape no rule
    # gives is refused, never evaluated on stand-in arrays
    backend = array_backend(BACKEND)
    if backend.keyed:
        pytest.skip("jax draws take their keys as operands: no global RNG")
    seen = []

    def draw(x):
        seen.append(x)
        raise RuntimeError("no meta implementation")  # torch's cue to fall back

    x = SymbolicArray((2,), backend.float_dtype)
    with pytest.raises(NotImplementedError, match="global RNG"):
        backend.abstract_eval(draw, (x,), {}, draws=True)
    assert all(getattr(a, "is_meta", False) for a in seen)  # torch: meta only
