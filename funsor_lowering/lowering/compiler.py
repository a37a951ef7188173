"""``lower`` and ``compile_funsor``: funsor -> lowered funsor -> OpProgram.

Example::

    >>> import numpy as np
    >>> from funsor.domains import Reals
    >>> from funsor.terms import Variable
    >>> a, x = Variable("a", Reals[2, 2]), Variable("x", Reals[2])
    >>> program = compile_funsor((a @ x).exp())
    >>> program.inputs
    ('a', 'x')
    >>> program(a=np.eye(2), x=np.array([0.0, 1.0]))
    array([1.        , 2.71828183])
"""

from collections import OrderedDict

from funsor.tensor import Tensor
from funsor.terms import Binary, Finitary, Funsor, Number, Tuple, Unary, Variable
from funsor.util import get_backend

from ..backends import array_backend
from ..errors import short_repr
from ..ir.editor import Editor
from ..ir.program import ValueType
from ..ir.structure import iter_leaves, map_leaves
from ..ops.hooks import with_package_shape_rules
from ..passes.pipeline import optimize
from ..runtime.entry import prepared
from . import rules  # noqa: F401  (register lowering rules)
from .driver import LoweredTuple, build, lower_term
from .gc_pause import gc_paused
from .layout import align, align_expanded
from .subprograms import inline_segments


def real_inputs(structure):
    """The real-valued free inputs of a nesting of funsors, in order of
    first appearance."""
    inputs = OrderedDict()
    for leaf in _funsor_leaves(structure, "result"):
        for name, domain in leaf.inputs.items():
            if domain.dtype == "real":
                inputs.setdefault(name, domain)
    return inputs


def _funsor_leaves(structure, path):
    if isinstance(structure, (tuple, list)):
        for i, item in enumerate(structure):
            yield from _funsor_leaves(item, f"{path}[{i}]")
    elif isinstance(structure, dict):
        for key, item in structure.items():
            yield from _funsor_leaves(item, f"{path}[{key!r}]")
    elif isinstance(structure, Funsor):
        yield structure
    else:
        raise TypeError(
            f"{path} is a {type(structure).__name__}, expected a funsor or a "
            f"nesting of tuples, lists and dicts of funsors"
        )


def finalize(lowered, term):
    """The lowered funsor of ``term``: a lowered value whose batch axes are in
    the order of ``term.inputs`` (DESIGN: the output layout rule)."""
    if isinstance(lowered, LoweredTuple):
        items = tuple(finalize(x, t) for x, t in zip(lowered.items, term.args))
        return build(Tuple, tuple(items))
    batch = OrderedDict((k, d) for k, d in term.inputs.items() if d.dtype != "real")
    if not set(lowered.batch) <= set(batch):
        raise AssertionError(
            f"lowering bug: batch {tuple(lowered.batch)} for inputs "
            f"{tuple(batch)} of {term}"
        )
    if len(lowered.batch) < len(batch):
        # The term declares inputs its value is constant along (funsor's lazy
        # Approximate claims its guide's inputs; eager returns the model):
        # broadcast, as funsor aligns such a value against others.
        return align_expanded(lowered, batch, term.output.shape)
    return align(lowered, tuple(batch))


@with_package_shape_rules
def lower(expr, *, memo=None):
    """An equivalent lowered funsor: only real ``Variable`` s, constants
    without inputs, ``Unary`` / ``Binary`` / ``Finitary`` applications and
    ``Tuple``; free ``Bint`` inputs become leading positional axes in the
    order of ``expr.inputs``.

    Example::

        >>> from funsor.domains import Reals
        >>> from funsor.terms import Variable
        >>> x = Variable("x", Reals[3])
        >>> print(lower(x * x + 1))
        ((x * x) + 1.0)
    """
    if not isinstance(expr, Funsor):
        raise TypeError(f"lower() expects a funsor, got {type(expr).__name__}")
    array_backend(get_backend()).activate()
    return finalize(lower_term(expr, memo), expr)


def compile_funsor(expr):
    """Compile a funsor to an :class:`OpProgram` taking the real-valued free
    inputs of ``expr`` as keyword arrays and returning ``expr(**arrays)``'s
    data (a tuple for a ``Tuple``).

    Example::

        >>> import numpy as np
        >>> from funsor.domains import Real
        >>> from funsor.terms import Variable
        >>> x, y = Variable("x", Real), Variable("y", Real)
        >>> compile_funsor(x * y + 1)(x=np.array(2.0), y=np.array(3.0))
        array(7.)
    """
    if not isinstance(expr, Funsor):
        raise TypeError(f"compile_funsor() expects a funsor, got {type(expr).__name__}")
    return compile_structure(expr)


@with_package_shape_rules
def compile_structure(structure, *, inputs=None, memo=None, input_types=None):
    """Compile a funsor or nesting of tuples, lists and dicts of funsors.

    :param dict inputs: the program's inputs (name -> domain), in order;
        defaults to the real free inputs of ``structure``.
    :param dict memo: a lowering cache shared between calls.
    :param dict input_types: :class:`ValueType` s overriding some inputs'
        domains in the program (a jax key is typed ``Reals[2]`` in terms).
    """
    array_backend(get_backend()).activate()
    free = real_inputs(structure)
    if inputs is None:
        inputs = free
    else:
        inputs = OrderedDict((k, d) for k, d in inputs.items() if d.dtype == "real")
        for name, domain in free.items():
            if inputs.get(name) != domain:
                raise ValueError(
                    f"the result depends on free variable {name!r}: {domain}, "
                    f"which is not a declared input (declared: "
                    f"{', '.join(f'{k}: {d}' for k, d in inputs.items()) or 'none'})"
                )
    if memo is None:
        memo = {}
    with gc_paused():
        lowered = map_leaves(
            lambda leaf: finalize(lower_term(leaf, memo), leaf), structure
        )
        builder = ProgramBuilder(inputs, input_types)
        program = builder.build(map_leaves(_untuple, lowered))
        return prepared(optimize(inline_segments(program)))


class ProgramBuilder:
    """Turns lowered funsors into an :class:`OpProgram` (A-normal form),
    through the program :class:`~funsor_lowering.ir.editor.Editor`.
    Cons-hashing of funsor terms makes equal subterms one value."""

    def __init__(self, inputs, input_types=None):
        self.inputs = OrderedDict(inputs)
        overrides = {k: t for k, t in (input_types or {}).items() if k in self.inputs}
        self.editor = Editor({**self.inputs, **overrides})
        self.refs = {
            Variable(name, domain): self.editor.input(k)
            for k, (name, domain) in enumerate(self.inputs.items())
        }

    def build(self, lowered_structure):
        for leaf in iter_leaves(lowered_structure):
            self._visit(leaf)
        output = map_leaves(lambda term: self.refs[term], lowered_structure)
        return self.editor.finish(output)

    def _visit(self, root):
        stack = [(root, False)]
        while stack:
            term, children_done = stack.pop()
            if term in self.refs:
                continue
            args = _operation_args(term)
            if args is None:
                self.refs[term] = self._leaf(term)
                continue
            if not children_done:
                stack.append((term, True))
                stack.extend((a, False) for a in reversed(args) if a not in self.refs)
                continue
            self.refs[term] = self.editor.emit(
                term.op,
                [self.refs[a] for a in args],
                isinstance(term, Finitary),
                ValueType.from_domain(term.output),
            )

    def _leaf(self, term):
        if isinstance(term, (Number, Tensor)) and not term.inputs:
            return self.editor.add_constant(term.data)
        if isinstance(term, Variable) and term.output.dtype == "real":
            raise ValueError(f"undeclared program input {term.name!r}")
        raise TypeError(
            f"not a lowered funsor: {short_repr(term)}; expected real "
            f"Variables, constants without inputs, Unary, Binary, Finitary"
        )


def _operation_args(term):
    if isinstance(term, Unary):
        return (term.arg,)
    if isinstance(term, Binary):
        return (term.lhs, term.rhs)
    if isinstance(term, Finitary):
        return tuple(term.args)
    return None


def _untuple(value):
    """A lowered funsor ``Tuple`` as a Python tuple (nested), for the output."""
    if isinstance(value, Tuple):
        return tuple(_untuple(arg) for arg in value.args)
    return value


__all__ = ["compile_funsor", "compile_structure", "lower"]
