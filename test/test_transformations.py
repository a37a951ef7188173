"""Backend transformations compose with programs (issue 17.1): a compiled
or traced program is a plain callable, and jax's ``jit`` / ``vmap`` (over
any subset of inputs) / ``grad`` / ``value_and_grad`` / ``lax.scan``, and
torch's ``torch.compile(fullgraph=True)`` / ``torch.func.vmap`` /
``torch.func.grad`` give the untransformed program's results (per example,
for vmap)."""

import itertools

import funsor
import numpy as np
import pytest
from funsor.domains import Reals
from funsor.terms import Variable

from funsor_lowering import compile_funsor, trace_function

from .helpers import assert_matches, chain_sum_product, from_numpy

BACKEND = funsor.get_backend()
pytestmark = pytest.mark.skipif(
    BACKEND == "numpy", reason="numpy has no program transformations"
)


def affine():
    a, x, b = (
        Variable("a", Reals[3, 3]),
        Variable("x", Reals[3]),
        Variable("b", Reals[3]),
    )
    return compile_funsor((((a @ x) + b).exp() * x).sum())


def hmm(T=20, S=3):
    init, trans = Variable("init", Reals[S]), Variable("trans", Reals[T, S, S])
    factors = [init["x0"]] + [trans[t][f"x{t - 1}", f"x{t}"] for t in range(1, T)]
    return compile_funsor(chain_sum_product(factors, T))


def kalman():
    from benchmarks.cases import Kalman, random_inputs

    case = Kalman(6)
    return case.program(random_inputs(case))


PROGRAMS = {"affine": affine, "hmm": hmm, "kalman": kalman}


def arrays_for(program, seed=0):
    rng = np.random.RandomState(seed)
    arrays = {}
    for name, spec in program.input_types.items():
        x = rng.randn(*spec.shape)
        if name.startswith("P"):  # square-root precisions: well conditioned
            x = x + 2 * np.eye(*spec.shape[-2:])
        arrays[name] = from_numpy(x.astype(np.float32))
    return arrays


def stack(values):
    if BACKEND == "torch":
        import torch

        return torch.stack(values)
    import jax.numpy as jnp

    return jnp.stack(values)


def batched(arrays, names, n=3):
    """``arrays`` with the inputs ``names`` stacked ``n`` times (scaled)."""
    return {
        k: stack([v * (1 + 0.1 * i) for i in range(n)]) if k in names else v
        for k, v in arrays.items()
    }


def per_example(program, arrays, names, n=3):
    outputs = []
    for i in range(n):
        kwargs = {k: (v[i] if k in names else v) for k, v in arrays.items()}
        outputs.append(program(**kwargs))
    return stack(outputs)


def subsets(names):
    names = list(names)
    for r in range(1, len(names) + 1):
        yield from itertools.combinations(names, r)


def vmap(fn, in_dims):
    if BACKEND == "torch":
        import torch

        return torch.func.vmap(fn, in_dims=in_dims)
    import jax

    return jax.vmap(fn, in_axes=in_dims)


@pytest.mark.parametrize("name", PROGRAMS)
def test_vmap_over_every_subset_of_inputs(name):
    program = PROGRAMS[name]()
    arrays = arrays_for(program)
    names = list(program.inputs)
    for subset in subsets(names):
        data = batched(arrays, subset)

        def fn(*values):
            return program(**dict(zip(names, values)))

        in_dims = tuple(0 if k in subset else None for k in names)
        actual = vmap(fn, in_dims)(*(data[k] for k in names))
        expected = per_example(program, data, subset)
        assert_matches(actual, expected, rtol=1e-4, atol=1e-4, path=str(subset))


def grad_of(fn):
    if BACKEND == "torch":
        import torch

        return torch.func.grad(fn)
    import jax

    return jax.grad(fn)


def eager_grad(program, arrays):
    """Gradients of the program's sum by the backend's own autodiff of a
    plain call (torch: backward; jax: grad of the unjitted program)."""
    if BACKEND == "torch":
        leaves = {k: v.clone().requires_grad_() for k, v in arrays.items()}
        program(**leaves).sum().backward()
        return {k: v.grad for k, v in leaves.items()}
    import jax

    return jax.grad(lambda kw: program(**kw).sum())(arrays)


@pytest.mark.parametrize("name", PROGRAMS)
def test_functional_grad_equals_autodiff_of_a_call(name):
    program = PROGRAMS[name]()
    arrays = arrays_for(program)
    actual = grad_of(lambda kw: program(**kw).sum())(arrays)
    expected = eager_grad(program, arrays)
    for k in arrays:
        assert_matches(actual[k], expected[k], rtol=1e-4, atol=1e-4, path=k)


@pytest.mark.parametrize("name", PROGRAMS)
def test_composed_transformations(name):
    """jit of vmap and vmap of grad (jax); vmap of grad (torch)."""
    program = PROGRAMS[name]()
    arrays = arrays_for(program)
    names = list(program.inputs)
    first = names[0]
    data = batched(arrays, [first])
    in_dims = tuple(0 if k == first else None for k in names)

    def fn(*values):
        return program(**dict(zip(names, values)))

    def total(*values):
        return fn(*values).sum()

    grads = vmap(grad_of_first(total), in_dims)(*(data[k] for k in names))
    for i in range(3):
        member = {k: (v[i] if k == first else v) for k, v in data.items()}
        expected = eager_grad(program, member)[first]
        assert_matches(grads[i], expected, rtol=1e-4, atol=1e-4, path=str(i))
    if BACKEND == "jax":
        import jax

        jitted = jax.jit(jax.vmap(fn, in_axes=in_dims))(*(data[k] for k in names))
        assert_matches(jitted, per_example(program, data, [first]), rtol=1e-4)


def grad_of_first(fn):
    if BACKEND == "torch":
        import torch

        return torch.func.grad(fn, argnums=0)
    import jax

    return jax.grad(fn, argnums=0)


@pytest.mark.skipif(BACKEND != "jax", reason="jax transformations")
@pytest.mark.parametrize("name", PROGRAMS)
def test_jax_jit_value_and_grad_and_scan(name):
    import jax
    import jax.numpy as jnp

    program = PROGRAMS[name]()
    arrays = arrays_for(program)
    expected = program(**arrays)
    assert_matches(jax.jit(lambda kw: program(**kw))(arrays), expected, rtol=1e-5)
    value, grads = jax.value_and_grad(lambda kw: program(**kw).sum())(arrays)
    assert_matches(value, expected.sum(), rtol=1e-5)
    plain = jax.grad(lambda kw: program(**kw).sum())(arrays)
    for k in arrays:
        assert_matches(grads[k], plain[k], rtol=1e-5, atol=1e-6, path=k)
    first = program.inputs[0]
    steps = batched(arrays, [first])[first]

    def body(total, x):
        return total + program(**{**arrays, first: x}), None

    total, _ = jax.lax.scan(body, jnp.zeros(()), steps)
    expected_total = sum(program(**{**arrays, first: x}) for x in steps)
    assert_matches(total, expected_total, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(BACKEND != "torch", reason="torch.compile")
@pytest.mark.parametrize("name", PROGRAMS)
def test_torch_compile_fullgraph_of_a_fresh_program(name):
    import torch

    program = PROGRAMS[name]()  # never called: its code was prepared
    arrays = arrays_for(program)
    compiled = torch.compile(lambda kw: program(**kw), fullgraph=True)
    actual = compiled(arrays)
    assert_matches(actual, program(**arrays), rtol=1e-5, atol=1e-5)
    again = arrays_for(program, seed=1)  # same shapes: no recompilation
    assert_matches(compiled(again), program(**again), rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(BACKEND != "torch", reason="torch.compile")
@pytest.mark.parametrize("name", PROGRAMS)
def test_torch_compile_fullgraph_of_a_program_called_before(name):
    import torch

    program = PROGRAMS[name]()
    arrays = arrays_for(program)
    expected = program(**arrays)  # its generated entry is now its __call__
    compiled = torch.compile(lambda kw: program(**kw), fullgraph=True)
    assert_matches(compiled(arrays), expected, rtol=1e-5, atol=1e-5)
    torch._dynamo.reset()


@pytest.mark.skipif(BACKEND != "torch", reason="torch.compile")
def test_torch_compile_of_an_unprepared_program_says_what_to_do():
    import pickle

    import torch

    program = pickle.loads(pickle.dumps(affine()))  # unpickled: no code yet
    arrays = arrays_for(program)
    compiled = torch.compile(lambda kw: program(**kw), fullgraph=True)
    with pytest.raises(Exception, match=r"call\s+program.prepare\(\)"):
        compiled(arrays)
    torch._dynamo.reset()
    program.prepare()
    compiled = torch.compile(lambda kw: program(**kw), fullgraph=True)
    assert_matches(compiled(arrays), program(**arrays), rtol=1e-5, atol=1e-5)


def test_preparing_draws_nothing_from_the_global_random_state():
    if BACKEND != "torch":
        pytest.skip("jax draws take explicit keys")
    import torch

    from benchmarks.cases import FFBS, random_inputs

    case = FFBS()
    arrays = random_inputs(case)
    torch.manual_seed(0)
    expected = torch.randn(3)
    torch.manual_seed(0)
    case.program(arrays)  # traces, optimizes and prepares
    assert_matches(torch.randn(3), expected)


@pytest.mark.skipif(BACKEND != "torch", reason="torch programs are prepared")
def test_traced_programs_are_prepared_on_their_example_inputs():
    # stand-ins (ones) make a a^T singular; the example inputs do not, so
    # the code is generated once, at build, and the first call reuses it
    import torch
    from funsor import ops

    def fn(a):
        return ops.cholesky(ops.matmul(a, ops.transpose(a, -1, -2)))

    a = torch.randn(2, 3, dtype=torch.float64)
    program = trace_function(fn, {"a": a})
    assert program.cache_info()["bodies"] == 1
    parameter = torch.nn.Parameter(torch.randn(2, 3, dtype=torch.float64))
    assert_matches(program(a=parameter), fn(parameter.detach()))
    assert program.cache_info()["bodies"] == 1  # parameters share the code
