"""Gaussian algebra with funsor.ops, differentially against funsor's own
Gaussians: random batch inputs and real inputs of total dimension 1-4
(hypothesis), each operation traced on arrays and compared with funsor
eager on fresh arrays; and the same algebra applied to lowered terms
(Variables) compiles into programs equal to it on arrays."""

from collections import OrderedDict

import funsor
import numpy as np
from funsor import ops
from funsor.domains import Bint, Reals
from funsor.gaussian import Gaussian
from funsor.interpretations import reflect
from funsor.tensor import Tensor
from funsor.terms import Variable
from hypothesis import given, settings
from hypothesis import strategies as st

from funsor_lowering import compile_funsor, trace_function
from funsor_lowering.funsor_hooks import package_shape_rules
from funsor_lowering.tracing import gaussian_algebra as ga

from .helpers import FLOAT_DTYPE, assert_matches, from_numpy, to_numpy

BACKEND = funsor.get_backend()
EXAMPLES = 10 if BACKEND == "jax" else 25  # jax traces slowly


@st.composite
def gaussian_specs(draw):
    """(ints, reals, rank): Bint inputs, real inputs (total dim 1-4)."""
    n_ints = draw(st.integers(0, 2))
    ints = OrderedDict((f"i{k}", Bint[draw(st.integers(1, 3))]) for k in range(n_ints))
    sizes = draw(
        st.sampled_from([(1,), (2,), (3,), (4,), (1, 1), (1, 2), (2, 2), (1, 3)])
    )
    reals = OrderedDict((f"x{k}", Reals[s]) for k, s in enumerate(sizes))
    rank = sum(sizes) + draw(st.integers(0, 2))
    return ints, reals, rank


def data(spec, seed):
    ints, reals, rank = spec
    rng = np.random.default_rng(seed)
    batch = tuple(d.size for d in ints.values())
    dim = sum(d.num_elements for d in reals.values())
    prec_sqrt = rng.standard_normal(batch + (dim, rank)) + 2 * np.eye(dim, rank)
    arrays = {
        "w": rng.standard_normal(batch + (rank,)),
        "P": prec_sqrt,
        "v": rng.standard_normal(batch + (dim,)),
    }
    return {k: from_numpy(v) for k, v in arrays.items()}


def build(spec, w, P):
    ints, reals, _ = spec
    inputs = OrderedDict(ints)
    inputs.update(reals)
    return Gaussian(white_vec=w, prec_sqrt=P, inputs=inputs)


def point(spec, v):
    """Values of the real inputs, each with all the Bint inputs."""
    ints, reals, _ = spec
    values, start = {}, 0
    for name, domain in reals.items():
        n = domain.num_elements
        part = Tensor(v, ints)[start : start + n].reshape(domain.shape)
        values[name] = part
        start += n
    return values


OPERATIONS = {
    "log_density": lambda g, x: g(**x),
    "normalizer": lambda g, x: g.reduce(ops.logaddexp),
    "marginal": lambda g, x: g.reduce(ops.logaddexp, "x0")(**x),
    "condition": lambda g, x: g(x0=x["x0"]).reduce(ops.logaddexp),
    "sum": lambda g, x: (g + g(**{k: Variable(k, d.output) for k, d in x.items()}))(
        **x
    ),
    "plate": lambda g, x: _plate(g, x),
}


def _plate(g, x):
    """The product over the Bint inputs, at the point's first batch entry."""
    ints = frozenset(k for k, d in g.inputs.items() if d.dtype != "real")
    first = {k: 0 for k in ints}
    return g.reduce(ops.add, ints)(**{k: t(**first) for k, t in x.items()})


def check_operation(name, spec):
    def fn(w, P, v):
        g = build(spec, w, P)
        result = OPERATIONS[name](g, point(spec, v))
        ints = tuple(k for k in spec[0] if k in result.inputs)
        return result.align(ints).data

    program = trace_function(fn, data(spec, 0))
    fresh = data(spec, 1)
    assert_matches(program(**fresh), fn(**fresh), rtol=1e-4, atol=1e-4)


@settings(max_examples=EXAMPLES, deadline=None)
@given(spec=gaussian_specs(), name=st.sampled_from(sorted(OPERATIONS)))
def test_operations_match_funsor(spec, name):
    if name in ("marginal", "condition") and len(spec[1]) < 2:
        name = "log_density"  # needs a second real input to keep
    if name == "plate" and not spec[0]:
        name = "normalizer"  # needs a Bint input
    check_operation(name, spec)


def test_algebra_on_lowered_terms_compiles():
    w, P = Variable("w", Reals[3, 4]), Variable("P", Reals[3, 2, 4])
    x = Variable("x", Reals[3, 2])
    cases = {
        "log_normalizer": lambda w, P, x: ga.log_normalizer(w, P),
        "log_density": lambda w, P, x: ga.log_density(w, P, x),
        "marginalize": lambda w, P, x: ga.marginalize(w, P, slice(1, None))[1],
        "condition": lambda w, P, x: ga.condition(
            w, P, ops.getslice(x, (Ellipsis, slice(1, None))), slice(1, None)
        )[0],
        # compressed factors differ (Cholesky on terms, QR on arrays); the
        # shift, -1/2 ||w||² + 1/2 wᵀPᵀ(PPᵀ)⁻¹Pw, and constants do not
        "compress": lambda w, P, x: ga.compress(w, P)[2],
        "marginalize_compressed": lambda w, P, x: ga.marginalize_compressed(w, P, 1)[2],
    }
    rng = np.random.default_rng(0)
    arrays = {
        "w": from_numpy(rng.standard_normal((3, 4))),
        "P": from_numpy(rng.standard_normal((3, 2, 4)) + 2 * np.eye(2, 4)),
        "x": from_numpy(rng.standard_normal((3, 2))),
    }
    for name, fn in cases.items():
        with reflect, package_shape_rules():  # as the package builds them
            term = fn(w, P, x)
        program = compile_funsor(term)
        expected = fn(**arrays)
        assert_matches(
            program(**{k: arrays[k] for k in program.inputs}),
            expected,
            rtol=1e-5,
            path=name,
        )


def test_compression_by_cholesky_is_the_same_gaussian_as_by_qr():
    # another basis of the rank dimension: equal densities (with the shift),
    # precisions, information vectors and samples
    rng = np.random.default_rng(1)
    w = from_numpy(rng.standard_normal((3, 7)))
    P = from_numpy(rng.standard_normal((3, 2, 7)))
    x = from_numpy(rng.standard_normal((3, 2)))
    noise = from_numpy(rng.standard_normal((3, 2)))
    by_qr, by_cholesky = ga.compress(w, P), ga.compress(w, P, full_rank=True)
    for new_w, new_P, shift in (by_qr, by_cholesky):
        assert tuple(new_P.shape) == (3, 2, 2)
        density = ops.add(ga.log_density(new_w, new_P, x), shift)
        assert_matches(density, ga.log_density(w, P, x), rtol=1e-6)
        assert_matches(ga.precision(new_P), ga.precision(P), rtol=1e-6)
        assert_matches(ga.info_vec(new_w, new_P), ga.info_vec(w, P), rtol=1e-6)
        sample = ga.sample(new_w, new_P, noise)
        assert_matches(sample, ga.sample(w, P, noise), rtol=1e-6)
    # (the factors themselves differ: the Cholesky one is lower triangular)
    new_P = np.asarray(by_cholesky[1])
    assert np.allclose(new_P, np.tril(new_P))


@st.composite
def marginal_specs(draw):
    """(batch, dropped, kept, rank): rank covering every row."""
    batch = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    dropped, kept = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    rank = dropped + kept + draw(st.integers(0, 4))
    return batch, dropped, kept, rank


@settings(max_examples=EXAMPLES, deadline=None)
@given(spec=marginal_specs(), full_rank=st.booleans(), seed=st.integers(0, 2**16))
def test_marginalize_compressed_is_funsors_marginal(spec, full_rank, seed):
    # one factorization of the whole Gaussian gives funsor's marginal over
    # the kept rows: equal density (with the constant), precision,
    # information vector and draws, in a square (compressed) factor
    batch, dropped, kept, rank = spec
    tol = dict(rtol=1e-4, atol=1e-4)
    # float32 draws solve with P, whose condition number (hundreds) scales
    # the rounding error of both sides (ours is the smaller against float64)
    draw_tol = dict(rtol=2e-2, atol=2e-2) if FLOAT_DTYPE == "float32" else tol
    rng = np.random.default_rng(seed)
    dim = dropped + kept
    w = from_numpy(rng.standard_normal(batch + (rank,)))
    P = from_numpy(rng.standard_normal(batch + (dim, rank)) + 2 * np.eye(dim, rank))
    x = from_numpy(rng.standard_normal(batch + (kept,)))
    noise = from_numpy(rng.standard_normal(batch + (kept,)))
    ints = OrderedDict((f"i{k}", Bint[n]) for k, n in enumerate(batch))
    inputs = OrderedDict(ints, dropped=Reals[dropped], kept=Reals[kept])
    expected = Gaussian(white_vec=w, prec_sqrt=P, inputs=inputs).reduce(
        ops.logaddexp, "dropped"
    )
    (marginal,) = [t for t in expected.terms if isinstance(t, Gaussian)]
    marginal = marginal.align(tuple(ints) + ("kept",))

    new_w, new_P, constant = ga.marginalize_compressed(w, P, dropped, full_rank)
    assert tuple(new_P.shape) == batch + (kept, kept)
    density = ops.add(ga.log_density(new_w, new_P, x), constant)
    assert_matches(density, expected(kept=Tensor(x, ints)).data, **tol)
    old_w, old_P = marginal.white_vec, marginal.prec_sqrt
    assert_matches(ga.precision(new_P), ga.precision(old_P), **tol)
    assert_matches(ga.info_vec(new_w, new_P), ga.info_vec(old_w, old_P), **tol)
    assert_matches(
        ga.sample(new_w, new_P, noise),
        ga.sample(old_w, old_P, noise),
        **draw_tol,
    )
    if full_rank:  # funsor's compression by Cholesky: lower triangular
        factor = np.asarray(to_numpy(new_P))
        assert np.allclose(factor, np.tril(factor))
