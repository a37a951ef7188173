"""OpProgram: the IR, validation errors, listing, as_code and pickling."""

import pickle

import funsor
import numpy as np
import pytest
from funsor import ops
from funsor.domains import Real, Reals
from funsor.terms import Variable

from funsor_lowering import OpProgram, compile_funsor
from funsor_lowering.ir.program import Operation

from .helpers import assert_matches, backend_randn, run_three_ways

BACKEND = funsor.get_backend()


@pytest.fixture(params=["fresh", "warm"])
def program(request):
    """A program; "warm" has run once, so calls meet its guarded fast entry."""
    x, y = Variable("x", Reals[3]), Variable("y", Real)
    program = compile_funsor(x * y + 1)
    if request.param == "warm":
        program(x=backend_randn(3), y=backend_randn())
    return program


def test_guarded_entry_follows_the_latest_input_types():
    x = Variable("x", Reals[2])
    program = compile_funsor(x * 2)
    for dtype in ("float32", "float64", "float32"):
        data = np.array([1.0, 2.0], dtype)
        if BACKEND == "torch":
            import torch

            data = torch.as_tensor(data)
        result = program(x=data)
        assert str(result.dtype).endswith(dtype) or BACKEND == "jax"
        assert_matches(result, data * 2)


def test_bad_input_names(program):
    with pytest.raises(TypeError, match=r"missing input\(s\) 'y'"):
        program(x=backend_randn(3))
    with pytest.raises(TypeError, match=r"unexpected input\(s\) 'z'.*'x': real\[3\]"):
        program(x=backend_randn(3), y=backend_randn(), z=backend_randn())
    with pytest.raises(TypeError, match="keyword arguments only"):
        program(backend_randn(3), backend_randn())


def test_bad_input_shape(program):
    with pytest.raises(
        ValueError, match=r"input 'x': expected shape \(3,\), got \(2,\)"
    ):
        program(x=backend_randn(2), y=backend_randn())
    with pytest.raises(ValueError, match=r"input 'y': expected shape \(\), got \(1,\)"):
        program(x=backend_randn(3), y=backend_randn(1))


def test_bad_input_dtype(program):
    integers = backend_randn(3) > 0
    with pytest.raises(TypeError, match="input 'x': expected a real array.*got dtype"):
        program(x=integers, y=backend_randn())


def test_bad_input_backend(program):
    with pytest.raises(
        TypeError, match=f"input 'x': expected a .*{BACKEND} backend.*list"
    ):
        program(x=[1.0, 2.0, 3.0], y=backend_randn())
    if BACKEND == "torch":
        with pytest.raises(TypeError, match="input 'x'.*numpy.ndarray"):
            program(x=np.zeros(3), y=backend_randn())

    class DuckArray:  # has the right shape and dtype, but is no backend array
        shape, dtype = (3,), np.dtype("float32")

    with pytest.raises(TypeError, match="input 'x'.*DuckArray"):
        program(x=DuckArray(), y=backend_randn())


def test_listing_and_repr(program):
    text = str(program)
    assert text.splitlines() == [
        f"OpProgram(x: real[3], y: real[]) on {BACKEND}:",
        "  c0: real[] = 1.0",
        "  mul: real[3] = mul(x, y)",
        "  add: real[3] = add(mul, c0)",
        "  return add",
    ]
    assert repr(program) == f"<OpProgram(x, y) on {BACKEND}: 1 constants, 2 operations>"


def test_pickle_roundtrip_keeps_everything(program):
    clone = pickle.loads(pickle.dumps(program))
    assert clone.inputs == program.inputs
    assert clone.operations == program.operations
    assert clone.backend == program.backend
    assert str(clone) == str(program)
    arrays = {"x": backend_randn(3), "y": backend_randn()}
    assert_matches(clone(**arrays), program(**arrays))


def test_as_code_is_self_contained(program):
    code = program.as_code(name="affine")
    assert "def affine(*, x, y):" in code
    namespace = {}
    exec(code, namespace)
    arrays = {"x": backend_randn(3), "y": backend_randn()}
    assert_matches(namespace["affine"](**arrays), program(**arrays))


@pytest.mark.parametrize(
    "value",
    [
        np.array([0.1, -2.5e-30, 1e30, np.pi], dtype=np.float64),
        np.array([[0.1, 1 / 3]], dtype=np.float32),
        np.array([np.nan, np.inf, -np.inf, -0.0]),
        np.zeros((0, 3)),
        np.array(1 / 7),
        np.array([1, -2, 3], dtype=np.int64),
        np.array([True, False]),
    ],
    ids=["f64", "f32", "nonfinite", "empty", "0d", "int", "bool"],
)
def test_as_code_constants_roundtrip_exactly(value):
    if BACKEND == "torch":
        import torch

        value = torch.as_tensor(value)
    elif BACKEND == "jax":
        import jax.numpy as jnp

        value = jnp.asarray(value)
    program = OpProgram([value], {}, [], 0)
    namespace = {}
    exec(program.as_code(), namespace)
    rebuilt = namespace["program"]()
    assert type(rebuilt) is type(value)
    assert rebuilt.dtype == value.dtype and tuple(rebuilt.shape) == tuple(value.shape)
    np.testing.assert_array_equal(np.asarray(rebuilt), np.asarray(value))
    assert (
        np.signbit(np.asarray(rebuilt)).tolist()
        == np.signbit(np.asarray(value)).tolist()
    )


def test_python_scalar_constants_roundtrip():
    program = OpProgram([0.1, float("nan"), 7, True], {}, [], (0, 1, 2, 3))
    namespace = {}
    exec(program.as_code(), namespace)
    result = namespace["program"]()
    assert result[0] == 0.1 and np.isnan(result[1]) and result[2:] == (7, True)


def test_non_identifier_input_names_as_code():
    program = OpProgram(
        [], {"a.b": Real, "class": Real}, [Operation(ops.add, (0, 1))], {"sum": 2}
    )
    assert "def program(**inputs):" in program.as_code()
    arrays = {"a.b": backend_randn(), "class": backend_randn()}
    expected = {"sum": ops.add(arrays["a.b"], arrays["class"])}
    for result in run_three_ways(program, arrays):
        assert_matches(result, expected)


def test_finitary_and_parametrized_ops_as_code():
    op = ops.GetsliceOp(index=slice(None, 2))
    program = OpProgram(
        [],
        {"x": Reals[3]},
        [Operation(op, (0,)), Operation(ops.CatOp(axis=0), (1, 0), packed=True)],
        [2, (1,)],
    )
    arrays = {"x": backend_randn(3)}
    x = arrays["x"]
    expected = [ops.cat([x[:2], x]), (x[:2],)]
    for result in run_three_ways(program, arrays):
        assert_matches(result, expected)
    assert "getslice(x, index=slice(None, 2, None))" in str(program)


def test_check_rejects_forward_references():
    with pytest.raises(ValueError, match="operation 0 .* reads value 1"):
        OpProgram([], {"x": Real}, [Operation(ops.neg, (1,))], 1)
    with pytest.raises(ValueError, match="output refers to undefined value 5"):
        OpProgram([], {"x": Real}, [], 5)


def test_unprintable_op_raises_clear_error():
    op = ops.UnaryOp.make(lambda x: x, name="my_private_op")
    program = OpProgram([], {"x": Real}, [Operation(op, (0,))], 1)
    with pytest.raises(
        NotImplementedError, match="my_private_op.*not defined in funsor.ops"
    ):
        program.as_code()


def test_traceback_shows_generated_line():
    program = OpProgram([], {"x": Reals[3]}, [Operation(ops.cholesky, (0,))], 1)
    with pytest.raises(Exception) as info:
        program(x=backend_randn(3))
    import traceback

    text = "".join(traceback.format_tb(info.tb))
    assert "cholesky = _cholesky(x)" in text
