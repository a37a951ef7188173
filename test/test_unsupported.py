"""Unsupported terms raise NotImplementedError naming the term and the rule
file where support would go; the compiler never returns a wrong program."""

from collections import OrderedDict

import pytest
from funsor import ops
from funsor.domains import Bint, Real, Reals
from funsor.gaussian import Gaussian
from funsor.interpretations import reflect
from funsor.terms import Variable

from funsor_lowering import compile_funsor, lower

from .helpers import backend_randn


def test_integral_over_real_variable_eager_built():
    x = Variable("x", Real)
    with reflect:
        integral = (x * x).reduce(ops.add, "x")
    with pytest.raises(NotImplementedError) as info:
        compile_funsor(integral + Variable("y", Real))
    message = str(info.value)
    assert "cannot lower Contraction term" in message
    assert "integrates over real variables ['x']" in message
    assert "funsor_lowering/lowering/rules/contraction.py" in message


def test_integral_over_real_variable_reflect_built():
    x = Variable("x", Real)
    with reflect:
        expr = (x * Variable("y", Real)).reduce(ops.add, "x")
    with pytest.raises(NotImplementedError) as info:
        lower(expr)
    message = str(info.value)
    assert "cannot lower Reduce term" in message
    assert "funsor_lowering/lowering/rules/reductions.py" in message


def test_unsupported_term_type_names_its_rule_file():
    inputs = OrderedDict(i=Bint[2], x=Real)
    g = Gaussian(
        white_vec=backend_randn(2, 1), prec_sqrt=backend_randn(2, 1, 1), inputs=inputs
    )
    with pytest.raises(NotImplementedError) as info:
        compile_funsor(g)
    assert "cannot lower Gaussian term" in str(info.value)
    assert "funsor_lowering/lowering/rules/gaussian.py" in str(info.value)


def test_sample_reduction_is_not_an_axis_reduction():
    with reflect:
        expr = Variable("f", Reals[3])["i"].reduce(ops.sample, "i")
    with pytest.raises(NotImplementedError, match="no axis reduction for ops.sample"):
        compile_funsor(expr)


def test_not_a_funsor():
    with pytest.raises(TypeError, match="expects a funsor, got int"):
        compile_funsor(3)
