"""The same results under ``python -O`` (which removes ``assert``
statements, funsor's included): nothing relies on an AssertionError."""

import os
import pathlib
import subprocess
import sys

import funsor

SCRIPT = r"""
import sys
from collections import OrderedDict

import funsor
import numpy as np

funsor.set_backend(sys.argv[1])
from funsor import ops
from funsor.domains import Bint, Reals
from funsor.interpretations import reflect
from funsor.sum_product import sequential_sum_product, sum_product
from funsor.tensor import Tensor
from funsor.terms import Variable

from funsor_lowering import compile_function, trace_function


def to_numpy(x):
    return np.asarray(x.detach() if hasattr(x, "detach") else x)


def backend_array(x):
    if sys.argv[1] == "torch":
        import torch

        return torch.as_tensor(x)
    if sys.argv[1] == "jax":
        import jax.numpy as jnp

        return jnp.asarray(x)
    return x


rng = np.random.RandomState(0)
x, t = backend_array(rng.randn(3)), backend_array(rng.randn(5, 2, 2))
results = []


def logsumexp_of_double(x):  # normalize would fuse (logaddexp, mul)
    return (x["i"] * 2).reduce(ops.logaddexp, "i")


def chain(t):  # an odd-length scan: substitution through Cat
    step = t["time", "prev", "curr"]
    return sequential_sum_product(
        ops.logaddexp, ops.add, step, Variable("time", Bint[5]), {"prev": "curr"}
    ).reduce(ops.logaddexp, frozenset({"prev", "curr"}))


def plated(x, t):
    factors = [x["i"], t["j", "i", "k"]]
    with reflect:
        expr = sum_product(
            ops.logaddexp, ops.add, factors, frozenset({"i", "k"}), frozenset({"j"})
        )
    return funsor.interpreter.reinterpret(expr)


for fn, domains, arrays in [
    (logsumexp_of_double, {"x": Reals[3]}, {"x": x}),
    (chain, {"t": Reals[5, 2, 2]}, {"t": t}),
    (plated, {"x": Reals[2], "t": Reals[5, 2, 2]}, {"x": x[:2], "t": t}),
]:
    program = compile_function(fn, **domains)
    expected = fn(**{k: Tensor(v) for k, v in arrays.items()})
    got = program(**arrays)
    assert np.allclose(to_numpy(got), to_numpy(expected.data), atol=1e-5), fn.__name__
    results.append(to_numpy(got).tolist())


def traced(a, b):
    return (Tensor(a)["i"] + Tensor(b)["i", "j"]).reduce(ops.logaddexp, "i").data


a, b = backend_array(rng.randn(3)), backend_array(rng.randn(3, 2))
results.append(to_numpy(trace_function(traced, {"a": a, "b": b})(a=a, b=b)).tolist())
print(results)
"""


def test_same_results_under_python_dash_o(tmp_path):
    script = tmp_path / "cases.py"
    script.write_text(SCRIPT)
    backend = funsor.get_backend()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONOPTIMIZE"}
    runs = []
    for mode in ([], ["-O"]):
        result = subprocess.run(
            [sys.executable, *mode, str(script), backend],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
            cwd=pathlib.Path(__file__).parent.parent,
        )
        assert result.returncode == 0, result.stderr
        runs.append(result.stdout)
    assert runs[0] == runs[1]


def test_normal_form_checks_mirror_funsors_assertions():
    from funsor import ops
    from funsor.cnf import Contraction
    from funsor.domains import Bint, Reals
    from funsor.interpretations import reflect
    from funsor.terms import Reduce, Variable

    from funsor_lowering.lowering.sound_algebra import (
        fuses_non_distributive,
        is_normal_contraction,
    )

    x, i = Variable("x", Reals[3])["i"], Variable("i", Bint[3])
    with reflect:
        product = Contraction(ops.null, ops.mul, frozenset(), (x, x))
    assert is_normal_contraction((ops.logaddexp, ops.add, frozenset({i}), (x, x)))
    assert not is_normal_contraction((ops.logaddexp, ops.add, frozenset(), (x, x)))
    assert not is_normal_contraction((ops.null, ops.null, frozenset(), (x,)))
    assert not is_normal_contraction((ops.logaddexp, ops.mul, frozenset({i}), (x, x)))
    assert fuses_non_distributive(Reduce, (ops.logaddexp, product, frozenset({i})))
    assert not fuses_non_distributive(Reduce, (ops.add, product, frozenset({i})))
    trivial = (ops.null, ops.null, frozenset(), product)
    assert not fuses_non_distributive(Contraction, trivial)
