"""Unsupported terms raise NotImplementedError naming the term and the rule
file where support would go; the compiler never returns a wrong program."""

import pytest
from funsor import ops
from funsor.domains import Bint, Real, Reals
from funsor.interpretations import reflect
from funsor.terms import Variable

from funsor_lowering import compile_funsor, lower


def test_reduce_over_batch_variable_eager_built():
    expr = Variable("f", Reals[3])["i"].reduce(ops.add, "i")
    with pytest.raises(NotImplementedError) as info:
        compile_funsor(expr)
    message = str(info.value)
    assert "cannot lower Contraction term" in message
    assert "reduces (i)" in message
    assert "funsor_lowering/rules/contraction.py" in message


def test_reduce_over_batch_variable_reflect_built():
    with reflect:
        expr = Variable("f", Reals[3])["i"].reduce(ops.add, "i")
    with pytest.raises(NotImplementedError) as info:
        lower(expr)
    message = str(info.value)
    assert "cannot lower Reduce term" in message
    assert "funsor_lowering/rules/reductions.py" in message


def test_batch_inputs_in_binary_name_the_term():
    expr = Variable("f", Reals[3])["i"] + Variable("x", Real)
    with pytest.raises(NotImplementedError, match="named batch inputs \\('i',\\)"):
        compile_funsor(expr)


def test_real_integral_is_unsupported():
    x = Variable("x", Real)
    with reflect:
        expr = (x * x).reduce(ops.add, "x")
    with pytest.raises(
        NotImplementedError, match="reduces \\(x\\).*rules/contraction.py"
    ):
        compile_funsor(expr + Variable("y", Real))


def test_not_a_funsor():
    with pytest.raises(TypeError, match="expects a funsor, got int"):
        compile_funsor(3)


def test_bint_variable_as_value_needs_batch_support():
    i = Variable("i", Bint[3])
    with pytest.raises(NotImplementedError, match="named batch inputs"):
        compile_funsor(i + Variable("x", Real))
