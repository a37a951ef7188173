"""Hypothesis strategies: random well-typed real-valued funsor expressions."""

import numpy as np
from funsor import ops
from funsor.domains import Real, Reals
from funsor.tensor import Tensor
from funsor.terms import Number, Tuple, Variable
from hypothesis import reject
from hypothesis import strategies as st

from funsor_lowering.funsor_hooks import package_shape_rules

from .helpers import from_numpy

SHAPES = [(), (2,), (3,), (2, 3)]
# Shapes whose values broadcast to each target shape.
BROADCASTS = {(): [()], (2,): [(), (2,)], (3,): [(), (3,)], (2, 3): [(), (3,), (2, 3)]}
VARIABLES = {
    (): [Variable("a", Real), Variable("e", Real)],
    (2,): [Variable("b", Reals[2])],
    (3,): [Variable("c", Reals[3])],
    (2, 3): [Variable("d", Reals[2, 3])],
}
# Unary ops kept in a numerically safe range.
UNARY = [
    ("neg", lambda x: -x),
    ("exp∘tanh", lambda x: x.tanh().exp()),
    ("sigmoid", lambda x: x.sigmoid()),
    ("abs", lambda x: ops.abs(x)),
    ("log1p∘abs", lambda x: (ops.abs(x) + 1).log()),
    ("sqrt", lambda x: (ops.abs(x) + 0.5).sqrt()),
]
BINARY = [
    ("add", lambda x, y: x + y),
    ("sub", lambda x, y: x - y),
    ("mul", lambda x, y: x * y),
    ("div", lambda x, y: x / (ops.abs(y) + 1)),
    ("max", lambda x, y: ops.max(x, y)),
    ("min", lambda x, y: ops.min(x, y)),
    ("logaddexp", lambda x, y: ops.logaddexp(x, y)),
]


@st.composite
def constants(draw, shape, allow_number=True):
    if shape == () and allow_number and draw(st.booleans()):
        return Number(draw(st.floats(-2, 2, allow_nan=False, width=32)))
    seed = draw(st.integers(0, 2**16))
    data = np.asarray(np.random.RandomState(seed).randn(*shape), dtype=np.float32)
    return Tensor(from_numpy(data))


@st.composite
def expressions(draw, shape, depth=3, allow_number=True):
    """A real-valued expression with output shape ``shape`` (not a bare
    ``Number`` unless ``allow_number``: funsor cannot stack Numbers on torch),
    built with the package's shape rules (funsor 0.4.8's own infer wrong
    domains for axis reductions, which the package leaves to funsor code)."""
    with package_shape_rules():
        return _expression(draw, shape, depth, allow_number)


def _expression(draw, shape, depth, allow_number):
    choices = ["leaf"]
    if depth > 0:
        choices += ["unary", "binary", "binary"]
        if shape in ((), (3,), (2,)):
            choices.append("reduce")
        if shape in ((), (3,), (2,)):
            choices.append("index")
        if shape in ((2,), (2, 3)):
            choices.append("stack")
    kind = draw(st.sampled_from(choices))
    if kind == "leaf":
        if draw(st.integers(0, 3)) == 0:
            return draw(constants(shape, allow_number))
        return draw(st.sampled_from(VARIABLES[shape]))
    sub = depth - 1
    if kind == "unary":
        _, fn = draw(st.sampled_from(UNARY))
        return fn(draw(expressions(shape, sub)))
    if kind == "binary":
        _, fn = draw(st.sampled_from(BINARY))
        lhs = draw(expressions(shape, sub))
        rhs = draw(expressions(draw(st.sampled_from(BROADCASTS[shape])), sub))
        return fn(lhs, rhs) if draw(st.booleans()) else fn(rhs, lhs)
    if kind == "reduce":
        if shape == ():
            arg = draw(expressions(draw(st.sampled_from([(2,), (3,), (2, 3)])), sub))
            return draw(st.sampled_from([arg.sum(), ops.logsumexp(arg), ops.amax(arg)]))
        if shape == (3,):
            op = draw(st.sampled_from([ops.SumOp(axis=0), ops.AmaxOp(axis=-2)]))
        else:  # (2,)
            op = draw(st.sampled_from([ops.SumOp(axis=1), ops.LogsumexpOp(axis=-1)]))
        return op(draw(expressions((2, 3), sub)))
    if kind == "index":
        if shape == ():
            source = draw(st.sampled_from([(2,), (3,)]))
            return draw(expressions(source, sub))[draw(st.integers(0, source[0] - 1))]
        if shape == (3,):
            return draw(expressions((2, 3), sub))[draw(st.integers(0, 1))]
        # (2,): a slice of a (3,) value or a column of a (2, 3) value
        if draw(st.booleans()):
            start = draw(st.integers(0, 1))
            return draw(expressions((3,), sub))[start : start + 2]
        return draw(expressions((2, 3), sub))[:, draw(st.integers(0, 2))]
    if kind == "stack":
        part = shape[1:]
        parts = [draw(expressions(part, sub, allow_number=False)) for _ in range(2)]
        try:
            return ops.stack(parts)
        except NotImplementedError:  # funsor cannot stack some ground parts
            reject()
    raise AssertionError(kind)


@st.composite
def programs(draw):
    """An expression, or a Tuple of expressions."""
    if draw(st.integers(0, 3)) == 0:
        items = [draw(expressions(draw(st.sampled_from(SHAPES)))) for _ in range(2)]
        return Tuple(tuple(items))
    return draw(expressions(draw(st.sampled_from(SHAPES))))
