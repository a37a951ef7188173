"""jit, torch.fx export, Graphviz listing, stats and autodiff of programs.
References: the plain program call (itself checked against funsor elsewhere)
and, for gradients, autodiff through funsor's own eager evaluation."""

import funsor
import numpy as np
import pytest
from funsor import ops
from funsor.domains import Bint, Reals
from funsor.sum_product import sum_product
from funsor.tensor import Tensor

from funsor_lowering import compile_function

from .helpers import assert_matches, backend_randn, from_numpy, random_arrays

BACKEND = funsor.get_backend()
DOMAINS = {"a": Reals[3, 3], "x": Reals[3], "f": Reals[4, 3], "g": Reals[3, 2]}


def model(a, x, f, g):
    """Elementwise and matmul algebra, a log-space sum-product over named
    dims, nested outputs and a constant output."""
    affine = ((a @ x + 1.0) * x).exp()
    factors = [f["i", "s"], g["s", "t"], (x * 0.5)["s"]]
    z = sum_product(ops.logaddexp, ops.add, factors, frozenset("st"), frozenset("i"))
    marginal = (f["i", "s"] + g["s", "t"]).reduce(ops.logaddexp, "t")
    return {"affine": affine, "z": (z, z.exp()), "marginal": marginal}


@pytest.fixture(scope="module")
def program():
    return compile_function(model, **DOMAINS)


def test_jit_matches_the_program(program):
    jitted = program.jit()
    for _ in range(2):  # first call compiles (jax: traces; torch: jit.trace)
        arrays = random_arrays(DOMAINS)
        assert_matches(jitted(**arrays), program(**arrays), rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(BACKEND != "torch", reason="torch.compile is torch's")
def test_jit_with_torch_compile_matches_the_program(program):
    compiled = program.jit(compiler="compile")
    for _ in range(2):  # first call compiles (inductor), second runs it
        arrays = random_arrays(DOMAINS)
        assert_matches(compiled(**arrays), program(**arrays), rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(BACKEND != "torch", reason="torch.compile is torch's")
def test_torch_compile_of_a_later_program_stays_static(monkeypatch):
    # dynamo marks shapes dynamic when a function it compiled before (by
    # file, line and name) meets new shapes: two programs' compiles must not
    # look like one function called with two shapes
    import torch

    static = []  # per graph compiled: all inputs tensors of fixed shapes

    def recording_backend(graph, example_inputs):
        static.append(
            all(
                isinstance(x, torch.Tensor) and all(type(d) is int for d in x.shape)
                for x in example_inputs
            )
        )
        return graph.forward

    compile_ = torch.compile
    monkeypatch.setattr(
        torch, "compile", lambda fn, **kw: compile_(fn, backend=recording_backend)
    )
    for n in (3, 4, 5):
        domains = {"a": Reals[n, n], "x": Reals[n]}
        program = compile_function(lambda a, x: (a @ x).exp().sum(), **domains)
        arrays = random_arrays(domains)
        compiled = program.jit(compiler="compile")
        assert_matches(compiled(**arrays), program(**arrays), rtol=1e-5, atol=1e-5)
    assert static == [True, True, True]


@pytest.mark.skipif(BACKEND != "torch", reason="torch's choice of compilers")
def test_torch_jit_keeps_the_fastest_compiler_per_signature(program):
    jitted = program.jit()
    arrays = random_arrays(DOMAINS)
    assert_matches(jitted(**arrays), program(**arrays), rtol=1e-5, atol=1e-5)
    (chosen,) = jitted.compiler.chosen.values()
    assert chosen in {"trace", "compile", "program"}
    again = random_arrays(DOMAINS)  # same signature: no new choice
    assert_matches(jitted(**again), program(**again), rtol=1e-5, atol=1e-5)
    assert len(jitted.compiler.chosen) == 1
    assert jitted.cache_info() == {"signatures": 1}


def test_jit_names_the_compilers_of_the_backend(program):
    message = "torch programs support" if BACKEND == "torch" else "for torch"
    with pytest.raises(ValueError, match=message):
        program.jit(compiler="xla" if BACKEND == "torch" else "compile")


def test_jit_validates_inputs(program):
    arrays = random_arrays(DOMAINS)
    arrays["x"] = backend_randn(4)
    with pytest.raises(ValueError, match=r"input 'x': expected shape \(3,\)"):
        program.jit()(**arrays)


def test_to_fx(program):
    if BACKEND != "torch":
        with pytest.raises(NotImplementedError, match="torch backend"):
            program.to_fx()
        return
    module = program.to_fx()
    arrays = random_arrays(DOMAINS)
    assert_matches(module(**arrays), program(**arrays), rtol=1e-6)
    assert "def forward(self, a, x, f, g)" in module.code


def test_to_dot_draws_every_value(program):
    dot = program.to_dot()
    assert dot.startswith("digraph") and dot.rstrip().endswith("}")
    for k, operation in enumerate(program.operations):
        assert f'v{program.first_operation + k} [label="{operation.op.name}(' in dot
        for a in operation.args:
            assert f"v{a} -> v{program.first_operation + k};" in dot
    assert dot.count("shape=doubleoctagon") == 4  # the output leaves


def test_listing_shows_value_types(program):
    listing = str(program)
    for k in range(len(program.operations)):
        name = program.value_names[program.first_operation + k]
        assert f"  {name}: real[" in listing


def test_stats(program):
    stats = program.stats()
    assert stats["operations"] == len(program.operations)
    assert sum(stats["by_op"].values()) == stats["operations"]
    assert stats["inputs"] == 4 and stats["constants"] == len(program.constants)
    assert stats["constant_bytes"] >= 0
    python = stats["by_op"].get("tuple_item", 0)  # Python indexing, no call
    assert stats["backend_calls"] == stats["operations"] - python


# ------------------------------------------------------------------ autodiff
def loss_parts(a, x, f, g):
    out = model(a, x, f, g)
    return [out["affine"], out["z"][0], out["marginal"].reduce(ops.add)]


def eager_loss(arrays):
    parts = loss_parts(**{k: Tensor(v) for k, v in arrays.items()})
    return sum(ops.sum(p.data) for p in parts)


def compiled_loss(program, arrays):
    out = program(**arrays)
    return ops.sum(out["affine"]) + ops.sum(out["z"][0]) + ops.sum(out["marginal"])


@pytest.mark.skipif(BACKEND == "numpy", reason="numpy has no autodiff")
def test_gradients_equal_eager_funsor(program):
    arrays = random_arrays(DOMAINS)
    if BACKEND == "torch":
        import torch

        def grads(loss_fn):
            leaves = {k: v.clone().requires_grad_() for k, v in arrays.items()}
            loss_fn(leaves).backward()
            return {k: v.grad for k, v in leaves.items()}

        expected = grads(eager_loss)
        assert_matches(grads(lambda a: compiled_loss(program, a)), expected, rtol=1e-4)
        jitted = program.jit()
        actual = grads(lambda a: compiled_loss(jitted, a))
        assert_matches(actual, expected, rtol=1e-4)
        assert all(torch.isfinite(v).all() for v in expected.values())
    else:
        import jax

        expected = jax.grad(eager_loss)(arrays)
        actual = jax.grad(lambda a: compiled_loss(program, a))(arrays)
        assert_matches(actual, expected, rtol=1e-4, atol=1e-5)
        jitted = program.jit()
        actual = jax.grad(lambda a: compiled_loss(jitted, a))(arrays)
        assert_matches(actual, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(BACKEND == "numpy", reason="numpy has no autodiff")
def test_gradient_through_a_gather_and_logaddexp():
    from collections import OrderedDict

    index = Tensor(from_numpy(np.array([4, 0, 2, 4])), OrderedDict(n=Bint[4]), 5)

    def fn(f):
        gathered = f[index].exp().reduce(ops.add, "n")
        return gathered + (f["i"] * 2.0).reduce(ops.logaddexp, "i")

    program = compile_function(fn, f=Reals[5])
    expr = fn
    data = backend_randn(5)
    if BACKEND == "torch":
        a, b = data.clone().requires_grad_(), data.clone().requires_grad_()
        program(f=a).backward()
        expr(Tensor(b)).data.backward()
        assert_matches(a.grad, b.grad, rtol=1e-5)
    else:
        import jax

        actual = jax.grad(lambda v: program(f=v))(data)
        expected = jax.grad(lambda v: expr(Tensor(v)).data)(data)
        assert_matches(actual, expected, rtol=1e-5)
