"""``program.jit()`` as a user calls it: outputs of every nesting, calls with
several input signatures, from several threads at once, and bad input, on
each backend's compilers. Reference: eager funsor on the same arrays."""

import enum

import funsor
import numpy as np
import pytest
from funsor.domains import Reals
from funsor.tensor import Tensor

from funsor_lowering import compile_function

from .helpers import assert_matches, call_in_threads, data_of, from_numpy

BACKEND = funsor.get_backend()
DOMAINS = {"a": Reals[3, 3], "x": Reals[3]}
# the compilers of each backend (numpy's jit is the program itself)
COMPILERS = {"torch": [None, "trace", "compile"]}.get(BACKEND, [None])


class Part(enum.IntEnum):
    TOTAL = 0


def model(a, x):
    """Outputs nested in a dict with keys of mixed types (jax's own output
    handling sorts dict keys, which fails on these), a tuple, one array."""
    y = ((a @ x + 1.0) * x).tanh()
    return {"y": y, Part.TOTAL: (y.sum(), (a * 2.0).exp())}


def single(a, x):
    return (a @ x).exp()


def eager(fn, arrays):
    return data_of(fn(**{k: Tensor(v) for k, v in arrays.items()}))


def arrays(seed, dtype=np.float32):
    rng = np.random.RandomState(seed)
    return {k: from_numpy(rng.randn(*d.shape), dtype) for k, d in DOMAINS.items()}


@pytest.fixture(scope="module", params=[model, single], ids=["nested", "single"])
def function_and_program(request):
    return request.param, compile_function(request.param, **DOMAINS)


@pytest.mark.parametrize("compiler", COMPILERS, ids=str)
def test_jit_equals_eager_funsor_call_after_call(function_and_program, compiler):
    fn, program = function_and_program
    jitted = program.jit(compiler)
    for seed in range(3):  # compiles, then the entry's inline path
        given = arrays(seed)
        assert_matches(jitted(**given), eager(fn, given), rtol=1e-4, atol=1e-5)
    if compiler is not None or BACKEND != "numpy":
        assert jitted.cache_info() == {
            "signatures": 1
        }  # one input signature: compiled once


@pytest.mark.skipif(BACKEND != "torch", reason="float64 arrays beside float32")
@pytest.mark.parametrize("compiler", COMPILERS, ids=str)
def test_jit_compiles_per_input_signature(compiler):
    program = compile_function(model, **DOMAINS)
    jitted = program.jit(compiler)
    for seed, dtype in [(0, np.float32), (1, np.float64), (2, np.float32)]:
        given = arrays(seed, dtype)
        actual = jitted(**given)
        assert actual["y"].dtype == given["x"].dtype
        assert_matches(actual, eager(model, given), rtol=1e-4, atol=1e-5)
    assert jitted.cache_info() == {"signatures": 2}
    if compiler is None:
        assert len(jitted.compiler.chosen) == 2


@pytest.mark.parametrize("compiler", COMPILERS[:2], ids=str)
def test_jit_first_called_from_several_threads(compiler):
    # a fresh program: its first calls race to compile it
    program = compile_function(model, **DOMAINS)
    jitted = program.jit(compiler)
    results = {}

    def worker(seed):
        given = arrays(seed)
        for _ in range(5):
            results[seed] = (jitted(**given), eager(model, given))

    errors = call_in_threads(worker, 4)
    assert not errors, errors
    assert sorted(results) == [0, 1, 2, 3]
    for actual, expected in results.values():
        assert_matches(actual, expected, rtol=1e-4, atol=1e-5)
    if BACKEND != "numpy":
        assert jitted.cache_info() == {"signatures": 1}


@pytest.mark.parametrize(
    "change, error, message",
    [
        (lambda a: a.pop("x"), TypeError, r"missing input\(s\) 'x'"),
        (lambda a: a.update(z=a["x"]), TypeError, r"unexpected input\(s\) 'z'"),
        (
            lambda a: a.update(x=a["a"]),
            ValueError,
            r"input 'x': expected shape \(3,\), got \(3, 3\)",
        ),
        (
            lambda a: a.update(x=[0.0, 1.0, 2.0]),
            TypeError,
            r"input 'x': expected a .*, got builtins.list",
        ),
    ],
    ids=["missing", "unexpected", "shape", "type"],
)
@pytest.mark.parametrize("compiler", COMPILERS, ids=str)
def test_jit_names_bad_input_before_and_after_compiling(
    compiler, change, error, message
):
    program = compile_function(model, **DOMAINS)
    jitted = program.jit(compiler)
    for _ in range(2):  # the checked path first; then the generated entry's
        given = arrays(0)
        change(given)
        with pytest.raises(error, match=message):
            jitted(**given)
        jitted(**arrays(1))
    with pytest.raises(TypeError, match="keyword arguments only"):
        jitted(*arrays(0).values())


@pytest.mark.skipif(BACKEND != "jax", reason="jax.jit traces once per signature")
def test_jax_jit_checks_inputs_as_it_traces_a_signature_only():
    program = compile_function(single, **DOMAINS)
    checked = []
    check = program.validate_leaves
    program.validate_leaves = lambda leaves: checked.append(1) or check(leaves)
    jitted = program.jit()
    for seed in range(3):
        given = arrays(seed)
        assert_matches(jitted(**given), eager(single, given), rtol=1e-4, atol=1e-5)
    assert checked == [1]  # later calls go straight to jax's compiled code
    given = arrays(0)
    given["x"] = given["a"]  # a new signature: traced, so checked
    with pytest.raises(ValueError, match=r"input 'x': expected shape \(3,\)"):
        jitted(**given)
    assert len(checked) == 2


@pytest.mark.skipif(BACKEND != "torch", reason="torch's choice of compilers")
# a budget spent by the first round stops there; else every round runs
@pytest.mark.parametrize("budget, rounds", [(0.0, 1), (float("inf"), 3)])
def test_fastest_compiler_times_candidates_within_its_budget(
    monkeypatch, budget, rounds
):
    from funsor_lowering.backends.torch_backend import FastestCompiler, body_function

    calls = {"first": 0, "second": 0}

    def counting(name):
        def make(program, leaves):
            body = body_function(program, leaves)

            def function(*arrays):
                calls[name] += 1
                return body(*arrays)

            return function

        return make

    candidates = {name: counting(name) for name in calls}
    monkeypatch.setattr(FastestCompiler, "CANDIDATES", candidates)
    monkeypatch.setattr(FastestCompiler, "ROUNDS", 3)
    monkeypatch.setattr(FastestCompiler, "TIMING_BUDGET", budget)
    jitted = compile_function(model, **DOMAINS).jit()
    given = arrays(0)
    assert_matches(jitted(**given), eager(model, given), rtol=1e-4, atol=1e-5)
    (chosen,) = jitted.compiler.chosen.values()
    timed = FastestCompiler.WARM_UP_CALLS + rounds * FastestCompiler.CALLS_PER_ROUND
    # the chosen one also ran the call itself
    assert calls == {name: timed + (name == chosen) for name in calls}
