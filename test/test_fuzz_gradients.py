"""Gradient fuzzer: gradients through compiled programs (torch autograd,
``jax.grad``) against autograd through funsor's eager evaluation of the same
computation on the same arrays, whose entries include ``-inf``, 0 and large
magnitudes.

Three families: random named expressions (elementwise ops, reductions,
contractions, substitutions: ``named_strategies``), sum-products (plated
``sum_product``, ``sequential_sum_product``, and ``sarkka_bilmes_product``
with funsor's ``_PREV_`` lags) and Gaussians (integrated over their real
input, plus discrete factors, or evaluated at a point). Wherever eager's
gradient is finite the compiled one must be finite and equal; the loss sums
the finite entries of the result with fixed random weights.

1,000 cases per backend (``CASES``) in CI; more with ``HYPOTHESIS_PROFILE=large``.
"""

import contextlib
import functools
import math
import os
from collections import OrderedDict

import funsor.cnf
import numpy as np
import pytest
from funsor import ops
from funsor.cnf import Contraction
from funsor.domains import Bint, Real, Reals
from funsor.gaussian import Gaussian
from funsor.interpretations import eager, reflect
from funsor.sum_product import (
    sarkka_bilmes_product,
    sequential_sum_product,
    sum_product,
)
from funsor.tensor import Tensor
from funsor.terms import Reduce, Variable
from hypothesis import given, reject, settings
from hypothesis import strategies as st

from funsor_lowering import compile_funsor, jit

from .conftest import BACKEND
from .helpers import FLOAT_DTYPE, data_of, evaluate, from_numpy, to_numpy
from .named_strategies import expressions

pytestmark = pytest.mark.skipif(BACKEND == "numpy", reason="numpy has no autodiff")

# Cases per family, 1,000 per backend in all (a larger profile runs more).
CASES = {"expressions": 400, "sum_products": 400, "gaussians": 200}
_LARGE = os.environ.get("HYPOTHESIS_PROFILE") == "large"


def cases(family):
    return settings(max_examples=CASES[family] * (5 if _LARGE else 1), deadline=None)


# Special entries of log-space data (sum-products, logits) ...
SPECIAL = (-math.inf, 0.0, 100.0, -100.0, 1e4)
# ... and of the expressions, which exponentiate and multiply: e^20 keeps
# their intermediate products finite in float32. (An intermediate inf makes
# the gradient NaN, 0 * inf, where funsor's evaluation order may avoid it.)
SPECIAL_EXP = (-math.inf, 0.0, 20.0, -20.0)


def special_array(rng, shape, fraction, special=SPECIAL):
    """Normal entries, a ``fraction`` of them replaced by ``special`` values,
    and about ``fraction / 2`` of the rows (along the last axis) all ``-inf``
    (a state with no possible transition)."""
    data = np.asarray(rng.randn(*shape))
    replace = np.asarray(rng.rand(*shape) < fraction)
    data[replace] = rng.choice(special, size=shape)[replace]
    if shape:
        dead_rows = rng.rand(*shape[:-1]) < fraction / 2
        data[dead_rows] = -math.inf
    return from_numpy(data)


# ------------------------------------------------------------------- autograd
def weighted_loss(result, seed):
    """The sum of ``result``'s finite entries times fixed random weights."""
    data = data_of(result)
    weights = np.random.RandomState(seed).rand(*data.shape) + 0.5
    weights = from_numpy(weights)
    if BACKEND == "torch":
        import torch

        finite = torch.where(torch.isfinite(data), data, torch.zeros_like(data))
    else:
        import jax.numpy as jnp

        finite = jnp.where(jnp.isfinite(data), data, jnp.zeros_like(data))
    return (finite * weights).sum()


def gradients(loss, arrays):
    """Gradients of ``loss(arrays)`` (a scalar) by each array, as numpy."""
    if BACKEND == "torch":
        import torch

        leaves = {k: v.detach().clone().requires_grad_() for k, v in arrays.items()}
        value = loss(leaves)
        if not value.requires_grad:  # no input reaches the result
            return {k: np.zeros(v.shape) for k, v in arrays.items()}
        grads = torch.autograd.grad(value, list(leaves.values()), allow_unused=True)
        return {
            k: np.zeros(v.shape) if g is None else to_numpy(g)
            for (k, v), g in zip(leaves.items(), grads)
        }
    import jax

    return {k: np.asarray(g) for k, g in jax.grad(loss)(arrays).items()}


@contextlib.contextmanager
def exact_log_contractions():
    """funsor's eager evaluation with its log-space contractions of Tensors
    computed term by term (``add``, then a ``logsumexp`` reduction), not by
    its einsum backend. That backend shifts each term by its own maximum,
    so on rows hundreds of nats apart its products underflow: the value
    becomes ``-inf`` or its gradients vanish where the exact ones do not.
    Its ``logsumexp`` reductions have a softmax gradient (torch's own,
    ``exp(x - result)``, sums to more than 1 where ``result`` rounds to
    the maximum: float32 entries of 3.6e15)."""
    key = (Contraction, ops.LogaddexpOp, ops.AddOp, frozenset, Tensor, Tensor)

    def term_by_term(red_op, bin_op, reduced_vars, *terms):
        total = functools.reduce(bin_op, terms)
        names = [k for k in total.inputs if k in {v.name for v in reduced_vars}]
        if not names:
            return total
        axes = tuple(list(total.inputs).index(k) for k in names)
        inputs = OrderedDict((k, d) for k, d in total.inputs.items() if k not in names)
        return Tensor(
            logsumexp_with_zero_gradient_where_empty(total.data, axes), inputs
        )

    def reduction(op, arg, reduced_vars):
        names = [v.name for v in reduced_vars]
        if type(op) is not ops.LogaddexpOp or not set(names) <= set(arg.inputs):
            return funsor.terms.eager_reduce(op, arg, reduced_vars)
        return term_by_term(op, ops.add, reduced_vars, arg)

    reduction_key = (Reduce, ops.LogaddexpOp, Tensor, frozenset)
    eager.register(*key)(term_by_term)
    eager.register(*reduction_key)(reduction)
    try:
        yield
    finally:
        eager.register(*key)(funsor.cnf.eager_contraction_tensor)
        eager.register(*reduction_key)(funsor.terms.eager_reduce)


def logsumexp_with_zero_gradient_where_empty(x, axes):
    """``logsumexp`` over ``axes``; a reduction over ``-inf`` entries only
    is ``-inf`` with gradient 0 (the backends' own give NaN there, the limit
    of funsor's einsum, whose gradient is finite)."""
    if BACKEND == "torch":
        import torch as xp

        amax = x.detach().amax(axes, keepdim=True)
    else:
        import jax
        import jax.numpy as xp

        amax = jax.lax.stop_gradient(x.max(axes, keepdims=True))
    empty = amax == -math.inf
    shift = xp.where(empty, xp.zeros_like(amax), amax)
    safe = xp.where(empty, xp.zeros_like(x), x - shift)
    total = xp.log(xp.exp(safe).sum(axes, keepdims=True)) + shift
    total = xp.where(empty, xp.full_like(total, -math.inf), total)
    return total.reshape(tuple(n for k, n in enumerate(x.shape) if k not in axes))


def close(actual, expected):
    """Elementwise: ``actual`` within tolerance of ``expected`` (a NaN is
    close to nothing), the absolute tolerance scaled to ``expected``."""
    rtol, atol = (1e-3, 1e-3) if FLOAT_DTYPE == "float32" else (1e-6, 1e-8)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    scale = np.abs(expected[np.isfinite(expected)]).max(initial=1.0)
    return np.isclose(actual, expected, rtol=rtol, atol=atol * scale)


def assert_gradients_equal_eager(compiled, eager_fn, arrays, seed):
    """Wherever eager funsor's gradient is finite, the compiled one equals
    it, or equals the finite gradient of eager funsor's exact term-by-term
    evaluation (:func:`exact_log_contractions`) where its einsum underflowed.

    ``compiled(arrays)`` and ``eager_fn(arrays)`` give the result; a case
    whose eager result overflows (``inf``, NaN) has no reference."""
    value = to_numpy(data_of(eager_fn(arrays)))
    if np.isnan(value).any() or (value == math.inf).any():
        reject()

    def compiled_loss(a):
        return weighted_loss(compiled(a), seed)

    def eager_loss(a):
        return weighted_loss(eager_fn(a), seed)

    actual = gradients(compiled_loss, arrays)
    expected = gradients(eager_loss, arrays)
    wrong = {k: np.isfinite(e) & ~close(actual[k], e) for k, e in expected.items()}
    if any(w.any() for w in wrong.values()):
        with exact_log_contractions():
            exact = gradients(eager_loss, arrays)
        for k, x in exact.items():
            wrong[k] &= ~(np.isfinite(x) & close(actual[k], x))
    for k, w in wrong.items():
        assert not w.any(), (
            f"gradient by {k} at {np.argwhere(w)[:4].tolist()}: compiled "
            f"{actual[k][w][:4]}, eager {expected[k][w][:4]}"
        )


# ---------------------------------------------------------------- expressions
@cases("expressions")
@given(expressions((), 3), st.integers(0, 2**16), st.sampled_from([0.0, 0.2, 0.5]))
def test_expression_gradients_equal_eager(expr, seed, fraction):
    rng = np.random.RandomState(seed)
    arrays = {
        name: special_array(rng, domain.shape, fraction, SPECIAL_EXP)
        for name, domain in expr.inputs.items()
        if domain.dtype == "real"
    }
    if not arrays:
        reject()
    try:
        evaluate(expr, arrays)
    except Exception:  # funsor itself cannot evaluate it: no reference
        reject()
    program = compile_funsor(expr)
    assert_gradients_equal_eager(
        lambda a: program(**a), lambda a: evaluate(expr, a), arrays, seed
    )


def test_logsumexp_gradient_where_its_result_rounds_to_the_max():
    # A case the fuzzer found (float32 on torch): v[i] + T[i] rounds to
    # T[i], and logsumexp's result to T (log 2 is below its rounding), so
    # torch's gradient exp(x - result) was 1 per entry (mass 2), where the
    # gradient of a logsumexp is a softmax (mass 1).
    i = Variable("i", Bint[2])
    big = from_numpy(np.array([3.6133e15, 3.6133e15]))
    with reflect:
        expr = (
            Variable("v", Reals[2])[i] + Tensor(big, OrderedDict(i=Bint[2]))
        ).reduce(ops.logaddexp, i)
    arrays = {"v": from_numpy(np.array([1.7641, 0.4002]))}
    program = compile_funsor(expr)
    actual = gradients(lambda a: weighted_loss(program(**a), 0), arrays)["v"]
    with exact_log_contractions():
        exact = gradients(lambda a: weighted_loss(evaluate(expr, a), 0), arrays)["v"]
    assert close(actual, exact).all(), (actual, exact)
    weight = np.random.RandomState(0).rand() + 0.5  # weighted_loss's
    assert np.isclose(actual.sum(), weight, rtol=1e-3)  # a softmax's mass


# --------------------------------------------------------------- sum-products
X, Y, PLATE = Bint[2], Bint[3], Bint[2]


@st.composite
def plated_sum_products(draw):
    """funsor's plated ``sum_product``: ``x`` global, ``y`` local to plate ``i``."""
    globals_ = [("x",)]
    locals_ = [("i", "x", "y"), ("i", "y"), ("i",), ("i", "x")]
    names = [draw(st.sampled_from(globals_))]
    names += draw(st.lists(st.sampled_from(locals_), min_size=1, max_size=3))
    domains = {"x": X, "y": Y, "i": PLATE}
    if not any("y" in n for n in names):
        names.append(("i", "y"))
    kept = draw(st.sampled_from([frozenset(), frozenset(["x"])]))

    def fn(*arrays):
        factors = [
            Tensor(a, OrderedDict((k, domains[k]) for k in n))
            for a, n in zip(arrays, names)
        ]
        eliminate = frozenset(["x", "y", "i"]) - kept
        return sum_product(ops.logaddexp, ops.add, factors, eliminate, frozenset(["i"]))

    shapes = [tuple(domains[k].size for k in n) for n in names]
    return fn, shapes


@st.composite
def markov_chains(draw):
    """An HMM's transitions over ``time``, optionally batched over ``b``,
    reduced by ``sequential_sum_product`` (``x_prev``/``x_curr``) or by
    ``sarkka_bilmes_product`` (funsor's ``_PREV_`` names, lag 1 or 2)."""
    T = draw(st.integers(1, 7))
    batched = draw(st.booleans())
    chain = draw(st.sampled_from(["sequential", "sarkka_bilmes1", "sarkka_bilmes2"]))
    state = OrderedDict(b=Bint[2]) if batched else OrderedDict()
    if chain == "sequential":
        lags = OrderedDict(x_prev=X, x_curr=X)
    elif chain == "sarkka_bilmes1":
        lags = OrderedDict(_PREV_x=X, x=X)
    else:
        lags = OrderedDict(_PREV__PREV_x=X, _PREV_x=X, x=X)
    inputs = OrderedDict(time=Bint[T], **state, **lags)
    time = Variable("time", Bint[T])

    def fn(trans):
        t = Tensor(trans, inputs)
        if chain == "sequential":
            product = sequential_sum_product(
                ops.logaddexp, ops.add, t, time, {"x_prev": "x_curr"}
            )
        else:
            product = sarkka_bilmes_product(ops.logaddexp, ops.add, t, time)
        return product.reduce(ops.logaddexp, frozenset(lags) & set(product.inputs))

    return fn, [tuple(d.size for d in inputs.values())]


@cases("sum_products")
@given(
    st.one_of(plated_sum_products(), markov_chains()),
    st.integers(0, 2**16),
    st.sampled_from([0.0, 0.2, 0.5]),
)
def test_sum_product_gradients_equal_eager(case, seed, fraction):
    fn, shapes = case
    rng = np.random.RandomState(seed)
    arrays = {f"f{k}": special_array(rng, s, fraction) for k, s in enumerate(shapes)}

    def called(function):
        return lambda a: function(*a.values())

    assert_gradients_equal_eager(called(jit(fn)), called(fn), arrays, seed)


# ------------------------------------------------------------------ Gaussians
def random_prec_sqrt(rng, batch, dim):
    """Lower-triangular square roots of well-conditioned precisions."""
    root = rng.randn(*batch, dim, dim)
    precision = root @ np.swapaxes(root, -1, -2) + 0.5 * np.eye(dim)
    return np.linalg.cholesky(precision)


@cases("gaussians")
@given(
    st.sampled_from(["integrate_x", "integrate_all", "evaluate", "two_gaussians"]),
    st.sampled_from([Real, Reals[2]]),
    st.integers(0, 2**16),
    st.sampled_from([0.0, 0.2, 0.5]),
)
def test_gaussian_gradients_equal_eager(kind, x_domain, seed, fraction):
    rng = np.random.RandomState(seed)
    dim = x_domain.num_elements
    inputs = OrderedDict(i=Bint[3], x=x_domain)
    magnitude = rng.choice([1.0, 100.0])
    arrays = {
        "white_vec": from_numpy(magnitude * rng.randn(3, dim)),
        "prec_sqrt": from_numpy(random_prec_sqrt(rng, (3,), dim)),
        "logits": special_array(rng, (3,), fraction),
        "point": from_numpy(magnitude * rng.randn(*x_domain.shape)),
        "white_vec2": from_numpy(rng.randn(dim)),
        "prec_sqrt2": from_numpy(random_prec_sqrt(rng, (), dim)),
    }

    def fn(white_vec, prec_sqrt, logits, point, white_vec2, prec_sqrt2):
        g = Gaussian(white_vec=white_vec, prec_sqrt=prec_sqrt, inputs=inputs)
        factor = Tensor(logits, OrderedDict(i=Bint[3]))
        if kind == "integrate_x":
            return (g + factor).reduce(ops.logaddexp, "x")
        if kind == "integrate_all":
            return (g + factor).reduce(ops.logaddexp)
        if kind == "evaluate":
            return (g + factor)(x=Tensor(point))
        g2 = Gaussian(
            white_vec=white_vec2, prec_sqrt=prec_sqrt2, inputs=OrderedDict(x=x_domain)
        )
        return (g + g2).reduce(ops.logaddexp, "x") + factor

    def called(function):
        return lambda a: function(**a)

    assert_gradients_equal_eager(called(jit(fn)), called(fn), arrays, seed)


# ------------------------------------------------- cases the fuzzer found
def test_gaussian_normalizer_gradient_is_as_accurate_as_eager():
    # A square prec_sqrt: the log normalizer has no quadratic shift (funsor
    # leaves it out). The program computed it as |L⁻¹Pw|² - |w|², two norms
    # of 10⁴ whose float32 rounding made the gradient 0.5% off.
    inputs = OrderedDict(i=Bint[3], x=Real)
    rng = np.random.RandomState(348)
    arrays = {
        "white_vec": from_numpy(100.0 * rng.randn(3, 1)),
        "prec_sqrt": from_numpy(random_prec_sqrt(rng, (3,), 1)),
    }

    def fn(white_vec, prec_sqrt):
        g = Gaussian(white_vec=white_vec, prec_sqrt=prec_sqrt, inputs=inputs)
        return g.reduce(ops.logaddexp, "x")

    expected = gradients(lambda a: weighted_loss(fn(**a), 0), arrays)
    actual = gradients(lambda a: weighted_loss(jit(fn)(**a), 0), arrays)
    for name, e in expected.items():
        np.testing.assert_allclose(actual[name], e, rtol=1e-5, atol=1e-6)
