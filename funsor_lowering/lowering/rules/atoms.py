"""Leaves: Variables, Numbers and Tensors."""

import funsor.tensor
from funsor import ops
from funsor.domains import Domain
from funsor.tensor import Tensor
from funsor.terms import Number, Slice, Variable

from ...errors import UnsupportedTermError
from ..driver import Lowered, build, lowering_rule


@lowering_rule(Variable, str, Domain)
def lower_variable(term, name, domain):
    """A real Variable is a program input; a ``Bint`` Variable used as a
    value is ``arange(size)`` along its own batch axis."""
    if domain.dtype == "real":
        return Lowered(term)
    if domain.shape:
        raise UnsupportedTermError(term, "Variables of Bint arrays with event shape")
    prototype = funsor.tensor.get_default_prototype()
    data = ops.new_arange(prototype, domain.dtype)
    return Lowered(build(Tensor, data, (), domain.dtype), {name: domain})


@lowering_rule(Number, object, object)
def lower_number(term, data, dtype):
    return Lowered(term)


@lowering_rule(Tensor, object, object, object)
def lower_tensor(term, data, inputs, dtype):
    """A constant: its batch inputs are already its leading axes."""
    if not inputs:
        return Lowered(term)
    return Lowered(build(Tensor, data, (), dtype), inputs)


@lowering_rule(Slice, str, int, int, int, int)
def lower_slice(term, name, start, stop, step, dtype):
    """``Slice`` as a value: the integers ``start:stop:step`` along its axis."""
    prototype = funsor.tensor.get_default_prototype()
    data = ops.new_arange(prototype, start, stop, step)
    return Lowered(build(Tensor, data, (), dtype), term.inputs)
