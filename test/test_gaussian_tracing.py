"""Gaussians traced completely: functions that build funsor Gaussians from
arrays and return log-densities trace into programs of funsor.ops only. Each
program runs on fresh arrays and is compared with the same function run by
funsor eagerly (its own Gaussian algebra) on those arrays."""

from collections import OrderedDict

import funsor
import numpy as np
from funsor import ops
from funsor.delta import Delta
from funsor.domains import Bint, Real, Reals
from funsor.gaussian import Gaussian
from funsor.sum_product import MarkovProduct, sequential_sum_product, sum_product
from funsor.tensor import Tensor
from funsor.terms import Variable

from funsor_lowering import compile_function, trace_function

from .helpers import assert_matches, from_numpy, to_numpy

BACKEND = funsor.get_backend()


def arrays(seed, **shapes):
    """Backend arrays: ``name=(shape, kind)`` with kind normal or psd_sqrt
    (a prec_sqrt with rank >= dim: full-rank precision)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in shapes.items():
        data = rng.standard_normal(shape)
        if name.startswith("P"):
            data = data + 2 * np.eye(shape[-2], shape[-1])  # well conditioned
        out[name] = from_numpy(
            data.astype(np.float32 if BACKEND != "numpy" else np.float64)
        )
    return out


def check(fn, seed=0, rtol=1e-4, allow_constants=False, **shapes):
    program = trace_function(
        fn, arrays(seed, **shapes), allow_constants=allow_constants
    )
    fresh = arrays(seed + 1, **shapes)
    assert_matches(program(**fresh), fn(**fresh), rtol=rtol, atol=1e-4)
    return program


def gaussian(w, P, **inputs):
    return Gaussian(white_vec=w, prec_sqrt=P, inputs=OrderedDict(**inputs))


def test_log_density_with_batch_input():
    # funsor's own tracer test leaves Gaussians expected-to-fail
    def fn(w, P, v):
        g = gaussian(w, P, i=Bint[2], x=Reals[3])
        return g(x=Tensor(v)["i"]).data

    check(fn, w=(2, 4), P=(2, 3, 4), v=(2, 3))


def test_conditioning_one_of_two_reals():
    def fn(w, P, v, u):
        g = gaussian(w, P, x=Reals[2], y=Real)
        return g(y=Tensor(v))(x=Tensor(u)).data

    check(fn, w=(3,), P=(3, 3), v=(), u=(2,))


def test_marginalize_then_evaluate():
    def fn(w, P, u):
        g = gaussian(w, P, i=Bint[2], x=Reals[2], y=Real)
        return g.reduce(ops.logaddexp, "y")(x=Tensor(u)).data

    check(fn, w=(2, 4), P=(2, 3, 4), u=(2,))


def test_traced_marginal_is_compressed_and_equals_funsors():
    # rank 6 covers x, y, z: the traced marginal over (x, z) is square
    # (funsor keeps rank 6, 6 <= 2 * 3); it evaluates, normalizes and joins
    # another factor as funsor's does
    factors = []

    def fn(w, P, w2, P2, u):
        g = gaussian(w, P, i=Bint[2], x=Reals[2], y=Real, z=Real)
        marginal = g.reduce(ops.logaddexp, "y")
        factors.extend(t for t in marginal.terms if isinstance(t, Gaussian))
        joint = marginal + gaussian(w2, P2, z=Real)
        at_u = marginal(x=Tensor(u)).reduce(ops.logaddexp)
        return joint.reduce(ops.logaddexp).data, at_u.data

    check(fn, w=(2, 6), P=(2, 4, 6), w2=(1,), P2=(1, 1), u=(2,))
    shapes = {tuple(f.prec_sqrt.shape) for f in factors}
    assert (2, 3, 3) in shapes  # traced
    assert (2, 3, 6) in shapes  # funsor's, eager


def test_log_normalizer_and_batch_reduction():
    def fn(w, P):
        g = gaussian(w, P, i=Bint[3], x=Reals[2])
        z = g.reduce(ops.logaddexp, "x")
        return z.data, g.reduce(ops.logaddexp).data

    check(fn, w=(3, 2), P=(3, 2, 2))


def test_sum_of_gaussians_with_different_inputs():
    def fn(w1, P1, w2, P2, u, v):
        g = gaussian(w1, P1, x=Reals[2]) + gaussian(
            w2, P2, i=Bint[2], y=Real, x=Reals[2]
        )
        return (
            g(x=Tensor(u), y=Tensor(v)).data,
            g.reduce(ops.logaddexp, "x").reduce(ops.logaddexp, "y").data,
        )

    check(fn, w1=(2,), P1=(2, 2), w2=(2, 3), P2=(2, 3, 3), u=(2,), v=())


def test_plate_product():
    def fn(w, P, u):
        g = gaussian(w, P, i=Bint[3], x=Reals[2])
        return g.reduce(ops.add, "i")(x=Tensor(u)).data

    check(fn, w=(3, 2), P=(3, 2, 2), u=(2,))


def test_moment_constructors():
    def fn(m, L, C):
        cov = ops.einsum((C, C), "ij,kj->ik")
        cov = ops.add(cov, ops.new_eye(cov, (3,)))
        a = Gaussian(mean=m, covariance=cov, inputs=OrderedDict(x=Reals[3]))
        b = Gaussian(mean=m, precision=cov, inputs=OrderedDict(x=Reals[3]))
        return a.reduce(ops.logaddexp).data, b(x=Tensor(m)).data

    check(fn, m=(3,), L=(3, 3), C=(3, 3))


def test_tensor_plus_gaussian_contraction():
    def fn(t, w, P):
        g = gaussian(w, P, i=Bint[2], x=Reals[2])
        return (Tensor(t)["i"] + g).reduce(ops.logaddexp).data

    check(fn, t=(2,), w=(2, 2), P=(2, 2, 2))


def test_integer_substitution():
    def fn(w, P, u):
        g = gaussian(w, P, i=Bint[3], x=Reals[2])
        index = Tensor(from_numpy(np.array([2, 0])), OrderedDict(j=Bint[2]), 3)
        return g(i=1)(x=Tensor(u)).data, g(i=index)(x=Tensor(u)).data

    # the index is a literal of fn: a constant
    check(fn, allow_constants=True, w=(3, 2), P=(3, 2, 2), u=(2,))


def test_wide_gaussian_is_compressed_like_funsor():
    def fn(w, P, u):
        g = gaussian(w, P, x=Reals[2])  # rank 6 > 2 * dim
        return g(x=Tensor(u)).data, g.reduce(ops.logaddexp).data

    program = check(fn, w=(6,), P=(2, 6), u=(2,))
    assert any(o.op.name == "cholesky" for o in program.operations)


# ------------------------------------------------- Gaussian sum-products
T, D = 6, 2


def chain_arrays():
    return dict(w0=(D,), P0=(D, D), w=(T, 2 * D), P=(T, 2 * D, 2 * D))


def kalman(w0, P0, w, P):
    """log ∫ of a Gaussian chain: an initial factor and T transitions,
    eliminated by funsor's sequential_sum_product."""
    init = gaussian(w0, P0, x_curr=Reals[D])
    trans = gaussian(w, P, time=Bint[T], x_prev=Reals[D], x_curr=Reals[D])
    chain = sequential_sum_product(
        ops.logaddexp, ops.add, trans, Variable("time", Bint[T]), {"x_prev": "x_curr"}
    )
    return (init(x_curr="x_prev") + chain).reduce(ops.logaddexp).data


def hand_written_filter(w0, P0, w, P):
    """The same log-partition by an information-form forward filter in
    plain numpy (Schur complements), independent of funsor and of us."""
    w0, P0, w, P = (np.asarray(to_numpy(a), np.float64) for a in (w0, P0, w, P))
    prec, info, const = P0 @ P0.T, P0 @ w0, -0.5 * w0 @ w0
    for t in range(T):
        prec_t = P[t] @ P[t].T
        info_t = P[t] @ w[t]
        joint_prec = prec_t.copy()
        joint_prec[:D, :D] += prec
        joint_info = info_t.copy()
        joint_info[:D] += info
        const = const - 0.5 * w[t] @ w[t]
        a, b = joint_prec[:D, :D], joint_prec[:D, D:]
        solve_b, solve_i = np.linalg.solve(a, b), np.linalg.solve(a, joint_info[:D])
        const += 0.5 * joint_info[:D] @ solve_i + 0.5 * D * np.log(2 * np.pi)
        const -= 0.5 * np.linalg.slogdet(a)[1]
        prec = joint_prec[D:, D:] - b.T @ solve_b
        info = joint_info[D:] - b.T @ solve_i
    return (
        const
        + 0.5 * info @ np.linalg.solve(prec, info)
        + 0.5 * D * np.log(2 * np.pi)
        - 0.5 * np.linalg.slogdet(prec)[1]
    )


def test_kalman_filter_traces_and_matches_a_hand_written_filter():
    program = check(kalman, **chain_arrays())
    fresh = arrays(5, **chain_arrays())
    expected = hand_written_filter(**fresh)
    np.testing.assert_allclose(to_numpy(program(**fresh)), expected, rtol=1e-3)


def test_markov_product_of_gaussians():
    def fn(w, P):
        trans = gaussian(w, P, time=Bint[T], x_prev=Reals[D], x_curr=Reals[D])
        chain = MarkovProduct(
            ops.logaddexp, ops.add, trans, "time", {"x_prev": "x_curr"}
        )
        return chain.reduce(ops.logaddexp).data

    check(fn, w=(T, 2 * D), P=(T, 2 * D, 2 * D))


def test_plated_sum_product_of_gaussians():
    def fn(w0, P0, w, P):
        shared = gaussian(w0, P0, z=Reals[D])
        local = gaussian(w, P, i=Bint[3], z=Reals[D], y=Real)
        factors = [shared, local]
        return sum_product(
            ops.logaddexp,
            ops.add,
            factors,
            frozenset({"z", "y", "i"}),
            frozenset({"i"}),
        ).data

    check(fn, w0=(D,), P0=(D, D), w=(3, D + 1), P=(3, D + 1, D + 1))


# ------------------------------------------------------------- sampling
def draw(program, arrays, seed):
    if BACKEND == "jax":
        import jax

        return program(**arrays, rng_key=jax.random.PRNGKey(seed))
    return program(**arrays)


def test_gaussian_samples_are_live_with_the_right_moments():
    n = 4000

    def fn(w, P, rng_key=None):
        g = gaussian(w, P, x=Reals[2])
        sample = g.sample(frozenset({"x"}), OrderedDict(n=Bint[n]), rng_key=rng_key)
        (delta,) = [t for t in sample.terms if isinstance(t, Delta)]
        (normalizer,) = [t for t in sample.terms if isinstance(t, Tensor)]
        return delta.terms[0][1][0].data, normalizer.data

    inputs = arrays(0, w=(2,), P=(2, 2))
    if BACKEND == "jax":
        import jax

        inputs["rng_key"] = jax.random.PRNGKey(0)
    program = trace_function(fn, inputs)
    fresh = arrays(1, w=(2,), P=(2, 2))
    (first, normalizer), (second, _) = draw(program, fresh, 1), draw(program, fresh, 2)
    first, second = np.asarray(to_numpy(first)), np.asarray(to_numpy(second))
    assert first.shape == (n, 2) and not np.allclose(first, second)
    # the exact mean and covariance of the Gaussian
    w, P = (np.asarray(to_numpy(fresh[k]), np.float64) for k in ("w", "P"))
    precision = P @ P.T
    cov, mean = np.linalg.inv(precision), np.linalg.solve(precision, P @ w)
    stderr = np.sqrt(np.diag(cov) / n)
    assert np.all(np.abs(first.mean(0) - mean) < 5 * stderr)
    np.testing.assert_allclose(np.cov(first.T), cov, rtol=0.15, atol=0.05)
    expected = gaussian(fresh["w"], fresh["P"], x=Reals[2]).reduce(ops.logaddexp)
    assert_matches(normalizer, expected.data, rtol=1e-4)


def test_affine_substitution():
    def fn(w, P, a, u):
        g = gaussian(w, P, x=Reals[2], y=Real)
        z = Variable("z", Reals[2])
        conditioned = g(x=z * Tensor(a) + 1.0, y=z.sum() * 0.5)
        return conditioned(z=Tensor(u)).data, conditioned.reduce(ops.logaddexp).data

    check(fn, w=(3,), P=(3, 3), a=(2,), u=(2,))


# ----------------------------------------- Gaussians inside compile_function
def test_compile_function_builds_gaussians_from_its_inputs():
    # Inside compile_function, a Gaussian is built from the keyword funsors
    # directly: Gaussian(white_vec=w, prec_sqrt=P, inputs=...). The function
    # is then traced on example arrays (as for the adjoint and sampling).
    domains = {
        "w0": Reals[D],
        "P0": Reals[D, D],
        "w": Reals[T, 2 * D],
        "P": Reals[T, 2 * D, 2 * D],
    }

    def fn(w0, P0, w, P):
        init = Gaussian(white_vec=w0, prec_sqrt=P0, inputs=OrderedDict(x_curr=Reals[D]))
        trans = Gaussian(
            white_vec=w,
            prec_sqrt=P,
            inputs=OrderedDict(time=Bint[T], x_prev=Reals[D], x_curr=Reals[D]),
        )
        chain = MarkovProduct(
            ops.logaddexp, ops.add, trans, "time", {"x_prev": "x_curr"}
        )
        return {"log_z": (init(x_curr="x_prev") + chain).reduce(ops.logaddexp)}

    program = compile_function(fn, **domains)
    fresh = arrays(3, **{k: d.shape for k, d in domains.items()})
    expected = fn(**fresh)["log_z"].data  # funsor eager, on the arrays
    assert_matches(program(**fresh)["log_z"], expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(
        to_numpy(program(**fresh)["log_z"]), hand_written_filter(**fresh), rtol=1e-3
    )


def rank_deficient_pair(w1, P1, w2, P2):
    """A wide Gaussian whose precision is singular (zero rows, as Pyro's
    AutoGaussian initializes off-diagonal blocks): funsor compresses it by
    QR at construction. A second Gaussian makes the sum integrable."""
    x = OrderedDict(x=Reals[2])
    g = Gaussian(white_vec=w1, prec_sqrt=P1, inputs=x)
    h = Gaussian(white_vec=w2, prec_sqrt=P2, inputs=x)
    return (g + h).reduce(ops.logaddexp, "x")


def test_rank_deficient_precisions_compress_as_funsor_does():
    rng = np.random.default_rng(0)
    P1 = np.zeros((2, 5))
    P1[0] = rng.standard_normal(5)  # rank 1 of dim 2, wide: compressed
    arrays = {
        "w1": from_numpy(rng.standard_normal(5)),
        "P1": from_numpy(P1),
        "w2": from_numpy(rng.standard_normal(2)),
        "P2": from_numpy(np.eye(2) + 0.1 * rng.standard_normal((2, 2))),
    }
    expected = rank_deficient_pair(**arrays).data  # funsor's eager
    traced = trace_function(lambda **a: rank_deficient_pair(**a).data, arrays)
    assert_matches(traced(**arrays), expected, rtol=1e-5, atol=1e-6)
    domains = {"w1": Reals[5], "P1": Reals[2, 5], "w2": Reals[2], "P2": Reals[2, 2]}
    compiled = compile_function(rank_deficient_pair, **domains)
    assert_matches(compiled(**arrays), expected, rtol=1e-5, atol=1e-6)


def marginal_of_a_rank_one_factor(w1, P1, w2, P2):
    """Rank-1 factors over (x, y), plated by i, with x integrated out leave
    no information on y (funsor returns rank-0 Gaussians there), then fused
    along the plate (where funsor compresses wide ones); a second, full-rank
    factor makes the total integrable."""
    g = gaussian(w1, P1, i=Bint[5], x=Real, y=Reals[2]).reduce(ops.logaddexp, "x")
    g = g.reduce(ops.add, "i")
    h = gaussian(w2, P2, y=Reals[2])
    return (g + h).reduce(ops.logaddexp)


def test_marginal_with_no_information_left_is_rank_zero_as_in_funsor():
    """Pyro's PoissonGuide hits this: compressing the zero matrix that a
    rank-keeping marginal would leave has nan gradients (QR of a singular
    matrix); funsor's rank-0 Gaussian has none."""
    rng = np.random.default_rng(1)
    arrays = {
        "w1": from_numpy(rng.standard_normal((5, 1))),
        "P1": from_numpy(rng.standard_normal((5, 3, 1))),
        "w2": from_numpy(rng.standard_normal(2)),
        "P2": from_numpy(np.eye(2) + 0.1 * rng.standard_normal((2, 2))),
    }
    expected = marginal_of_a_rank_one_factor(**arrays).data
    traced = trace_function(lambda **a: marginal_of_a_rank_one_factor(**a).data, arrays)
    assert_matches(traced(**arrays), expected, rtol=1e-5, atol=1e-6)
    domains = {k: Reals[tuple(v.shape)] for k, v in arrays.items()}
    compiled = compile_function(marginal_of_a_rank_one_factor, **domains)
    assert_matches(compiled(**arrays), expected, rtol=1e-5, atol=1e-6)
    if BACKEND == "torch":
        import torch

        params = {k: v.clone().requires_grad_() for k, v in arrays.items()}

        def gradients(value, wrt):  # w1 drops out: a zero gradient
            grads = torch.autograd.grad(value, wrt, allow_unused=True)
            return [torch.zeros_like(x) if g is None else g for g, x in zip(grads, wrt)]

        grads = gradients(traced(**params), list(params.values()))
        assert all(torch.isfinite(g).all() for g in grads)
        eager = {k: v.clone().requires_grad_() for k, v in arrays.items()}
        value = marginal_of_a_rank_one_factor(**eager).data
        for g, e in zip(grads, gradients(value, list(eager.values()))):
            assert_matches(g, e, rtol=1e-4, atol=1e-6)
