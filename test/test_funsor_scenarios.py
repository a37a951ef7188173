"""funsor's own scenarios, compiled (issue #15): plated einsum through
funsor's optimizer route, and sum-products built the README's way (under
``reflect``, then ``apply_optimizer``). Each program equals funsor's eager
result on the same arrays, on every backend.

The equations follow the shapes of funsor 0.4.8's ``test/test_einsum.py``
plated examples, written out here."""

import functools
import math

import pytest
from funsor import ops
from funsor.domains import Bint, Reals
from funsor.einsum import BACKEND_OPS, einsum
from funsor.interpretations import reflect
from funsor.optimizer import apply_optimizer
from funsor.sum_product import (
    dynamic_partial_sum_product,
    modified_partial_sum_product,
    partial_sum_product,
    sarkka_bilmes_product,
    sequential_sum_product,
    sum_product,
)
from funsor.tensor import Tensor
from funsor.terms import Variable
from funsor.testing import randn

from funsor_lowering import compile_function, compile_funsor
from funsor_lowering.backends import array_backend
from funsor_lowering.errors import IntermediateTooLargeError

from .conftest import BACKEND
from .helpers import assert_matches, check_compiled, random_arrays
from .test_compile_function import check_function

SIZES = dict(zip("abcdijk", (2, 3, 2, 3, 4, 3, 2)))

# (equation, plates)
PLATED_EQUATIONS = [
    ("i->", "i"),
    (",i->", "i"),
    ("ai->", "i"),
    ("ai->i", "i"),
    ("ai->ai", "i"),
    ("a,ai,abij->", "ij"),
    ("a,abi,bcij->a", "ij"),
    ("ai,ai->i", "i"),
    ("a,b,i,ai,bi->", "i"),
    ("ab,bc,cd->", ""),
]


# Output plates missing from an input: eager funsor raises
# NotImplementedError("TODO"), and so does compiling.
UNSUPPORTED_BY_FUNSOR = [
    ("a,ai,bij->bij", "ij"),
    ("a,ai,abij->bij", "ij"),
    (",ai,abij->aij", "ij"),
    ("ai,abi,bcij->bcij", "ij"),
    ("a,abi,bcij,bcdijk->cdijk", "ijk"),
]


def _domains(inputs):
    return {
        f"x{k}": Reals[tuple(SIZES[c] for c in letters)]
        for k, letters in enumerate(inputs)
    }


def _einsum_function(equation, plates, backend):
    inputs = equation.split("->")[0].split(",")

    def fn(**arrays):
        terms = [
            arrays[f"x{k}"][tuple(letters)] if letters else arrays[f"x{k}"]
            for k, letters in enumerate(inputs)
        ]
        return einsum(equation, *terms, plates=plates, backend=backend)

    return fn, _domains(inputs)


@pytest.mark.parametrize("backend", sorted(BACKEND_OPS))
@pytest.mark.parametrize("equation, plates", PLATED_EQUATIONS)
def test_plated_einsum_compiles(equation, plates, backend):
    fn, domains = _einsum_function(equation, plates, backend)
    check_function(fn, **domains)


@pytest.mark.parametrize("equation, plates", UNSUPPORTED_BY_FUNSOR)
def test_plated_einsum_fails_as_eager_funsor_fails(equation, plates):
    fn, domains = _einsum_function(equation, plates, "funsor.einsum.numpy_log")
    arrays = {name: Tensor(randn(d.shape)) for name, d in domains.items()}
    with pytest.raises(NotImplementedError) as eager_error:
        fn(**arrays)
    with pytest.raises(NotImplementedError) as compiled_error:
        compile_function(fn, **domains)
    assert str(compiled_error.value) == str(eager_error.value)


@pytest.mark.parametrize("num_steps", [1, 2, 5])
def test_plated_hmm_einsum_compiles(num_steps):
    # funsor's make_plated_hmm_einsum shape: hidden states x_t over time,
    # observations y_t in a plate i
    letters = "abcdefgh"[: num_steps + 1]
    inputs = [letters[0]] + [letters[t] + letters[t + 1] for t in range(num_steps)]
    inputs += [letters[t + 1] + "i" for t in range(num_steps)]
    equation = ",".join(inputs) + "->"
    sizes = dict.fromkeys(letters, 3)
    sizes["i"] = 4
    domains = {
        f"x{k}": Reals[tuple(sizes[c] for c in term)] for k, term in enumerate(inputs)
    }

    def fn(**arrays):
        terms = [arrays[f"x{k}"][tuple(term)] for k, term in enumerate(inputs)]
        return einsum(equation, *terms, plates="i", backend="funsor.einsum.numpy_log")

    check_function(fn, **domains)


@pytest.mark.parametrize(
    "sum_op, prod_op", [(ops.logaddexp, ops.add), (ops.add, ops.mul)]
)
def test_sum_product_under_reflect_then_optimizer_compiles(sum_op, prod_op):
    def fn(f, g, h):
        factors = [f["a"], g["a", "b", "i"], h["b", "c", "i", "j"]]
        with reflect:
            expr = sum_product(
                sum_op, prod_op, factors, frozenset("abc"), frozenset("ij")
            )
        return apply_optimizer(expr)

    check_function(
        fn,
        f=Reals[SIZES["a"]],
        g=Reals[SIZES["a"], SIZES["b"], SIZES["i"]],
        h=Reals[SIZES["b"], SIZES["c"], SIZES["i"], SIZES["j"]],
    )


@pytest.mark.parametrize("num_steps", [1, 2, 7, 100, 1000])
def test_hmm_with_emissions_compiles(num_steps):
    # a transition factor between x_{t-1} and x_t plus an emission factor
    # of x_t, chained by funsor's sequential_sum_product
    def hmm(init, trans, emit):
        factor = trans["time", "prev", "curr"] + emit["time", "curr"]
        time = Variable("time", Bint[num_steps])
        chain = sequential_sum_product(
            ops.logaddexp, ops.add, factor, time, {"prev": "curr"}
        )
        return (init["prev"] + chain).reduce(ops.logaddexp, frozenset({"prev", "curr"}))

    check_function(
        hmm, init=Reals[3], trans=Reals[num_steps, 3, 3], emit=Reals[num_steps, 3]
    )


@pytest.mark.parametrize("num_steps", [3, 10, 100])
def test_reduce_without_names_reduces_what_eager_reduces(num_steps):
    # eager funsor reduces the Bint inputs of the value it holds; the real
    # Variables of a block stand for the arrays the program will receive
    def hmm(init, trans):
        time = Variable("time", Bint[num_steps])
        chain = sequential_sum_product(
            ops.logaddexp,
            ops.add,
            trans["time", "prev", "curr"],
            time,
            {"prev": "curr"},
        )
        return (init["prev"] + chain).reduce(ops.logaddexp)

    check_function(hmm, init=Reals[3], trans=Reals[num_steps, 3, 3])


def test_reduce_without_names_of_a_value_without_bint_inputs_is_the_value():
    def fn(x, y):
        return {"same": (x * 2).reduce(ops.add), "sum": (x + y["i"]).reduce(ops.add)}

    check_function(fn, x=Reals[3], y=Reals[4, 3])


@pytest.mark.parametrize(
    "impl", [modified_partial_sum_product, dynamic_partial_sum_product]
)
@pytest.mark.parametrize(
    "sum_op, prod_op", [(ops.logaddexp, ops.add), (ops.add, ops.mul)]
)
@pytest.mark.parametrize(
    "first", [frozenset(), frozenset({"time", "x_0", "x_prev", "x_curr"})]
)
@pytest.mark.parametrize("x_dim, num_steps", [(3, 1), (1, 5), (3, 5)])
def test_markov_partial_sum_products_compile(
    impl, sum_op, prod_op, first, x_dim, num_steps
):
    # funsor's test_modified_partial_sum_product_0 structure: a global
    # factor, an initial factor of x_0 and a transition over time,
    # eliminated in two calls (``first``, then the rest)
    everything = frozenset({"time", "x_0", "x_prev", "x_curr"})
    step = {"time": frozenset({("x_0", "x_prev", "x_curr")})}

    def fn(f1, f2, f3):
        factors = [f1, f2["x_0"], f3["time", "x_prev", "x_curr"]]
        factors = impl(sum_op, prod_op, factors, first, step)
        factors = impl(sum_op, prod_op, factors, everything - first, step)
        return functools.reduce(prod_op, factors)

    check_function(fn, f1=Reals[()], f2=Reals[x_dim], f3=Reals[num_steps, x_dim, x_dim])


@pytest.mark.parametrize("num_steps", [1, 4, 7])
def test_sarkka_bilmes_product_compiles(num_steps):
    def fn(trans):
        factor = trans["time", "x_prev", "x_curr"]
        time = Variable("time", Bint[num_steps])
        chain = sarkka_bilmes_product(ops.logaddexp, ops.add, factor, time, frozenset())
        return chain.reduce(ops.logaddexp, frozenset({"x_prev", "x_curr"}))

    check_function(fn, trans=Reals[num_steps, 3, 3])


@pytest.mark.parametrize(
    "impl",
    [partial_sum_product, modified_partial_sum_product, dynamic_partial_sum_product],
)
@pytest.mark.parametrize(
    "sum_op, prod_op", [(ops.add, ops.mul), (ops.logaddexp, ops.add)]
)
@pytest.mark.parametrize(
    "first, then",
    [("", "abcij"), ("c", "abij"), ("cj", "abi"), ("bcj", "ai"), ("bcij", "a")],
)
def test_plated_partial_sum_product_in_two_calls_compiles(
    impl, sum_op, prod_op, first, then
):
    # funsor's test_partial_sum_product: factors a, abi, bcij with plates
    # ij, eliminated in two calls, then multiplied together
    plates = frozenset("ij") if impl is partial_sum_product else {"i": {}, "j": {}}

    def fn(f, g, h):
        factors = [f["a"], g["a", "b", "i"], h["b", "c", "i", "j"]]
        factors = impl(sum_op, prod_op, factors, frozenset(first), plates)
        factors = impl(sum_op, prod_op, factors, frozenset(then), plates)
        return functools.reduce(prod_op, factors)

    check_function(fn, f=Reals[2], g=Reals[2, 2, 2], h=Reals[2, 2, 2, 2])


def test_partial_sum_product_with_plates_compiles():
    def fn(f, g):
        factors = [f["a", "i"], g["a", "b", "i", "j"]]
        with reflect:
            results = partial_sum_product(
                ops.logaddexp, ops.add, factors, frozenset("abij"), frozenset("ij")
            )
        return [apply_optimizer(r) for r in results]

    check_function(fn, f=Reals[2, 4], g=Reals[2, 3, 4, 5])


# ----------------------------------------------------- intermediate sizes
def _chain_factors(num_steps, states, emissions=False):
    factors = [Variable("init", Reals[states])["x0"]]
    for t in range(1, num_steps):
        trans = Variable(f"t{t}", Reals[states, states])
        factors.append(trans[f"x{t - 1}", f"x{t}"])
        if emissions:
            factors.append(Variable(f"e{t}", Reals[states])[f"x{t}"])
    return factors, frozenset(f"x{t}" for t in range(num_steps))


def _largest_value(program):
    return max(math.prod(t.shape) for t in program.value_types if t is not None)


@pytest.mark.parametrize("emissions", [False, True])
@pytest.mark.parametrize(
    "sum_op, prod_op", [(ops.logaddexp, ops.add), (ops.add, ops.mul)]
)
def test_sum_product_built_under_reflect_alone_is_planned(sum_op, prod_op, emissions):
    """``sum_product`` under ``reflect`` without ``apply_optimizer`` is a
    reduced product of every factor: eager funsor would broadcast them all
    (10**50 elements here); the program contracts it as funsor's optimizer
    would plan it, and equals funsor's evaluation of that plan."""
    factors, eliminate = _chain_factors(50, 10, emissions)
    with reflect:
        expr = sum_product(sum_op, prod_op, factors, eliminate, frozenset())
    program = compile_funsor(expr)
    logspace = prod_op is ops.add
    scans = logspace and array_backend(BACKEND).scans_chains
    # no joint of three variables per step: pairs, every step stacked for a
    # scan, or (log space, separate factors) a round's pairs of steps
    # batched, 24 joints of three variables at most
    bound = 49 * 10 * 10 if scans else 24 * 10**3 if logspace else 10 * 10
    assert _largest_value(program) <= bound
    arrays = random_arrays(expr.inputs)
    if prod_op is ops.mul:  # keep the product of 50 factors finite
        arrays = {k: ops.exp(v * 0.1) * 0.3 for k, v in arrays.items()}
    with reflect:
        planned = apply_optimizer(expr)
    expected = planned(**{k: Tensor(v) for k, v in arrays.items()})
    assert_matches(program(**arrays), expected.data, rtol=1e-4)


def test_small_reduced_product_equals_eager_funsor_brute_force():
    factors, eliminate = _chain_factors(5, 3, emissions=True)
    with reflect:
        expr = sum_product(ops.logaddexp, ops.add, factors, eliminate, frozenset())
    check_compiled(expr, rtol=1e-5)


def test_an_intermediate_beyond_the_limit_raises_naming_the_term():
    """Factors that share no variable and are not reduced can only be
    broadcast: a 10**9-element joint. Compiling says so, naming the term
    and its size, instead of a program that dies allocating 7.5 GiB."""
    x = Variable("x", Reals[10, 10, 10, 10])["a", "b", "c", "d"]
    y = Variable("y", Reals[10, 10, 10, 10, 10])["e", "f", "g", "h", "i"]
    with pytest.raises(IntermediateTooLargeError) as error:
        compile_funsor(x + y)
    message = str(error.value)
    assert "(10, 10, 10, 10, 10, 10, 10, 10, 10)" in message
    assert "1,000,000,000 elements" in message
    assert "Variable('x'" in message and "MAX_INTERMEDIATE_ELEMENTS" in message
    assert isinstance(error.value, MemoryError)


def test_reduced_chain_built_under_reflect_fails_as_eager_funsor_fails():
    """``sequential_sum_product(...).reduce(...)`` built under ``reflect``
    over an indexed symbolic transition: funsor 0.4.8 cannot evaluate it
    (alpha-renaming loses the part names of its ``Cat`` s): eager
    evaluation fails on its ``Cat`` assertion or leaves the term lazy.
    Compiling raises that assertion, never a value."""
    T = 5
    data = Variable("data", Reals[T, 3, 3])
    time = Variable("time", Bint[T])
    with reflect:
        chain = sequential_sum_product(
            ops.logaddexp, ops.add, data[time, "prev", "curr"], time, {"prev": "curr"}
        )
        expr = chain.reduce(ops.logaddexp)
    try:
        value = expr(data=Tensor(randn((T, 3, 3))))
    except AssertionError:
        pass
    else:
        assert not isinstance(value, Tensor)  # funsor left it unevaluated
    with pytest.raises(AssertionError) as compiled:
        compile_funsor(expr)
    last = compiled.traceback[-1]
    assert last.frame.code.name == "__init__" and "funsor" in str(last.path)
    assert last.statement.lines[-1].strip().startswith("assert part_name in")
