"""Op applications: Unary, Binary, Finitary, and Tuple."""

from funsor.ops import BinaryOp, FinitaryOp, GetitemOp, GetsliceOp, UnaryOp
from funsor.terms import Binary, Finitary, Funsor, Number, Tuple, Unary

from ..errors import UnsupportedTermError
from ..lowering import Lowered, LoweredTuple, build, lowering_rule


def require_no_batch(term, *args):
    for arg in args:
        if isinstance(arg, LoweredTuple):
            raise UnsupportedTermError(term, "a Tuple used as an op argument")
        if arg.batch:
            raise UnsupportedTermError(
                term,
                f"an argument has named batch inputs {tuple(arg.batch)}, which "
                f"are not lowered yet (named-dim support)",
            )


@lowering_rule(Unary, UnaryOp, Funsor)
def lower_unary(term, op, arg):
    require_no_batch(term, arg)
    return Lowered(build(Unary, op, arg.expr))


@lowering_rule(Binary, BinaryOp, Funsor, Funsor)
def lower_binary(term, op, lhs, rhs):
    require_no_batch(term, lhs, rhs)
    return Lowered(build(Binary, op, lhs.expr, rhs.expr))


@lowering_rule(Binary, GetitemOp, Tuple, Number)
def lower_getitem_tuple(term, op, lhs, rhs):
    """``Tuple(...)[k]`` selects an item at compile time."""
    return lhs.items[term.rhs.data]


@lowering_rule(Finitary, FinitaryOp, tuple)
def lower_finitary(term, op, args):
    require_no_batch(term, *args)
    return Lowered(build(Finitary, op, tuple(arg.expr for arg in args)))


@lowering_rule(Tuple, tuple)
def lower_tuple(term, args):
    return LoweredTuple(args)


@lowering_rule(Unary, GetsliceOp, Tuple)
def lower_getslice_tuple(term, op, arg):
    """``Tuple(...)[k]`` selects an item at compile time."""
    index = op.defaults["index"]
    if not isinstance(index, int):
        raise UnsupportedTermError(term, f"Tuple indexed by {index!r}, expected an int")
    return arg.items[index]
