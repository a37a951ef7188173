"""funsor 0.4.8's Gaussian sum-product scenarios (``test/test_sum_product.py``:
plated batches, the five intractable plate structures, Gaussian and mixed
Bint/Real chains, biased chains, Särkkä-Bilmes), written in our words and
traced: each traced program, run on fresh arrays, equals funsor's eager
result on those arrays, or fails with funsor's own error where eager funsor
fails."""

from collections import OrderedDict
from functools import partial

import funsor
import numpy as np
import pytest
from funsor import ops
from funsor.domains import Bint, Real, Reals
from funsor.gaussian import Gaussian
from funsor.interpretations import moment_matching
from funsor.sum_product import (
    MarkovProduct,
    mixed_sequential_sum_product,
    sarkka_bilmes_product,
    sequential_sum_product,
    sum_product,
)
from funsor.tensor import Tensor
from funsor.terms import Variable

from funsor_lowering import compile_function, trace_function

from .helpers import assert_matches, from_numpy

BACKEND = funsor.get_backend()
DTYPE = np.float64 if BACKEND == "numpy" else np.float32


def gaussian_arrays(rng, name, inputs):
    """``{name_w, name_P}``: a random Gaussian's white_vec and full-rank
    lower-triangular prec_sqrt, as funsor.testing.random_gaussian makes."""
    batch = tuple(d.size for d in inputs.values() if d.dtype != "real")
    dim = sum(d.num_elements for d in inputs.values() if d.dtype == "real")
    A = rng.standard_normal(batch + (dim, dim))
    L = np.linalg.cholesky(A @ np.swapaxes(A, -1, -2) + 0.5 * np.eye(dim))
    loc = rng.standard_normal(batch + (dim,))
    w = (L @ loc[..., None])[..., 0]
    return {f"{name}_w": w, f"{name}_P": L}


def tensor_arrays(rng, name, inputs):
    shape = tuple(d.size for d in inputs.values())
    return {f"{name}_t": rng.standard_normal(shape)}


class Factors:
    """Named factors over declared inputs: their arrays, and the funsors
    built from whatever arrays a call receives."""

    def __init__(self, **factors):
        self.factors = {k: OrderedDict(v) for k, v in factors.items()}

    def arrays(self, seed):
        rng = np.random.default_rng(seed)
        out = {}
        for name, inputs in self.factors.items():
            real = any(d.dtype == "real" for d in inputs.values())
            make = gaussian_arrays if real else tensor_arrays
            out.update(make(rng, name, inputs))
        return {k: from_numpy(np.asarray(v, DTYPE)) for k, v in out.items()}

    def build(self, arrays):
        out = {}
        for name, inputs in self.factors.items():
            if f"{name}_t" in arrays:
                names = tuple(inputs)
                out[name] = Tensor(arrays[f"{name}_t"])[names] if names else None
            else:
                out[name] = Gaussian(
                    white_vec=arrays[f"{name}_w"],
                    prec_sqrt=arrays[f"{name}_P"],
                    inputs=inputs,
                )
        return out


def density(result, points):
    """``result``'s data, evaluated at ``points`` for its real inputs, with
    its Bint inputs in sorted order (a layout both sides share)."""
    real = {k: Tensor(points[k]) for k, d in result.inputs.items() if d.dtype == "real"}
    value = result(**real) if real else result
    return value.align(tuple(sorted(value.inputs))).data


def points_for(result_inputs, seed):
    rng = np.random.default_rng(seed)
    return {
        k: from_numpy(np.asarray(rng.standard_normal(d.shape), DTYPE))
        for k, d in result_inputs.items()
        if d.dtype == "real"
    }


def check_scenario(factors, scenario, real_outputs, rtol=1e-3, atol=1e-3):
    """Trace ``scenario(**funsors)`` (evaluated at points for the
    ``real_outputs``) on one set of arrays; on fresh arrays the program
    equals funsor's eager evaluation."""
    points = points_for(real_outputs, 7)

    def fn(**arrays):
        return density(scenario(**factors.build(arrays)), points)

    # the evaluation points are the function's constants
    program = trace_function(fn, factors.arrays(0), allow_constants=True)
    fresh = factors.arrays(1)
    assert_matches(program(**fresh), fn(**fresh), rtol=rtol, atol=atol)
    return program


# ------------------------------------------------------------ plated batches
def test_partial_sum_product_batch_1():
    factors = Factors(f=dict(i=Bint[2], j=Bint[2], x=Real))

    def scenario(f):
        return sum_product(
            ops.logaddexp, ops.add, [f], frozenset("ix"), frozenset("ij")
        )

    check_scenario(factors, scenario, {})


def test_partial_sum_product_batch_2():
    factors = Factors(
        fi=dict(i=Bint[2], x=Real), fik=dict(i=Bint[2], k=Bint[2], x=Real)
    )

    def scenario(fi, fik):
        return sum_product(
            ops.logaddexp, ops.add, [fi, fik], frozenset("ix"), frozenset("ik")
        )

    check_scenario(factors, scenario, {})


# ------------------------------------------------- intractable plate structures
INTRACTABLE = {
    "1": (
        dict(
            fi=dict(i=Bint[2], x=Real),
            fj=dict(j=Bint[2], y=Real),
            fij=dict(i=Bint[2], j=Bint[2], x=Real, y=Real),
        ),
        "ijxy",
        "ij",
        {},
    ),
    "2": (
        dict(
            fi=dict(i=Bint[2], x=Real, zx=Real),
            fj=dict(j=Bint[2], y=Real, zy=Real),
            fij=dict(i=Bint[2], j=Bint[2], x=Real, y=Real, zx=Real, zy=Real),
        ),
        ["i", "j", "x", "y", "zx", "zy"],
        "ij",
        {},
    ),
    "3": (
        dict(
            f=dict(w=Real),
            fi=dict(i=Bint[2], w=Real, x=Real),
            fj=dict(j=Bint[2], y=Real),
            fij=dict(i=Bint[2], j=Bint[2], x=Real, y=Real),
        ),
        "ijxy",
        "ij",
        {"w": Real},
    ),
    "4": (
        dict(
            fi=dict(i=Bint[2], x=Real),
            fjk=dict(j=Bint[2], k=Bint[2], y=Real),
            fij=dict(i=Bint[2], j=Bint[2], x=Real, y=Real),
        ),
        "ijxy",
        "ijk",
        {},
    ),
    "5": (
        dict(
            fik=dict(i=Bint[2], k=Bint[2], x=Real),
            fj=dict(j=Bint[2], y=Real),
            fij=dict(i=Bint[2], j=Bint[2], x=Real, y=Real),
        ),
        "ijxy",
        "ijk",
        {},
    ),
}


@pytest.mark.parametrize("structure", sorted(INTRACTABLE))
def test_intractable_plate_structures(structure):
    spec, eliminate, plates, outputs = INTRACTABLE[structure]
    factors = Factors(**spec)

    def scenario(**fs):
        return sum_product(
            ops.logaddexp,
            ops.add,
            list(fs.values()),
            frozenset(eliminate),
            frozenset(plates),
        )

    check_scenario(factors, scenario, outputs)


def test_var_in_plate_fails_as_eager_funsor_fails():
    factors = Factors(f=dict(i=Bint[2], x=Real, z=Real))

    def fn(**arrays):
        (f,) = factors.build(arrays).values()
        return sum_product(
            ops.logaddexp,
            ops.add,
            [f],
            frozenset("ix"),
            frozenset("i"),
            pedantic=True,
        ).data

    with pytest.raises(ValueError) as eager:
        fn(**factors.arrays(0))
    with pytest.raises(ValueError) as traced:
        trace_function(fn, factors.arrays(0))
    assert str(traced.value) == str(eager.value)


def test_var_in_plate_substituted_by_an_indexed_input():
    """funsor 0.4.8 defers this one (xfail, "unclear semantics"): a plated
    Gaussian whose real input is an input indexed by the plate. Eager funsor
    evaluates it; traced and compiled programs equal that evaluation."""
    factors = Factors(f=dict(i=Bint[2], x=Real, z=Real))

    def scenario(f, zs):
        f = f(z=zs["i"])
        return sum_product(ops.logaddexp, ops.add, [f], frozenset("ix"), frozenset("i"))

    def fn(zs, **arrays):
        return scenario(zs=Tensor(zs), **factors.build(arrays)).data

    arrays = dict(factors.arrays(0), zs=from_numpy(np.asarray([0.3, -1.2], DTYPE)))
    program = trace_function(fn, arrays)
    fresh = dict(factors.arrays(1), zs=from_numpy(np.asarray([-0.5, 0.7], DTYPE)))
    assert_matches(program(**fresh), fn(**fresh), rtol=1e-4, atol=1e-4)

    def built(f_w, f_P, zs):
        inputs = factors.factors["f"]
        f = Gaussian(white_vec=f_w, prec_sqrt=f_P, inputs=inputs)
        return scenario(f, zs)

    domains = {k: Reals[tuple(v.shape)] for k, v in fresh.items()}
    compiled = compile_function(built, **domains)
    assert_matches(compiled(**fresh), fn(**fresh), rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------- Gaussian chains
CHAINS = {
    "sequential_sum_product": sequential_sum_product,
    "MarkovProduct": MarkovProduct,
    "mixed_2": partial(mixed_sequential_sum_product, num_segments=2),
    "mixed_3": partial(mixed_sequential_sum_product, num_segments=3),
}
BATCHES = {"": {}, "foo,bar": {"foo": Bint[2], "bar": Bint[3]}}


@pytest.mark.parametrize("num_steps", [1, 2, 5])
@pytest.mark.parametrize("batch", ["", "foo,bar"])
@pytest.mark.parametrize("impl", sorted(CHAINS))
def test_gaussian_chain(impl, batch, num_steps):
    inputs = dict(BATCHES[batch], time=Bint[num_steps], prev=Reals[2], curr=Reals[2])
    factors = Factors(trans=inputs)

    def scenario(trans):
        time = Variable("time", Bint[num_steps])
        return CHAINS[impl](ops.logaddexp, ops.add, trans, time, {"prev": "curr"})

    check_scenario(factors, scenario, {"prev": Reals[2], "curr": Reals[2]})


MULTI_DOMAINS = {
    "bint-bint": (Bint[2], Bint[3]),
    "real-reals": (Real, Reals[2, 2]),
    "bint-reals": (Bint[2], Reals[2]),
}


@pytest.mark.parametrize("num_steps", [1, 5])
@pytest.mark.parametrize("domains", sorted(MULTI_DOMAINS))
@pytest.mark.parametrize("impl", sorted(CHAINS))
def test_two_variable_chain_under_moment_matching(impl, domains, num_steps):
    """A chain of (x, y) pairs; with a Bint x and a real y, funsor's
    moment matching collapses the mixture at each step (``Cat`` s of Tensor
    and Gaussian parts in the scan)."""
    x_domain, y_domain = MULTI_DOMAINS[domains]
    inputs = dict(
        time=Bint[num_steps],
        x_prev=x_domain,
        x_curr=x_domain,
        y_prev=y_domain,
        y_curr=y_domain,
    )
    factors = Factors(trans=inputs)
    step = {"x_prev": "x_curr", "y_prev": "y_curr"}

    def scenario(trans):
        with moment_matching:
            time = Variable("time", Bint[num_steps])
            return CHAINS[impl](ops.logaddexp, ops.add, trans, time, step)

    outputs = {k: d for k, d in inputs.items() if d.dtype == "real"}
    check_scenario(factors, scenario, outputs)


@pytest.mark.parametrize("num_steps", [1, 3, 10])
@pytest.mark.parametrize("dim", [1, 3])
def test_chain_with_a_shared_bias(num_steps, dim):
    factors = Factors(
        bias=dict(bias=Reals[dim]),
        trans=dict(time=Bint[num_steps], x_prev=Reals[dim], x_curr=Reals[dim]),
        obs=dict(time=Bint[num_steps], x_curr=Reals[dim], bias=Reals[dim]),
    )

    def scenario(bias, trans, obs):
        time = Variable("time", Bint[num_steps])
        factor = trans + obs + bias
        return sequential_sum_product(
            ops.logaddexp, ops.add, factor, time, {"x_prev": "x_curr"}
        )

    outputs = {"bias": Reals[dim], "x_prev": Reals[dim], "x_curr": Reals[dim]}
    check_scenario(factors, scenario, outputs)


@pytest.mark.parametrize("num_steps", [1, 3])
def test_chain_with_per_sensor_biases_fails_as_eager_funsor_fails(num_steps):
    """funsor 0.4.8 defers this (xfail: no pattern for ``Gaussian(x=y[z])``
    with real x): substituting an indexed real variable into a Gaussian."""
    factors = Factors(obs=dict(time=Bint[num_steps], x_curr=Reals[2], bias=Reals[2]))
    bias = Variable("bias", Reals[2, 2])
    sensor = Tensor(
        from_numpy(np.arange(num_steps) % 2), OrderedDict(time=Bint[num_steps]), 2
    )

    def fn(**arrays):
        obs = factors.build(arrays)["obs"]
        with funsor.interpretations.eager_or_die:
            return obs(bias=bias[sensor]).data

    with pytest.raises(NotImplementedError) as eager:
        fn(**factors.arrays(0))
    with pytest.raises(NotImplementedError) as traced:
        trace_function(fn, factors.arrays(0))
    assert str(traced.value) == str(eager.value)


# ------------------------------------------------------------- Särkkä-Bilmes
SARKKA_BILMES_LOCALS = [
    (("a", Real), ("_PREV_a", Real)),
    (("a", Reals[2]), ("b", Reals[2]), ("_PREV_b", Reals[2])),
    (("a", Real), ("b", Real), ("_PREV__PREV_b", Real)),
]


@pytest.mark.parametrize("num_periods", [1, 2])
@pytest.mark.parametrize("locals_", SARKKA_BILMES_LOCALS, ids=str)
def test_sarkka_bilmes_product_of_gaussians(locals_, num_periods):
    duration = 4
    factors = Factors(trans=OrderedDict((("time", Bint[duration]),) + locals_))

    def scenario(trans):
        time = Variable("time", Bint[duration])
        return sarkka_bilmes_product(
            ops.logaddexp, ops.add, trans, time, frozenset(), num_periods=num_periods
        )

    with moment_matching:
        expected = scenario(**factors.build(factors.arrays(0)))
    check_scenario(factors, scenario, dict(expected.inputs))
