"""``program.vmap(in_axes)`` (issue 17.2): the same program over a new
leading batch axis, for any batch size, with as many operations whatever
the size. References: the unbatched program on each member (itself checked
against funsor elsewhere)."""

import pickle

import funsor
import numpy as np
import pytest
from funsor import ops
from funsor.domains import Reals
from funsor.terms import Variable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.cases import CASES, FFBS, TracedCase, random_inputs
from funsor_lowering import compile_funsor, trace_function

from .helpers import assert_matches, from_numpy, to_numpy
from .strategies import expressions

BACKEND = funsor.get_backend()
CASE_NAMES = ["affine", "hmm_T10", "hmm_emit_T100", "plated_N20", "tree", "kalman_T10"]


def case_program(name):
    case = next(c for c in CASES if c.name == name)
    arrays = random_inputs(case)
    if isinstance(case, TracedCase):
        return case.program(arrays), arrays
    return compile_funsor(case.symbolic()), arrays


def batch_of(arrays, names, size):
    return {
        k: from_numpy(np.stack([to_numpy(v) * (1 + 0.1 * i) for i in range(size)]))
        if k in names
        else v
        for k, v in arrays.items()
    }


def member(arrays, names, i):
    return {k: (v[i] if k in names else v) for k, v in arrays.items()}


def check_vmap(program, arrays, names, sizes=(1, 3), **tolerances):
    batched = program.vmap({k: (0 if k in names else None) for k in program.inputs})
    counts = set()
    for size in sizes:
        data = batch_of(arrays, names, size)
        actual = batched(**data)
        expected = np.stack(
            [to_numpy(program(**member(data, names, i))) for i in range(size)]
        )
        assert_matches(actual, expected, **tolerances)
        counts.add(len(batched.for_size(size).operations))
    assert counts == {len(batched.operations)}  # independent of the size
    return batched


@pytest.mark.parametrize("name", CASE_NAMES)
def test_vmap_over_one_input_and_over_all(name):
    program, arrays = case_program(name)
    names = list(program.inputs)
    check_vmap(program, arrays, names[:1], rtol=1e-4, atol=1e-4)
    check_vmap(program, arrays, names, rtol=1e-4, atol=1e-4)


@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_vmap_of_generated_expressions(data):
    expr = data.draw(expressions((), depth=3))
    program = compile_funsor(expr)
    if not program.inputs:
        return
    names = data.draw(
        st.lists(st.sampled_from(program.inputs), min_size=1, unique=True)
    )
    rng = np.random.RandomState(0)
    # float32, as the expressions' constants (torch's logaddexp, in funsor
    # as here, rejects a float64 operand beside a float32 one)
    arrays = {
        k: from_numpy(np.asarray(rng.randn(*t.shape), dtype=np.float32))
        for k, t in program.input_types.items()
    }
    check_vmap(program, arrays, names, sizes=(2, 4), rtol=1e-4, atol=1e-5)


def test_one_batched_program_serves_every_size_and_pickles():
    program, arrays = case_program("hmm_T10")
    batched = program.vmap({"init": 0, "trans": None})
    for size in (1, 2, 7):
        data = batch_of(arrays, ["init"], size)
        assert tuple(batched(**data).shape) == (size,)
    again = pickle.loads(pickle.dumps(batched))
    data = batch_of(arrays, ["init"], 5)
    assert_matches(again(**data), batched(**data))


def test_jit_of_a_vmapped_program():
    program, arrays = case_program("tree")
    batched = program.vmap({k: 0 for k in program.inputs})
    jitted = batched.jit()
    for size in (2, 3):
        data = batch_of(arrays, list(program.inputs), size)
        assert_matches(jitted(**data), batched(**data), rtol=1e-5, atol=1e-5)


def test_bad_in_axes_and_mismatched_batch_sizes_raise_clear_errors():
    x, y = Variable("x", Reals[3]), Variable("y", Reals[3])
    program = compile_funsor((x * y).sum())
    with pytest.raises(ValueError, match=r"unknown inputs \['z'\]"):
        program.vmap({"z": 0})
    with pytest.raises(ValueError, match="at least one 0"):
        program.vmap({"x": None})
    with pytest.raises(ValueError, match="0 .a new\\s+leading batch axis"):
        program.vmap({"x": 1})
    batched = program.vmap({"x": 0, "y": 0})
    rng = np.random.RandomState(0)
    with pytest.raises(ValueError, match=r"different leading sizes \[2, 4\]"):
        batched(x=from_numpy(rng.randn(2, 3)), y=from_numpy(rng.randn(4, 3)))
    with pytest.raises(ValueError, match="input 'x': expected shape"):
        batched(x=from_numpy(rng.randn(2, 4)), y=from_numpy(rng.randn(2, 3)))


def test_random_draws_are_not_batched():
    case = FFBS()
    program = case.program(random_inputs(case))
    with pytest.raises(NotImplementedError, match="random draws are not batched"):
        program.vmap({name: 0 for name in program.inputs if name != "rng_key"})


def test_a_shared_output_is_broadcast_over_the_batch():
    def fn(x, y):
        return ops.exp(x), ops.sum(y * 2, -1)

    rng = np.random.RandomState(0)
    arrays = {"x": from_numpy(rng.randn(3)), "y": from_numpy(rng.randn(3))}
    program = trace_function(fn, arrays)
    batched = program.vmap({"x": 0, "y": None})
    data = batch_of(arrays, ["x"], 4)
    first, second = batched(**data)
    assert tuple(first.shape) == (4, 3) and tuple(second.shape) == (4,)
    assert_matches(second, np.full(4, to_numpy(program(**arrays)[1])))


def test_vmap_of_a_program_making_an_arange():
    # new_arange reads its prototype's dtype only: it was batched like its
    # operand, and every call raised an internal shape error
    def fn(x):
        return x * ops.new_arange(x, 3)

    rng = np.random.RandomState(0)
    program = trace_function(fn, {"x": from_numpy(rng.randn(3))})
    batch = from_numpy(rng.randn(4, 3))
    expected = np.stack([to_numpy(fn(batch[i])) for i in range(4)])
    np.testing.assert_allclose(to_numpy(program.vmap({"x": 0})(x=batch)), expected)


def test_vmap_moved_to_a_device_serves_every_batch_size():
    # .to() of a mapped program returned a plain program fixed to the batch
    # size of its template
    def fn(x, y):
        return ops.exp(x) * y

    rng = np.random.RandomState(0)
    arrays = {"x": from_numpy(rng.randn(3)), "y": from_numpy(rng.randn(3))}
    moved = trace_function(fn, arrays).vmap({"x": 0, "y": None}).to("cpu")
    for size in (1, 2, 5):
        x = from_numpy(rng.randn(size, 3))
        expected = np.stack([to_numpy(fn(x[i], arrays["y"])) for i in range(size)])
        actual = moved(x=x, y=arrays["y"])
        np.testing.assert_allclose(to_numpy(actual), expected, rtol=1e-6)


def vmap_matches_a_loop(program, arrays, axes, size=3):
    """``program.vmap(axes)`` on ``size`` members equals the program on each."""
    batched = program.vmap(axes)
    rng = np.random.default_rng(0)
    data, members = {}, [{} for _ in range(size)]
    for name, value in arrays.items():
        value = to_numpy(value)
        if axes[name] is None:
            data[name] = value
            for m in members:
                m[name] = from_numpy(value)
            continue
        if value.dtype.kind == "i":  # other valid indices, negative ones too
            stack = rng.integers(
                -value.max() - 1, value.max() + 1, (size,) + value.shape
            )
        else:
            stack = rng.normal(size=(size,) + value.shape)
        data[name] = stack
        for m, v in zip(members, stack):
            m[name] = from_numpy(v)
    actual = batched(**{k: from_numpy(v) for k, v in data.items()})
    assert_matches(actual, np.stack([to_numpy(program(**m)) for m in members]))


AXES = [(0, None), (None, 0), (0, 0)]


@pytest.mark.parametrize("axes", AXES)
def test_vmap_of_a_gather_by_an_integer_input(axes):
    arrays = {
        "x": from_numpy(np.random.randn(5, 3)),
        "idx": from_numpy(np.array([[0, 3], [4, 1]])),
    }
    program = trace_function(lambda x, idx: x[idx] * 2.0, arrays)
    assert "take" in str(program)
    vmap_matches_a_loop(program, arrays, dict(zip(arrays, axes)))


@pytest.mark.parametrize("axes", AXES)
@pytest.mark.parametrize(
    "equation, shapes",
    [("...ij,jk->...k", [(2, 3, 4), (4, 5)]), ("i...,i...->...", [(3, 2), (3, 2)])],
)
def test_vmap_of_an_einsum_with_an_ellipsis(equation, shapes, axes):
    arrays = {
        "a": from_numpy(np.random.randn(*shapes[0])),
        "b": from_numpy(np.random.randn(*shapes[1])),
    }
    program = trace_function(lambda a, b: ops.einsum((a, b), equation), arrays)
    assert "..." in str(program)  # kept as an einsum, not rewritten
    vmap_matches_a_loop(program, arrays, dict(zip(arrays, axes)))
