"""compile_function on funsor entry points used unchanged: funsor.einsum, the
sum_product family, memoize; nested outputs; pickling into a fresh process;
a clear error for code that needs concrete values. References: the same
function run by funsor eagerly on Tensors of the same arrays."""

import funsor
import numpy as np
import pytest
from funsor import ops
from funsor.domains import Bint, Real, Reals
from funsor.einsum import einsum
from funsor.interpretations import eager, memoize, reflect
from funsor.interpreter import reinterpret
from funsor.optimizer import apply_optimizer
from funsor.sum_product import (
    MarkovProduct,
    modified_partial_sum_product,
    partial_sum_product,
    sequential_sum_product,
    sum_product,
)
from funsor.tensor import Tensor
from funsor.terms import Funsor, Tuple, Variable

from funsor_lowering import compile_function, compiling

from .helpers import (
    assert_matches,
    data_of,
    evaluate,
    from_numpy,
    random_arrays,
    run_in_fresh_process,
    run_three_ways,
    to_numpy,
)


def eager_reference(fn, arrays, symbolic):
    """``fn`` evaluated by funsor eagerly on Tensors of ``arrays``, laid out
    like the compiled outputs (batch inputs in ``symbolic``'s order)."""
    result = fn(**{k: Tensor(v) for k, v in arrays.items()})
    return _layout(_evaluate_leaves(result), symbolic)


def _evaluate_leaves(value):
    """Reinterpret eagerly what ``fn`` built lazily (under reflect)."""
    if isinstance(value, dict):
        return {k: _evaluate_leaves(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(_evaluate_leaves(v) for v in value)
    with eager:
        return reinterpret(value)


def _layout(value, symbolic):
    if isinstance(value, dict):
        return {k: _layout(v, symbolic[k]) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(_layout(v, s) for v, s in zip(value, symbolic))
    if isinstance(value, Tuple):
        return tuple(_layout(v, s) for v, s in zip(value.args, symbolic.args))
    assert isinstance(value, Funsor)
    order = tuple(k for k, d in symbolic.inputs.items() if d.dtype != "real")
    if isinstance(value, Tensor):
        value = value.align(order)
    return data_of(value)


def check_function(fn, rtol=1e-5, **domains):
    """``fn`` compiled by compile_function and in a ``with compiling:``
    block, each checked three ways against funsor's eager result."""
    program = compile_function(fn, **domains)
    with compiling as interp:
        symbolic = fn(**{k: Variable(k, d) for k, d in domains.items()})
    block_program = interp.compile(symbolic, inputs=domains)
    arrays = random_arrays(domains)
    expected = eager_reference(fn, arrays, symbolic)
    for compiled in (program, block_program):
        for actual in run_three_ways(compiled, arrays):
            assert_matches(actual, expected, rtol=rtol, atol=1e-5)
    return program


# --------------------------------------------------------------- funsor.einsum
EINSUM_CASES = [
    ("ab,bc->ac", {}),
    ("a,ab,b->", {}),
    ("ab,bc,cd->da", {}),
    ("abc,bd->acd", {}),
    ("ab,b->ab", {}),
    ("ai,i->a", {"plates": "i"}),
    ("a,ai,bi->b", {"plates": "i"}),
]
SIZES = {"a": 2, "b": 3, "c": 4, "d": 2, "i": 3}


@pytest.mark.parametrize(
    "backend", ["numpy", "funsor.einsum.numpy_log", "funsor.einsum.numpy_map"]
)
@pytest.mark.parametrize(
    "equation, kwargs", EINSUM_CASES, ids=[e for e, _ in EINSUM_CASES]
)
def test_funsor_einsum(equation, kwargs, backend):
    inputs = equation.split("->")[0].split(",")
    domains = {
        f"t{n}": Reals[tuple(SIZES[c] for c in inp)] for n, inp in enumerate(inputs)
    }

    def fn(**operands):
        terms = [operands[f"t{n}"][tuple(inp)] for n, inp in enumerate(inputs)]
        if backend == "numpy":  # (add, mul): positive operands, as probabilities
            terms = [t.exp() for t in terms]
        return einsum(equation, *terms, backend=backend, **kwargs)

    check_function(fn, rtol=1e-4, **domains)


# ---------------------------------------------------------- sum_product family
def factors_of(f, g, h):
    return [f["x"], g["x", "y"], h["y", "z", "i"]]


FACTOR_DOMAINS = {"f": Reals[2], "g": Reals[2, 3], "h": Reals[3, 4, 5]}


def log_sum_product(f, g, h, eliminate, plates=frozenset()):
    """The log-space sum_product of the factors of ``f``, ``g``, ``h``."""
    factors = factors_of(f, g, h)
    return sum_product(ops.logaddexp, ops.add, factors, eliminate, plates)


def plated_sum_product(eliminate):
    """A function of the factors' data: their sum_product over plate i."""

    def fn(f, g, h):
        return log_sum_product(f, g, h, eliminate, frozenset("i"))

    return fn


def test_sum_product_with_plates():
    check_function(plated_sum_product(frozenset("xyzi")), rtol=1e-4, **FACTOR_DOMAINS)


def test_partial_sum_product_nested_outputs():
    def fn(f, g, h):
        results = partial_sum_product(
            ops.logaddexp, ops.add, factors_of(f, g, h), frozenset("yz"), frozenset("i")
        )
        return {"factors": list(results), "count": (results[0],)}

    check_function(fn, rtol=1e-4, **FACTOR_DOMAINS)


def test_modified_partial_sum_product_markov():
    T, S = 4, 3

    def fn(init, trans):
        factors = [init["x_0"], trans["time", "x_prev", "x_curr"]]
        return modified_partial_sum_product(
            ops.logaddexp,
            ops.add,
            factors,
            eliminate=frozenset({"time", "x_0", "x_prev", "x_curr"}),
            plate_to_step={"time": frozenset({("x_0", "x_prev", "x_curr")})},
        )

    check_function(fn, rtol=1e-4, init=Reals[S], trans=Reals[T, S, S])


@pytest.mark.parametrize("T", [1, 3, 6])
def test_sequential_sum_product(T):
    def fn(trans):
        time = Variable("time", Bint[T])
        return sequential_sum_product(
            ops.logaddexp,
            ops.add,
            trans["time", "prev", "curr"],
            time,
            {"prev": "curr"},
        )

    check_function(fn, rtol=1e-4, trans=Reals[T, 3, 3])


def test_markov_product():
    def fn(trans):
        chain = MarkovProduct(
            ops.logaddexp,
            ops.add,
            trans["time", "prev", "curr"],
            "time",
            {"prev": "curr"},
        )
        return chain.reduce(ops.logaddexp, "prev")

    domains = {"trans": Reals[5, 3, 3]}
    program = compile_function(fn, **domains)
    with compiling:
        symbolic = fn(Variable("trans", domains["trans"]))
    # Reference: funsor evaluates the symbolic result at the arrays. (Running
    # fn on Tensors here hits a funsor 0.4.8 state bug: an empty eager Cat.)
    arrays = random_arrays(domains)
    expected = data_of(evaluate(symbolic, arrays))
    for actual in run_three_ways(program, arrays):
        assert_matches(actual, expected, rtol=1e-4)


def test_lazy_build_with_apply_optimizer():
    def fn(f, g, h):
        with reflect:
            return apply_optimizer(log_sum_product(f, g, h, frozenset("xyz")))

    check_function(fn, rtol=1e-4, **FACTOR_DOMAINS)


def test_memoize_composes():
    def fn(f, g, h):
        with memoize():
            a = log_sum_product(f, g, h, frozenset("xy"))
            b = log_sum_product(f, g, h, frozenset("xy"))
        return a, b

    program = check_function(fn, rtol=1e-4, **FACTOR_DOMAINS)
    first, second = program.output
    assert first == second  # the memoized computations are one value


# ------------------------------------------------------- programs are portable
def test_pickled_program_runs_in_a_fresh_process(tmp_path):
    program = compile_function(plated_sum_product(frozenset("xyz")), **FACTOR_DOMAINS)
    arrays = random_arrays(FACTOR_DOMAINS)
    result = run_in_fresh_process(
        program, arrays, tmp_path, "funsor_lowering.lowering.rules"
    )
    assert_matches(result, program(**arrays))


# ------------------------------------------------------ needs concrete values
@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x * float(x),
        lambda x: x if bool(x > 0) else -x,
        lambda x: x * int(x),
    ],
    ids=["float", "bool", "int"],
)
def test_concrete_values_error_points_to_trace_function(fn):
    with pytest.raises(TypeError, match="concrete value.*trace_function") as error:
        compile_function(fn, x=Real)
    # it names the user's line: the lambda above, in this file
    assert f"{__file__}:" in str(error.value)


def test_backend_is_recorded():
    program = compile_function(lambda x: x + 1, x=Real)
    assert program.backend == funsor.get_backend()


def test_reduction_funsor_normalize_cannot_build():
    # funsor 0.4.8's normalize merges this into a (logaddexp, mul)
    # Contraction and fails; compiling keeps the term as written.
    def fn(f):
        return (f["i"] * 2.0).reduce(ops.logaddexp, "i")

    check_function(fn, f=Reals[5])


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")
def test_division_by_zero_gives_eager_funsors_infinity():
    # funsor's normalize writes x / y as x * reciprocal(y), and funsor's
    # reciprocal takes 1 / 0 to the largest float; eager funsor divides
    def fn(x, y):
        ratio = x / y
        return {"ratio": ratio, "exp": ratio.exp(), "sum": (x["i"] / y["i"]).sum()}

    domains = {"x": Reals[3], "y": Reals[3]}
    arrays = {
        "x": from_numpy(np.array([0.5, 1.0, -2.0])),
        "y": from_numpy(np.array([2.0, 0.0, 0.0])),
    }
    program = compile_function(fn, **domains)
    with compiling as interp:
        symbolic = fn(**{k: Variable(k, d) for k, d in domains.items()})
    block_program = interp.compile(symbolic, inputs=domains)
    expected = eager_reference(fn, arrays, symbolic)
    assert np.isinf(to_numpy(expected["ratio"])[1:]).all()
    for compiled in (program, block_program):
        for actual in run_three_ways(compiled, arrays):
            assert_matches(actual, expected, rtol=1e-6, atol=0)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_inverse_pairs_keep_eager_funsors_edge_values():
    # funsor's normalize cancels exp(log(x)), log(exp(x)) and
    # reciprocal(reciprocal(x)); eager funsor computes both ops: nan for the
    # log of a negative, inf for exp's overflow, and its reciprocal of 0 is
    # the largest float (whose reciprocal is not 0)
    def fn(x):
        return {
            "exp_log": x.log().exp(),
            "log_exp": x.exp().log(),
            "reciprocals": ops.reciprocal(ops.reciprocal(x)),
        }

    domains = {"x": Reals[4]}
    arrays = {"x": from_numpy(np.array([-1.0, 0.0, 2.0, 1000.0]))}
    program = compile_function(fn, **domains)
    with compiling as interp:
        symbolic = fn(**{k: Variable(k, d) for k, d in domains.items()})
    block_program = interp.compile(symbolic, inputs=domains)
    expected = eager_reference(fn, arrays, symbolic)
    expected = {k: to_numpy(v) for k, v in expected.items()}
    assert np.isnan(expected["exp_log"][0]) and np.isinf(expected["log_exp"][3])
    for compiled in (program, block_program):
        for actual in run_three_ways(compiled, arrays):
            assert set(actual) == set(expected)
            for k, e in expected.items():  # NaNs where eager funsor has NaNs
                np.testing.assert_allclose(to_numpy(actual[k]), e, rtol=1e-6, atol=0)
