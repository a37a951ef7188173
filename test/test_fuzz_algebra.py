"""Differential fuzzer of the algebra: random expressions mixing every
reduction op with every binary op, plates (products over a batch input),
negation and constants of both signs, written as ordinary funsor code.
Each is compiled (``compile_function``: the code runs once on ``Variable`` s
in a compiling block, where funsor normalizes terms) and compared with the
same code run by eager funsor on ``Tensor`` s of the same arrays.

A rewrite of a reduction through a product is only right where the algebra
holds for all values: here values are negative as often as positive, and
reductions cover inputs that some factors lack.
"""

from collections import OrderedDict

import numpy as np
from funsor import ops
from funsor.domains import Bint, Reals
from funsor.interpretations import reflect
from funsor.tensor import Tensor
from funsor.terms import Number, Variable
from hypothesis import given, reject
from hypothesis import strategies as st

from funsor_lowering import compile_function, compile_funsor

from .helpers import assert_matches, from_numpy, to_numpy

BATCH = OrderedDict(a=Bint[2], b=Bint[3], c=Bint[2])
REDUCTIONS = [ops.add, ops.mul, ops.logaddexp, ops.max, ops.min]
BINARIES = [ops.add, ops.sub, ops.mul, ops.max, ops.min, ops.logaddexp]
UNARIES = [ops.neg, ops.abs, ops.tanh]
INPUTS = {
    "v_": (),
    "v_a": ("a",),
    "v_bc": ("b", "c"),
    "v_ac": ("a", "c"),
    "v_abc": ("a", "b", "c"),
}


def recipes(depth):
    """A random expression as a nested tuple (a recipe), built into funsor
    code by :func:`build`."""
    leaf = st.one_of(
        st.tuples(st.just("input"), st.sampled_from(sorted(INPUTS))),
        st.tuples(
            st.just("constant"),
            st.sampled_from([(), ("a",), ("c",), ("b", "c")]),
            st.integers(0, 2**16),
        ),
        st.tuples(st.just("number"), st.sampled_from([-2.5, -1.0, 0.5, 3.0])),
    )
    if depth == 0:
        return leaf
    sub = recipes(depth - 1)
    return st.one_of(
        leaf,
        st.tuples(
            st.just("reduce"),
            st.sampled_from(range(len(REDUCTIONS))),
            st.sets(st.sampled_from(sorted(BATCH)), min_size=1),
            st.tuples(
                st.just("binary"), st.sampled_from(range(len(BINARIES))), sub, sub
            ),
        ),
        st.tuples(st.just("unary"), st.sampled_from(range(len(UNARIES))), sub),
        st.tuples(st.just("binary"), st.sampled_from(range(len(BINARIES))), sub, sub),
        st.tuples(
            st.just("reduce"),
            st.sampled_from(range(len(REDUCTIONS))),
            st.sets(st.sampled_from(sorted(BATCH)), min_size=1),
            sub,
        ),
    )


def constant_tensor(names, seed):
    rng = np.random.RandomState(seed)
    shape = tuple(BATCH[n].size for n in names)
    data = rng.uniform(-2.0, 2.0, shape)
    return Tensor(from_numpy(data), OrderedDict((n, BATCH[n]) for n in names))


def build(recipe, inputs):
    """The funsor code a recipe stands for, over ``inputs`` (name -> a
    ``Variable`` or a ``Tensor`` of the whole array)."""
    kind = recipe[0]
    if kind == "input":
        value = inputs[recipe[1]]
        names = INPUTS[recipe[1]]
        return value[names] if names else value
    if kind == "constant":
        return constant_tensor(*recipe[1:])
    if kind == "number":
        return Number(recipe[1])
    if kind == "unary":
        return UNARIES[recipe[1]](build(recipe[2], inputs))
    if kind == "binary":
        lhs, rhs = build(recipe[2], inputs), build(recipe[3], inputs)
        return BINARIES[recipe[1]](lhs, rhs)
    if kind == "reduce":
        arg = build(recipe[3], inputs)
        names = frozenset(recipe[2]) & frozenset(arg.inputs)
        return arg.reduce(REDUCTIONS[recipe[1]], names) if names else arg
    raise ValueError(kind)


def domains_of():
    return {
        name: Reals[tuple(BATCH[n].size for n in names)]
        for name, names in INPUTS.items()
    }


def random_arrays(seed):
    rng = np.random.RandomState(seed)
    return {
        name: from_numpy(rng.uniform(-2.0, 2.0, domain.shape))
        for name, domain in domains_of().items()
    }


def eager_reference(recipe, arrays):
    """The recipe's code run by eager funsor on ``Tensor`` s of ``arrays``;
    rejects the example where there is no meaningful reference."""
    try:
        expected = build(recipe, {k: Tensor(v) for k, v in arrays.items()})
    except (AssertionError, NotImplementedError, KeyError):
        reject()  # funsor itself cannot build it: no reference
    data = to_numpy(expected.data)
    if not np.isfinite(data).all() or np.abs(data).max() > 1e6:
        reject()  # overflow, or products of many values beyond float precision
    return expected.data


@given(recipes(3), st.integers(0, 2**16))
def test_algebra_matches_eager(recipe, seed):
    arrays, domains = random_arrays(seed), domains_of()
    expected = eager_reference(recipe, arrays)
    program = compile_function(lambda **kw: build(recipe, kw), **domains)
    actual = program(**{k: v for k, v in arrays.items() if k in program.inputs})
    assert_matches(actual, expected, rtol=1e-5, atol=1e-5)


@given(recipes(3), st.integers(0, 2**16))
def test_algebra_built_lazily_matches_eager(recipe, seed):
    """The same code built lazily (``reflect``: terms as written, constant
    subterms folded by the lowering) and compiled with ``compile_funsor``."""
    arrays, domains = random_arrays(seed), domains_of()
    expected = eager_reference(recipe, arrays)
    with reflect:
        expr = build(recipe, {k: Variable(k, d) for k, d in domains.items()})
    program = compile_funsor(expr)
    actual = program(**{k: v for k, v in arrays.items() if k in program.inputs})
    assert_matches(actual, expected, rtol=1e-5, atol=1e-5)


def _constant(values, names):
    data = from_numpy(np.asarray(values, dtype=float))
    return Tensor(data, OrderedDict((n, BATCH[n]) for n in names))


def test_min_of_a_product_with_a_negative_factor():
    # a: a negative sum of maxima, without "c"; min does not distribute over *
    def fn(v0):
        m = _constant([-3.0, -1.0], "a").reduce(ops.max, "a")
        a = m + _constant([-2.0, -4.0], "c").reduce(ops.max, "c")
        return (a * v0["b", "c"]).reduce(ops.min, "c")

    v0 = from_numpy(np.array([[0.5, -1.0], [2.0, 1.5], [-0.3, 0.2]]))
    expected = fn(Tensor(v0)).data
    program = compile_function(fn, v0=Reals[3, 2])
    assert_matches(program(v0=v0), expected)
    with reflect:
        lazy = fn(Variable("v0", Reals[3, 2]))
    assert_matches(compile_funsor(lazy)(v0=v0), expected)


def test_plate_product_raises_a_factor_without_the_plate_to_its_size():
    # prod_c (s * sum_{a,b} (A[a,c] + B[b,c])), s = max_d v[d] has no c
    def fn(A, B, v):
        inner = (A["a", "c"] + B["b", "c"]).reduce(ops.add, frozenset("ab"))
        s = v["b"].reduce(ops.max, "b")
        return (s * inner).reduce(ops.mul, "c")

    A = from_numpy(np.array([[-0.7, 1.2], [0.9, -1.4]]))
    B = from_numpy(np.array([[0.3, -0.2], [1.1, 0.4]]))
    v = from_numpy(np.array([-1.5, -0.5, -2.0]))
    expected = fn(Tensor(A), Tensor(B), Tensor(v)).data
    program = compile_function(fn, A=Reals[2, 2], B=Reals[2, 2], v=Reals[3])
    assert_matches(program(A=A, B=B, v=v), expected)
    for constant in ("A", "v"):  # constant factors are folded at compile time
        consts = {"A": Tensor(A), "B": Tensor(B), "v": Tensor(v)}

        def partly(constant=constant, consts=consts, **kw):
            return fn(**{**kw, constant: consts[constant]})

        domains = {"A": Reals[2, 2], "B": Reals[2, 2], "v": Reals[3]}
        domains.pop(constant)
        program = compile_function(partly, **domains)
        inputs = {"A": A, "B": B, "v": v}
        inputs.pop(constant)
        assert_matches(program(**inputs), expected)
