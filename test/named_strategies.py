"""Hypothesis strategies: random well-typed funsor expressions with named batch
inputs, reductions, contractions and substitutions (the grammar the compiler
must support completely)."""

from collections import OrderedDict

import numpy as np
from funsor import ops
from funsor.domains import Bint, Reals
from funsor.tensor import Tensor
from funsor.terms import Number, Variable
from hypothesis import reject
from hypothesis import strategies as st

from .helpers import from_numpy

BATCH = OrderedDict(i=Bint[2], j=Bint[3], k=Bint[4])
EVENTS = [(), (2,)]


def leaf_variable(names, event):
    """A real Variable indexed by batch ``names``: ``v_ij_2[i, j]``. Its
    name encodes its domain, so a name always has one domain."""
    sizes = tuple(BATCH[n].size for n in names)
    name = "v_{}_{}".format("".join(names), "".join(map(str, event)))
    var = Variable(name, Reals[sizes + event])
    return var[tuple(names)] if names else var


@st.composite
def batch_names(draw, min_size=0):
    names = draw(st.lists(st.sampled_from(list(BATCH)), min_size=min_size, unique=True))
    return tuple(names)


@st.composite
def constant(draw, names, event):
    seed = draw(st.integers(0, 2**16))
    shape = tuple(BATCH[n].size for n in names) + event
    data = np.asarray(np.random.RandomState(seed).randn(*shape), dtype=np.float32)
    return Tensor(from_numpy(data), OrderedDict((n, BATCH[n]) for n in names))


@st.composite
def index_value(draw, name, taken):
    """A Bint value to substitute for batch input ``name``."""
    size = BATCH[name].size
    kind = draw(st.sampled_from(["number", "tensor", "rename"]))
    if kind == "rename" and name + "2" in taken:
        kind = "number"
    if kind == "number":
        return Number(draw(st.integers(0, size - 1)), size)
    if kind == "rename":
        return Variable(name + "2", BATCH[name])  # a fresh name: a renaming
    others = draw(batch_names())
    others = tuple(n for n in others if n != name)
    seed = draw(st.integers(0, 2**16))
    shape = tuple(BATCH[n].size for n in others)
    data = np.random.RandomState(seed).randint(0, size, shape)
    return Tensor(from_numpy(data), OrderedDict((n, BATCH[n]) for n in others), size)


def funsor_builds(fn, *args):
    """``fn(*args)``, or reject the example where funsor 0.4.8 itself fails to
    build the term (it asserts on some semiring and substitution patterns)."""
    try:
        return fn(*args)
    except (AssertionError, NotImplementedError, KeyError):
        reject()


# No negation: funsor 0.4.8 normalizes -x to x * -1, and then distributes a
# max/min reduction over that product as if (max, mul) were a semiring on
# negative values, so its own eager answer is wrong (max(-y) = -max(y)).
SAFE_UNARY = [
    lambda x: x.tanh().exp(),
    lambda x: x.sigmoid(),
    lambda x: (ops.abs(x) + 1).log(),
]
# funsor treats (max, mul) and (min, mul) as distributive, which holds for
# nonnegative values only, so products are of positive values (and, for the
# same reason, there is no subtraction).
BINARY = [
    ops.add,
    lambda x, y: x.exp() * y.exp(),
    ops.max,
    ops.min,
    ops.logaddexp,
]
# (sum_op, prod_op) pairs funsor contracts with; mul pairs get positive terms.
PAIRS = [
    (ops.logaddexp, ops.add),
    (ops.add, ops.mul),
    (ops.max, ops.add),
    (ops.min, ops.add),
]


@st.composite
def expressions(draw, event=(), depth=3):
    """A real expression with event shape ``event`` and any batch inputs."""
    choices = ["leaf", "leaf"]
    if depth > 0:
        choices += ["unary", "binary", "reduce", "subs_bint", "subs_real"]
        if not event:
            choices += ["event_reduce", "contract"]
    kind = draw(st.sampled_from(choices))
    sub = depth - 1
    if kind == "leaf":
        names = draw(batch_names())
        if draw(st.integers(0, 3)) == 0:
            return draw(constant(names, event))
        return leaf_variable(names, event)
    if kind == "unary":
        return draw(st.sampled_from(SAFE_UNARY))(draw(expressions(event, sub)))
    if kind == "binary":
        op = draw(st.sampled_from(BINARY))
        other = draw(st.sampled_from([(), event]))
        lhs, rhs = draw(expressions(event, sub)), draw(expressions(other, sub))
        return funsor_builds(op, lhs, rhs)
    if kind == "event_reduce":
        arg = draw(expressions((2,), sub))
        return draw(
            st.sampled_from([arg.sum(), ops.logsumexp(arg, -1), ops.amax(arg, 0)])
        )
    if kind == "reduce":
        arg = draw(expressions(event, sub))
        names = draw(batch_names(min_size=1))
        op = draw(st.sampled_from([ops.add, ops.logaddexp, ops.max, ops.min]))
        present = frozenset(n for n in names if n in arg.inputs)
        return funsor_builds(arg.reduce, op, present) if present else arg
    if kind == "contract":
        sum_op, prod_op = draw(st.sampled_from(PAIRS))
        terms = [draw(expressions((), sub)) for _ in range(draw(st.integers(2, 3)))]
        if prod_op is ops.mul:
            terms = [t.exp() for t in terms]
        product = terms[0]
        for t in terms[1:]:
            product = funsor_builds(prod_op, product, t)
        names = draw(batch_names(min_size=1))
        present = frozenset(n for n in names if n in product.inputs)
        return funsor_builds(product.reduce, sum_op, present) if present else product
    if kind == "subs_bint":
        arg = draw(expressions(event, sub))
        names = [n for n in arg.inputs if n in BATCH]
        if not names:
            return arg
        name = draw(st.sampled_from(names))
        value = draw(index_value(name, arg.inputs))
        return funsor_builds(lambda: arg(**{name: value}))
    if kind == "subs_real":
        arg = draw(expressions(event, sub))
        reals = [n for n, d in arg.inputs.items() if d.dtype == "real"]
        if not reals:
            return arg
        name = draw(st.sampled_from(reals))
        domain = arg.inputs[name]
        value = Variable("w_" + "_".join(map(str, domain.shape)), domain)
        return funsor_builds(lambda: arg(**{name: value * 0.5 + 1.0}))
    raise AssertionError(kind)
