"""CompilingInterpretation: existing funsor code, run over Variables."""

import funsor
import pytest
from funsor import ops
from funsor.domains import Bint, Real, Reals
from funsor.interpreter import interpretation
from funsor.tensor import Tensor
from funsor.terms import Variable

from funsor_lowering import CompilingInterpretation, compile_function, compiling

from .helpers import assert_matches, backend_randn, data_of, evaluate, random_arrays


def model(x, y):
    """Ordinary funsor code."""
    z = (x * y).exp() + x
    return z.sum() - ops.log(y.abs() + 1)


@pytest.mark.parametrize("enter", ["with", "interpretation"])
def test_compiles_existing_code(enter):
    x, y = Variable("x", Reals[3]), Variable("y", Reals[3])
    context = compiling if enter == "with" else interpretation(compiling)
    with context as interp:
        result = model(x, y)
    program = interp.compile(result)
    arrays = random_arrays(result.inputs)
    expected = data_of(evaluate(model(x, y), arrays))
    assert_matches(program(**arrays), expected)


def test_results_keep_inputs_and_output():
    x, y = Variable("x", Reals[3]), Variable("y", Real)
    lazy = model(x, y)
    with compiling:
        compiled = model(x, y)
    assert compiled.inputs == lazy.inputs
    assert compiled.output == lazy.output


def test_ground_subterms_are_folded():
    data = backend_randn(3)
    x = Variable("x", Reals[3])
    with compiling as interp:
        t = Tensor(data)
        constant = (t.exp() + t).sum()
        result = x * constant
    assert isinstance(constant, Tensor)  # folded eagerly, at compile time
    assert interp.recording.folded > 0 and interp.recording.normalized > 0
    program = interp.compile(result)
    assert [o.op for o in program.operations] == [ops.mul]
    arrays = {"x": backend_randn(3)}
    assert_matches(program(**arrays), data_of(evaluate(x * constant, arrays)))


def test_each_block_starts_a_fresh_recording():
    interp = CompilingInterpretation()
    x = Variable("x", Real)
    with interp:
        x + 1
    first = interp.recording
    with interp:
        pass
    assert interp.recording is not first
    assert interp.recording.normalized == 0


def test_compile_nested_structure():
    x, y = Variable("x", Reals[2]), Variable("y", Real)
    with compiling as interp:
        result = {"a": (x * y, [y.exp()]), "b": x.sum()}
    program = interp.compile(result)
    arrays = random_arrays({"x": Reals[2], "y": Real})
    expected = {
        "a": (data_of(evaluate(x * y, arrays)), [data_of(evaluate(y.exp(), arrays))]),
        "b": data_of(evaluate(x.sum(), arrays)),
    }
    assert_matches(program(**arrays), expected)


def test_compile_function_decorator_and_call():
    @compile_function(x=Reals[3], y=Reals[3])
    def program(x, y):
        return model(x, y), x * 2

    also = compile_function(lambda x, y: (model(x, y), x * 2), x=Reals[3], y=Reals[3])
    x, y = Variable("x", Reals[3]), Variable("y", Reals[3])
    arrays = random_arrays({"x": Reals[3], "y": Reals[3]})
    expected = (
        data_of(evaluate(model(x, y), arrays)),
        data_of(evaluate(x * 2, arrays)),
    )
    assert program.inputs == ("x", "y")
    assert_matches(program(**arrays), expected)
    assert_matches(also(**arrays), expected)


def test_compile_function_keeps_unused_inputs():
    program = compile_function(lambda x, y: x + 1, x=Real, y=Reals[2])
    assert program.inputs == ("x", "y")


def test_compile_function_rejects_undeclared_free_variable():
    z = Variable("z", Real)
    with pytest.raises(ValueError, match="'z'"):
        compile_function(lambda x: x + z, x=Real)


def test_compile_function_rejects_non_funsor_result():
    with pytest.raises(TypeError, match=r"result\[1\] is a str"):
        compile_function(lambda x: (x, "nope"), x=Real)


def test_interpretation_is_popped_after_block():
    before = funsor.interpreter.get_interpretation()
    with compiling:
        pass
    assert funsor.interpreter.get_interpretation() is before


def test_bint_domain_keyword_is_not_an_input():
    # A Bint keyword is a batch variable: it becomes an output axis, not an input.
    program = compile_function(lambda x, i: x + 1, x=Real, i=Bint[3])
    assert program.inputs == ("x",)


def test_a_tensor_of_a_variable_is_refused_with_a_hint():
    from collections import OrderedDict

    with compiling:
        x = Variable("x", Reals[2, 3])
        with pytest.raises(TypeError, match=r"Tensor\(Variable\('x'.*x\['i'\]"):
            Tensor(x, OrderedDict(i=Bint[2]))
        # the hint's spelling: the same batch input, by indexing
        assert x["i"].inputs["i"] == Bint[2] and x["i"].output == Reals[3]


def test_sample_names_of_a_sum_longer_than_the_recursion_limit():
    # funsor under FUNSOR_USE_TCO=1 (as its CI runs) builds long lazy sums
    import sys

    from funsor.delta import Delta
    from funsor.interpretations import lazy

    from funsor_lowering.lowering.interpretations.eager_steps import (
        sampled_names,
    )

    with lazy:
        total = Delta("a", Variable("p", Real))
        for i in range(sys.getrecursionlimit() + 100):
            total = total + Variable(f"x{i}", Real)
    assert sampled_names(total) == frozenset({"a"})


@pytest.mark.parametrize("function", ["sum_product", "partial_sum_product"])
def test_equal_factors_count_twice(function):
    """Two factors computed alike are two arrays eagerly but one cons-hashed
    term in a block; funsor's grouping of factors (``_partition``) raised
    KeyError on it. Both must count, as eagerly."""
    from collections import OrderedDict

    import funsor.sum_product

    inputs = OrderedDict(i=Bint[3], j=Bint[4], x=Bint[2])
    sum_product = getattr(funsor.sum_product, function)

    def model(t):
        # x.reduce twice: eagerly two arrays, in a block one term
        factors = [t.reduce(ops.add, "j"), t.reduce(ops.add, "j")]
        eliminate, plates = frozenset({"i", "x"}), frozenset({"i"})
        return sum_product(ops.logaddexp, ops.add, factors, eliminate, plates)

    data = backend_randn(3, 4, 2)
    expected = model(Tensor(data, inputs))
    with compiling as interp:
        v = Variable("v", Reals[3, 4, 2])
        result = model(v[tuple(Variable(k, d) for k, d in inputs.items())])
    got = interp.compile(result)(v=data)
    if function == "partial_sum_product":
        (expected,), (got,) = expected, got
    assert_matches(got, data_of(expected))
