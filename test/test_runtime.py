"""How programs run as a long-running service runs them: calls from many
threads, the bounded signature cache, inputs and keys of any name, outputs
that never alias the program's constants, pickles that leave funsor's
backend alone, exact nested inputs."""

import enum
import inspect
import linecache
import pickle
from collections import OrderedDict

import funsor
import numpy as np
import pytest
from funsor import ops
from funsor.domains import Bint, Reals
from funsor.tensor import Tensor
from funsor.terms import Variable

from funsor_lowering import OpProgram, compile_function, compile_funsor
from funsor_lowering.ir.program import Operation
from funsor_lowering.runtime import codegen
from funsor_lowering.runtime import entry as runtime

from .helpers import (
    assert_matches,
    call_in_threads,
    from_numpy,
    run_in_fresh_process,
    to_numpy,
)

BACKEND = funsor.get_backend()


def arrays_of(dtype, *shape, seed=0):
    return from_numpy(np.random.RandomState(seed).randn(*shape), dtype)


# ------------------------------------------------------------------ threads
def test_first_calls_from_eight_threads_return_their_own_results():
    a, x = Variable("a", Reals[4, 4]), Variable("x", Reals[4])
    expr = ((a @ x).exp() + x).sum() * x
    wrong, errors = [], []
    for round_ in range(30):
        program = compile_funsor(expr)  # fresh: every thread's call is a first
        inputs = [
            {
                "a": arrays_of("float64", 4, 4, seed=k),
                "x": arrays_of("float64", 4, seed=k),
            }
            for k in range(8)
        ]
        results = [None] * 8

        def call(k, program=program, inputs=inputs, results=results):
            results[k] = program(**inputs[k])

        errors += call_in_threads(call, 8)
        for k in range(8):
            arrays = {n: Tensor(v) for n, v in inputs[k].items()}
            expected = to_numpy(expr(**arrays).data)
            if not np.allclose(to_numpy(results[k]), expected):
                wrong.append((round_, k))
    assert not errors, errors[:3]
    assert not wrong, f"{len(wrong)} of 240 calls returned another thread's result"


# ------------------------------------------------------------- entry
def test_a_called_program_runs_its_own_entry_and_stays_an_op_program():
    x = Variable("x", Reals[3])
    programs = [compile_funsor(x.exp()), compile_funsor(x * 2), compile_funsor(x + 1)]
    arrays = {"x": arrays_of("float32", 3)}
    for program in programs:
        program(**arrays)
    # each program's generated entry is its own __call__: no forwarding call
    entries = [type(p).__call__ for p in programs]
    assert OpProgram.__call__ not in entries and len(set(entries)) == 3
    assert all(type(p).__name__ == "OpProgram" for p in programs)
    value = to_numpy(arrays["x"])
    for program, expected in zip(programs, [np.exp(value), value * 2, value + 1]):
        assert_matches(program(**arrays), expected, rtol=1e-6, atol=1e-6)
        clone = pickle.loads(pickle.dumps(program))
        assert type(clone) is OpProgram  # pickled as its class
        assert_matches(clone(**arrays), expected, rtol=1e-6, atol=1e-6)
    with pytest.raises(TypeError, match="'x'"):
        programs[0](y=arrays["x"])  # other calls still get the checked path


@pytest.mark.parametrize("count", [codegen.KEYWORD_PARAMETERS_MAX, 40])
def test_many_inputs_from_a_built_dict_run_fast_and_are_checked(count):
    """Over ``KEYWORD_PARAMETERS_MAX`` inputs, the entry reads them from the
    call's kwargs (names built at run time, as ``**arrays`` gives them):
    same results, and wrong calls still get the checked path's errors."""
    names = ["".join(["x", str(i)]) for i in range(count)]
    total = Variable(names[0], Reals[2])
    for name in names[1:]:
        total = total + Variable(name, Reals[2]).exp()
    program = compile_funsor(total)
    arrays = {n: arrays_of("float64", 2, seed=i) for i, n in enumerate(names)}
    expected = to_numpy(arrays[names[0]]) + sum(
        np.exp(to_numpy(arrays[n])) for n in names[1:]
    )
    for _ in range(3):  # the first call compiles, later ones take the entry
        assert_matches(program(**arrays), expected)
    parameters = inspect.signature(type(program).__call__).parameters
    keywords = count <= codegen.KEYWORD_PARAMETERS_MAX
    assert (names[-1] in parameters) == keywords, list(parameters)
    with pytest.raises(TypeError, match=f"missing input.*'{names[-1]}'"):
        program(**{k: v for k, v in arrays.items() if k != names[-1]})
    with pytest.raises(TypeError, match="unexpected input.*'y'"):
        program(**arrays, y=arrays[names[0]])
    with pytest.raises(ValueError, match=f"'{names[3]}': expected shape"):
        program(**dict(arrays, **{names[3]: arrays_of("float64", 3)}))


@pytest.mark.skipif(BACKEND != "jax", reason="jax's bfloat16 (ml_dtypes)")
def test_jax_bfloat16_inputs_give_eager_funsors_results_and_dtype():
    import jax.numpy as jnp

    x, i = Variable("x", Reals[3]), Variable("i", Bint[3])
    value = jnp.array([0.5, 1.0, -2.0], dtype=jnp.bfloat16)
    for expr in [(x.exp() + 1.0).sum(), x[i].reduce(ops.logaddexp, "i") * 2.0]:
        program = compile_funsor(expr)
        expected = expr(x=Tensor(value)).data
        for actual in (program(x=value), program.jit()(x=value)):
            assert actual.dtype == expected.dtype == jnp.bfloat16
            assert_matches(actual, expected, rtol=1e-2, atol=1e-2)


# -------------------------------------------------------- signature cache
def _two_dtypes():
    if BACKEND == "jax":
        import jax.numpy as jnp

        return jnp.zeros(3, jnp.float32), jnp.zeros(3, jnp.float16)
    return arrays_of("float64", 3), arrays_of("float32", 3)


def test_seen_signatures_never_generate_code_nor_grow_linecache(monkeypatch):
    program = compile_funsor((Variable("x", Reals[3]).exp() + 1).sum())
    first, second = _two_dtypes()
    program(x=first), program(x=second)  # both signatures seen
    generated = []
    define = codegen._define

    def counting(*args, **kwargs):
        generated.append(args)
        return define(*args, **kwargs)

    monkeypatch.setattr("funsor_lowering.runtime.codegen._define", counting)
    cached = set(linecache.cache)
    for _ in range(100):
        program(x=first)
        program(x=second)
    assert generated == []
    # no new entries (entries of programs collected meanwhile may go)
    assert set(linecache.cache) <= cached
    # numpy and torch bodies hold numbers typed like their operands: one per dtype
    bodies = 1 if BACKEND == "jax" else 2
    assert program.cache_info() == {"signatures": 2, "bodies": bodies}
    compile_funsor(Variable("x", Reals[3]).exp())(x=first)  # a new program does
    assert generated != []


def test_signature_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(runtime, "MAX_SIGNATURES", 1)
    program = compile_funsor(Variable("x", Reals[3]) * 2)
    first, second = _two_dtypes()
    for value in (first, second, first):
        assert_matches(program(x=value), to_numpy(value) * 2)
        assert program.cache_info()["signatures"] == 1


def test_generated_code_is_forgotten_with_its_program():
    import gc

    cached = len(linecache.cache)
    for _ in range(20):
        program = compile_funsor(Variable("x", Reals[3]).exp())
        program(x=arrays_of("float64", 3))
        del program
    gc.collect()
    assert len(linecache.cache) <= cached + 2


def test_programs_collected_while_linecache_checks_its_cache(monkeypatch):
    # linecache.checkcache lists its cache, then reads each entry, calling
    # os.stat for files; garbage collection may run in between (any
    # allocation) and collect programs, whose sources must then stay
    import gc
    import os

    linecache.getline(__file__, 1)  # a file entry, listed before the programs
    before = set(linecache.cache)
    programs = [compile_funsor(Variable("x", Reals[3]).exp()) for _ in range(3)]
    for program in programs:
        program(x=arrays_of("float64", 3))
    names = set(linecache.cache) - before  # these programs' sources
    assert names
    del programs, program
    stat = os.stat

    def collecting_stat(*args, **kwargs):
        gc.collect()
        return stat(*args, **kwargs)

    monkeypatch.setattr(linecache.os, "stat", collecting_stat)
    linecache.checkcache()  # no KeyError
    monkeypatch.undo()
    compile_funsor(Variable("x", Reals[3]).log())(x=arrays_of("float64", 3))
    assert not any(n in linecache.cache for n in names)  # dropped since


@pytest.mark.parametrize(
    "name",
    [
        "kwargs",
        "args",
        "_slow",
        "slow",
        "table",
        "body",
        "signature",
        "program",
        "v0",
        "n0",
        "_guard_shape0",
        "_key",
        "np",
        "ops",
        "inputs",
    ],
)
def test_input_names_never_collide_with_generated_names(name):
    x = Variable(name, Reals[3])
    program = compile_funsor(x * x + 1)
    value = arrays_of("float64", 3)
    for _ in range(3):  # the checked call, then the generated entry
        assert_matches(program(**{name: value}), to_numpy(value) ** 2 + 1)


# ------------------------------------------------------------------ aliasing
def _constant_outputs_program():
    c = from_numpy(np.arange(6.0).reshape(2, 3))
    ops_ = [Operation(ops.ReshapeOp(shape=(3, 2)), (0,)), Operation(ops.exp, (1,))]
    return OpProgram([c], {"x": Reals[3]}, ops_, (0, 2, 3)), c


def _write_into(array):
    if BACKEND == "torch":
        array.add_(100.0)
    else:
        array[...] = 100.0


@pytest.mark.skipif(BACKEND == "jax", reason="jax arrays cannot be written into")
def test_outputs_never_alias_constants():
    program, c = _constant_outputs_program()
    original = to_numpy(c).copy()
    x = arrays_of("float64", 3)
    for call in range(3):
        constant, view, _ = program(x=x)
        _write_into(constant)
        _write_into(view)
        assert np.array_equal(to_numpy(program.constants[0]), original), call
    namespace = {}
    exec(program.as_code(), namespace)
    constant, view, _ = namespace["program"](x=x)
    assert np.array_equal(to_numpy(constant), original)
    _write_into(constant)
    assert np.array_equal(to_numpy(namespace["program"](x=x)[0]), original)
    assert np.array_equal(
        to_numpy(pickle.loads(pickle.dumps(program)).constants[0]), original
    )


def test_compiled_constant_outputs_are_fresh_arrays():
    @compile_function(x=Reals[2])
    def program(x):
        return {"one": Tensor(from_numpy(np.ones(2))), "x": x}

    a, b = (
        program(x=arrays_of("float64", 2))["one"],
        program(x=arrays_of("float64", 2))["one"],
    )
    assert a is not b
    assert np.array_equal(to_numpy(a), np.ones(2))


# ------------------------------------------------------------------ names
class Color(enum.IntEnum):
    RED = 1
    BLUE = 2


NAMES = [
    'a"b',
    "a'b",
    "new\nline",
    "class",
    "x²",
    "ｍｕｌ",
    "mul",
    "ｗ",
    "w",
    "é",
    "a b",
]


def identifiers(code):
    """Every identifier Python source defines or uses."""
    import ast

    names = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.arg, ast.alias)):
            names.add(getattr(node, "name", None) or getattr(node, "arg", None))
    return names - {None}


def _check_everywhere(program, arrays, expected):
    assert_matches(program(**arrays), expected)
    assert_matches(program(**arrays), expected)  # the generated entry
    code = program.as_code()
    assert all(name.isascii() for name in identifiers(code)), code
    namespace = {}
    exec(code, namespace)
    assert_matches(namespace["program"](**arrays), expected)
    local = {}
    exec(code, None, local)  # as funsor's own tests exec code
    assert_matches(local["program"](**arrays), expected)
    assert_matches(pickle.loads(pickle.dumps(program))(**arrays), expected)
    assert_matches(program.jit()(**arrays), expected, rtol=1e-5)
    str(program), program.to_dot()
    if BACKEND == "torch":
        module = program.to_fx()
        leaves = program.validate(arrays)
        assert_matches(module(*leaves), expected)


def test_any_string_works_as_an_input_name():
    variables = [Variable(n, Reals[2]) for n in NAMES]
    expr = variables[0]
    for k, v in enumerate(variables[1:]):
        expr = expr * v if k % 2 else expr + v
    arrays = {n: arrays_of("float64", 2, seed=k) for k, n in enumerate(NAMES)}
    expected = expr(**{n: Tensor(v) for n, v in arrays.items()}).data
    program = compile_funsor(expr)
    assert all(name.isascii() for name in program.value_names)
    _check_everywhere(program, arrays, expected)


def test_nfkc_equivalent_names_stay_distinct():
    x, mul = Variable("x", Reals[2]), Variable("ｍｕｌ", Reals[2])
    program = compile_funsor(x * x + mul)
    arrays = {"x": arrays_of("float64", 2), "ｍｕｌ": arrays_of("float64", 2, seed=1)}
    expected = to_numpy(arrays["x"]) ** 2 + to_numpy(arrays["ｍｕｌ"])
    _check_everywhere(program, arrays, expected)


def test_numpy_str_and_int_enum_keys():
    name = np.str_("x")

    @compile_function(**{name: Reals[2]})
    def program(x):
        return {Color.RED: x.exp(), np.str_("neg"): {Color.BLUE: -x}}

    value = arrays_of("float64", 2)
    out = program(x=value)
    assert_matches(out[Color.RED], np.exp(to_numpy(value)))
    assert_matches(out["neg"][2], -to_numpy(value))
    expected = {1: np.exp(to_numpy(value)), "neg": {2: -to_numpy(value)}}
    _check_everywhere(program, {"x": value}, expected)


def test_as_code_rejects_names_that_are_not_identifiers():
    program = compile_funsor(Variable("x", Reals[2]) * 2)
    for bad in ["two words", "class", "1x", "np", "", "ｆ"]:
        with pytest.raises(ValueError, match="as_code"):
            program.as_code(bad)


# ------------------------------------------------------------------ nesting
def test_extra_or_missing_nested_keys_are_rejected_by_name():
    from funsor_lowering import trace_function

    loc, scale = arrays_of("float64", 2), arrays_of("float64", 2, seed=1)
    program = trace_function(
        lambda p: ops.add(ops.exp(p["loc"]), p["scale"]),
        {"p": {"loc": loc, "scale": scale}},
    )
    for _ in range(2):  # checked call, then the generated entry
        assert_matches(
            program(p={"loc": loc, "scale": scale}),
            np.exp(to_numpy(loc)) + to_numpy(scale),
        )
        with pytest.raises(
            TypeError, match=r"input 'p': unexpected key\(s\) \['extra'\]"
        ):
            program(p={"loc": loc, "scale": scale, "extra": loc})
        with pytest.raises(TypeError, match=r"missing key\(s\) \['scale'\]"):
            program(p={"loc": loc})


# ------------------------------------------------------------------ pickles
def test_unpickling_never_changes_the_backend(tmp_path):
    import subprocess
    import sys

    program = compile_funsor(Variable("x", Reals[2]).exp())
    (tmp_path / "p.pkl").write_bytes(pickle.dumps(program))
    script = (
        "import pickle, sys, funsor\n"
        "program = pickle.loads(open(sys.argv[1], 'rb').read())\n"
        "assert funsor.get_backend() == 'numpy', funsor.get_backend()\n"
        "print(type(program).__name__, program.backend)\n"
    )
    if BACKEND == "jax":  # it cannot run beside numpy: a clear error
        script += (
            "try:\n"
            "    program(x=None)\n"
            "except RuntimeError as e:\n"
            "    assert \"set_backend('jax')\" in str(e), e\n"
            "else:\n"
            "    raise SystemExit('no error')\n"
            "assert funsor.get_backend() == 'numpy'\n"
        )
    result = subprocess.run(
        [sys.executable, "-c", script, tmp_path / "p.pkl"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert f"OpProgram {BACKEND}" in result.stdout


def test_pickled_program_runs_in_a_fresh_process(tmp_path):
    program = compile_funsor(Variable("x", Reals[2]).exp())
    x = arrays_of("float64", 2)
    result = run_in_fresh_process(
        program, {"x": x}, tmp_path, "funsor_lowering.lowering.compiler"
    )
    assert_matches(result, np.exp(to_numpy(x)))


def test_bint_inputs_stay_leading_dims():
    f = Variable("f", Reals[3])
    idx = Tensor(from_numpy(np.array([0, 2])), OrderedDict(i=Bint[2]), 3)
    program = compile_funsor(f[idx])
    assert_matches(
        program(f=from_numpy(np.array([1.0, 2.0, 3.0]))), np.array([1.0, 3.0])
    )


def test_any_key_works_in_nested_inputs():
    from funsor_lowering import trace_function

    loc, scale = arrays_of("float64", 2), arrays_of("float64", 2, seed=1)
    other = arrays_of("float64", 2, seed=2)
    params = {Color.RED: loc, np.str_("scale"): {"x²": scale, 'a"b\n': other}}

    def fn(p):
        inner = p["scale"]
        return {
            Color.BLUE: ops.add(ops.exp(p[Color.RED]), inner["x²"]),
            "y": inner['a"b\n'],
        }

    program = trace_function(fn, {"p": params})
    expected = {2: np.exp(to_numpy(loc)) + to_numpy(scale), "y": to_numpy(other)}
    _check_everywhere(program, {"p": params}, expected)


def test_alternating_signatures_do_not_grow_memory():
    import tracemalloc

    program = compile_funsor((Variable("x", Reals[3]).exp() + 1).sum())
    first, second = _two_dtypes()
    for _ in range(50):  # warm up
        program(x=first), program(x=second)
    tracemalloc.start()
    start = tracemalloc.get_traced_memory()[0]
    for _ in range(500):
        program(x=first)
        program(x=second)
    grown = tracemalloc.get_traced_memory()[0] - start
    tracemalloc.stop()
    assert grown < 200_000, f"{grown} bytes kept by 1000 calls"


def test_a_recorded_shape_the_operation_does_not_compute_is_an_internal_error():
    # a pass that records one shape and emits an operation computing another
    # stops at that operation when the body is built (not at an op it feeds)
    from funsor import ops

    from funsor_lowering.ir.program import Operation, OpProgram, ValueType

    wrong = ValueType((3, 2), "real")
    program = OpProgram(
        [], {"x": Reals[2, 3]}, [Operation(ops.exp, (0,))], 1, value_types=[wrong]
    )
    with pytest.raises(RuntimeError, match=r"internal error.*exp.*\(2, 3\).*\(3, 2\)"):
        program(x=arrays_of("float64", 2, 3))
