"""Compiled programs call backend implementations directly: calling one runs
no funsor op dispatch (ops funsor implements through other ops, such as
numpy's ``sigmoid`` and ``logaddexp``, get the backend's own function)."""

import collections

import pytest
from hypothesis import HealthCheck, given, settings

from benchmarks.cases import CASES, TracedCase, random_inputs
from funsor_lowering import compile_funsor
from funsor_lowering import funsor_hooks as hooks

from .helpers import random_arrays
from .strategies import programs


def funsor_op_calls(fn):
    """The funsor ops (by name) that ``fn()`` calls through funsor's
    dispatch (``Op.__call__``)."""
    calls = collections.Counter()

    def counting(op, *args, **kwargs):
        calls[op.name] += 1
        return hooks.original("Op.__call__")(op, *args, **kwargs)

    with hooks.replaced({"Op.__call__": counting}):
        fn()
    return dict(calls)


def test_the_counter_sees_dispatch():
    from funsor import ops

    from .helpers import backend_randn

    x = backend_randn(3)
    assert funsor_op_calls(lambda: ops.exp(x)) == {"exp": 1}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expr=programs())
def test_random_programs_make_no_funsor_op_calls(expr):
    program = compile_funsor(expr)
    arrays = random_arrays(expr.inputs)
    program(**arrays)  # the first call of a signature builds its body
    assert funsor_op_calls(lambda: program(**arrays)) == {}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_benchmark_programs_make_no_funsor_op_calls(case):
    arrays = random_inputs(case)
    if isinstance(case, TracedCase):
        program = case.program(arrays)
    else:
        program = compile_funsor(case.symbolic())
    program(**arrays)
    assert funsor_op_calls(lambda: program(**arrays)) == {}


def test_python_number_operands_take_the_backend_function_too():
    # found by the random programs: logaddexp(0.0, a) went through funsor's
    # (number, array) version, which calls ops.max and ops.detach
    from funsor import ops
    from funsor.domains import Real
    from funsor.terms import Number, Variable

    expr = ops.logaddexp(Number(0.0), Variable("a", Real)) + ops.logaddexp(
        Variable("a", Real), 1.5
    )
    program = compile_funsor(expr)
    arrays = random_arrays(expr.inputs)
    program(**arrays)
    assert funsor_op_calls(lambda: program(**arrays)) == {}


@pytest.mark.skipif(
    __import__("funsor").get_backend() != "torch", reason="torch's functions"
)
@pytest.mark.parametrize("name", ["kalman_T10", "ffbs_5"])
def test_torch_bodies_call_torch_where_funsors_wrappers_only_pick_arguments(name):
    # funsor's torch sum / cholesky / log / diagonal / new_zeros are Python
    # functions around one torch call each: bodies call torch directly
    from funsor import ops

    from funsor_lowering.runtime.codegen import evaluate

    case = next(c for c in CASES if c.name == name)
    arrays = random_inputs(case)
    program = case.program(arrays)
    _, resolved = evaluate(program, program.validate(arrays))
    direct = (ops.SumOp, ops.CholeskyOp, ops.LogOp, ops.DiagonalOp, ops.NewZerosOp)
    seen = collections.Counter()
    for operation, (impl, _, _) in zip(program.operations, resolved):
        if isinstance(operation.op, direct):
            seen[type(operation.op).__name__] += 1
            module = getattr(impl, "__module__", None) or ""
            assert not module.startswith("funsor"), (operation, impl)
    assert set(seen) == {c.__name__ for c in direct}, seen
