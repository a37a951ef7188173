"""``logspace_einsum``, log-space contractions as max-shifted matrix
products: equal to funsor's eager evaluation (a broadcast ``add`` then a
``logsumexp``) over wide dynamic ranges, with rows hundreds of nats apart
and ``-inf`` entries, in float32 and float64, with its gradients; and so
are the compiled contractions and chain rounds that use it, under jit and
vmap."""

import functools
import math
from collections import OrderedDict

import funsor
import numpy as np
import pytest
from funsor import ops
from funsor.domains import Bint, Reals
from funsor.tensor import Tensor
from hypothesis import given, settings
from hypothesis import strategies as st

from funsor_lowering import compile_function, compile_funsor
from funsor_lowering.backends import array_backend
from funsor_lowering.lowering.rules import contraction
from funsor_lowering.ops.logspace_einsum import logspace_einsum

from .conftest import BACKEND, FLOAT_DTYPE
from .helpers import (
    assert_gradients_match,
    assert_matches,
    from_numpy,
    to_numpy,
)

array_backend(BACKEND)  # registers the backend's implementation of the op

# jax computes in float64 only where the suite enables it
DTYPES = ["float32"] if BACKEND == "jax" and FLOAT_DTYPE == "float32" else None
DTYPES = DTYPES or ["float32", "float64"]
EQUATIONS = [
    "ij,jk->ik",  # a matrix product
    "ij,j->i",  # a matrix-vector product (an HMM step)
    "bij,bjk->bik",  # a batch of them (a round of a chain's product)
    "ij,jk,k->i",  # three operands
    "ij,ij->i",  # an inner product per row
    "ij,k->ik",  # an operand with nothing summed out
    "ji,jk->ki",  # transposed operands and output
    "i,i->",  # a scalar result
]
SIZES = {"i": 3, "j": 4, "k": 2, "b": 2}


def eager_reference(arrays, equation):
    """funsor's eager evaluation: ``add`` of the operands as Tensors with
    named inputs (a broadcast), then ``logaddexp`` over the summed ones."""
    inputs, output = equation.split("->")
    terms = [
        Tensor(x, OrderedDict((c, Bint[n]) for c, n in zip(letters, x.shape)))
        for x, letters in zip(arrays, inputs.split(","))
    ]
    summed = frozenset(set(inputs) - set(output) - {","})
    with funsor.interpretations.eager:
        total = functools.reduce(ops.add, terms).reduce(ops.logaddexp, summed)
    return total.align(tuple(output)).data


def wide_arrays(equation, dtype, seed, scale, minus_infinity):
    """Random operands whose rows lie up to ``scale`` nats apart, with some
    ``-inf`` entries (none in a whole row) if ``minus_infinity``."""
    rng = np.random.default_rng(seed)
    arrays = []
    for letters in equation.split("->")[0].split(","):
        shape = tuple(SIZES[c] for c in letters)
        x = rng.normal(size=shape) + rng.uniform(-scale, scale, size=shape)
        if minus_infinity and x.ndim:
            x[..., 0] = np.where(rng.random(shape[:-1]) < 0.5, -np.inf, x[..., 0])
        arrays.append(from_numpy(x, dtype))
    return arrays


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("equation", EQUATIONS)
@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    scale=st.sampled_from([0.0, 1.0, 30.0, 300.0, 3000.0]),
    minus_infinity=st.booleans(),
)
def test_equals_eager_funsor_over_wide_ranges(
    equation, dtype, seed, scale, minus_infinity
):
    arrays = wide_arrays(equation, dtype, seed, scale, minus_infinity)
    expected = eager_reference(arrays, equation)
    actual = logspace_einsum(tuple(arrays), equation=equation)
    assert str(to_numpy(actual).dtype) == dtype
    # rows thousands of nats apart: a relative tolerance of the values
    assert_matches(actual, expected, rtol=1e-5 if dtype == "float32" else 1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rows_that_underflow_when_shifted_stay_finite(dtype):
    """Shifted by their rows' maxima, ``x`` and ``y`` have no product term
    above ``exp(-800)`` (float64) or ``exp(-100)`` (float32): the shifted
    matrix product underflows to 0, and log space gives the finite values."""
    gap = 800.0 if dtype == "float64" else 100.0
    x = from_numpy(np.array([[0.0, -gap], [-gap, 0.0]]), dtype)
    y = from_numpy(np.array([[-gap, 0.0], [0.0, -gap]]), dtype)
    actual = to_numpy(logspace_einsum((x, y), equation="ij,jk->ik"))
    assert np.isfinite(actual).all(), actual
    expected = eager_reference([x, y], "ij,jk->ik")
    assert_matches(actual, expected, rtol=1e-6)
    assert math.isclose(actual[0, 0], -gap + math.log(2), rel_tol=1e-6)


@pytest.mark.skipif(BACKEND == "numpy", reason="numpy has no autodiff")
@pytest.mark.parametrize("scale", [1.0, 300.0])
@pytest.mark.parametrize("equation", EQUATIONS)
def test_gradients_are_eager_funsors(equation, scale):
    # in the suite's float dtype
    arrays = wide_arrays(equation, FLOAT_DTYPE, 3, scale, minus_infinity=False)
    named = {f"x{n}": x for n, x in enumerate(arrays)}

    def compiled(a):
        return ops.sum(logspace_einsum(tuple(a.values()), equation=equation))

    def eager(a):
        return ops.sum(eager_reference(list(a.values()), equation))

    assert_gradients_match(compiled, eager, named)


@pytest.fixture
def logspace_steps_only(monkeypatch):
    """Every log-space step lowered as one ``logspace_einsum``."""
    monkeypatch.setattr(contraction, "BROADCAST_LIMIT", 0)


def wide_contraction():
    """``logsumexp_{j,k} f(i, j) + g(j, k) + h(k)`` where ``f``'s rows and
    ``g``'s columns peak at different ``j``, ``GAP`` nats above the rest:
    no product of shifted terms is above ``exp(-GAP)``, which underflows."""
    inputs = {"f": "ij", "g": "jk", "h": "k"}
    named = [
        funsor.Variable(name, Reals[tuple(SIZES[c] for c in letters)])[tuple(letters)]
        for name, letters in inputs.items()
    ]
    with funsor.interpretations.lazy:
        expr = functools.reduce(ops.add, named).reduce(ops.logaddexp, {"j", "k"})
    rng = np.random.default_rng(7)
    f, g = np.full((3, 4), -GAP[FLOAT_DTYPE]), np.full((4, 2), -GAP[FLOAT_DTYPE])
    f[range(3), range(3)] = 0.0  # row i peaks at j = i
    g[3, :] = 0.0  # each column at j = 3
    f, g, h = (
        f + rng.normal(size=f.shape),
        g + rng.normal(size=g.shape),
        rng.normal(size=2),
    )
    return expr, {"f": from_numpy(f), "g": from_numpy(g), "h": from_numpy(h)}


# nats that leave no accurate product of shifted terms: exp(-100) is below
# float32's normal numbers, exp(-800) below float64's (0 there)
GAP = {"float32": 100.0, "float64": 800.0}


def eager_value(expr, arrays):
    with funsor.interpretations.eager:
        return funsor.interpreter.reinterpret(expr(**arrays)).data


def test_compiled_contractions_over_wide_ranges(logspace_steps_only):
    expr, arrays = wide_contraction()
    program = compile_funsor(expr)
    assert "logspace_einsum" in program.stats()["by_op"], program
    assert_matches(program(**arrays), eager_value(expr, arrays))
    assert_matches(program.jit()(**arrays), eager_value(expr, arrays))


def test_compiled_contractions_vmap(logspace_steps_only):
    expr, arrays = wide_contraction()
    program = compile_funsor(expr)
    batch = [wide_contraction()[1] for _ in range(2)]
    batch[1] = {k: v * 0.5 for k, v in batch[1].items()}
    stacked = {k: ops.stack([b[k] for b in batch]) for k in arrays}
    actual = program.vmap({k: 0 for k in arrays})(**stacked)
    expected = ops.stack([eager_value(expr, b) for b in batch])
    assert_matches(actual, expected)


@pytest.mark.skipif(BACKEND == "numpy", reason="numpy has no autodiff")
def test_gradients_where_shifting_underflows(logspace_steps_only):
    """Through the entries recomputed in log space, too."""
    expr, arrays = wide_contraction()
    program = compile_funsor(expr)
    assert_gradients_match(
        lambda a: ops.sum(program(**a)),
        lambda a: ops.sum(eager_value(expr, a)),
        arrays,
    )


@pytest.mark.skipif(BACKEND != "torch", reason="torch.jit.trace records one path")
def test_torch_jit_trace_keeps_the_log_space_path(logspace_steps_only):
    """Traced on operands close together, then called on rows that underflow
    when shifted: the traced program still recomputes them in log space."""
    expr, arrays = wide_contraction()
    program = compile_funsor(expr)
    close = {k: from_numpy(np.zeros(tuple(v.shape))) for k, v in arrays.items()}
    jitted = program.jit(compiler="trace")
    assert_matches(jitted(**close), eager_value(expr, close))
    assert_matches(jitted(**arrays), eager_value(expr, arrays))


def separate_hmm(steps, states, gap):
    """An unrolled HMM's separate factors (``trans1 .. trans{steps}``),
    each row's entries up to ``gap`` nats apart; funsor's ``sum_product``
    over them as a user calls it."""

    def model(**inputs):
        factors = [inputs["init"]["x0"]]
        for t in range(1, steps + 1):
            factors.append(inputs[f"trans{t}"][f"x{t - 1}", f"x{t}"])
        reduced = frozenset(f"x{t}" for t in range(steps + 1))
        return funsor.sum_product.sum_product(
            ops.logaddexp, ops.add, factors, reduced, frozenset()
        )

    domains = OrderedDict(init=Reals[states])
    domains.update((f"trans{t}", Reals[states, states]) for t in range(1, steps + 1))
    rng = np.random.default_rng(steps)
    arrays = {
        k: from_numpy(rng.uniform(-gap, 0, size=d.shape)) for k, d in domains.items()
    }
    return model, domains, arrays


def eager_forward(arrays, steps):
    """funsor's eager forward pass, one step per factor."""
    alpha = Tensor(arrays["init"])["x0"]
    for t in range(1, steps + 1):
        alpha = alpha + Tensor(arrays[f"trans{t}"])[f"x{t - 1}", f"x{t}"]
        alpha = alpha.reduce(ops.logaddexp, f"x{t - 1}")
    return alpha.reduce(ops.logaddexp).data


@pytest.mark.skipif(
    array_backend(BACKEND).scans_chains, reason="jax runs chains as one lax.scan"
)
@pytest.mark.parametrize("gap", [1.0, 300.0])
def test_chain_rounds_of_large_steps_are_matrix_products(gap, monkeypatch):
    """A chain of 40 separate 16-state factors in log-depth rounds (numpy
    runs the forward pass here: its calls cost too little to take rounds
    but where told so): rounds whose broadcast would exceed
    ``BROADCAST_LIMIT`` elements are ``logspace_einsum`` s."""
    monkeypatch.setattr(array_backend(BACKEND), "call_cost", 10**6)
    steps, states = 40, 16
    model, domains, arrays = separate_hmm(steps, states, gap)
    program = compile_function(model, **domains)
    assert program.stats()["by_op"].get("logspace_einsum", 0) >= 1, program
    assert_matches(program(**arrays), eager_forward(arrays, steps), rtol=1e-4)
