"""``CompilingInterpretation``: run existing funsor code over ``Variable`` s
and compile what it builds.

Inside the block, a term whose arguments have no free real-valued inputs is
evaluated by funsor's ``eager`` interpretation (constant folding at compile
time); any other term is normalized (funsor's ``normalize``), without eager
pattern retries. Results keep the ``.inputs`` / ``.output`` they would have
had; :meth:`CompilingInterpretation.compile` lowers them to an ``OpProgram``.

Example::

    >>> import numpy as np
    >>> from funsor.domains import Reals
    >>> from funsor.terms import Variable
    >>> with compiling as interp:
    ...     x = Variable("x", Reals[2])
    ...     y = (x * x).sum() + 1
    >>> interp.compile(y)(x=np.array([1.0, 2.0]))
    array(6.)
"""

from funsor.interpretations import Interpretation, eager, normalize
from funsor.terms import Funsor

from ..compiler import compile_structure


def _has_real_inputs(arg):
    if isinstance(arg, Funsor):
        return any(d.dtype == "real" for d in arg.inputs.values())
    if isinstance(arg, tuple):
        return any(_has_real_inputs(a) for a in arg)
    return False


class Recording:
    """What one ``with`` block of a :class:`CompilingInterpretation` saw: how
    many terms it built (eagerly folded or normalized) and the lowering
    cache its ``compile`` calls share."""

    __slots__ = ("folded", "normalized", "lowering_memo")

    def __init__(self):
        self.folded = 0
        self.normalized = 0
        self.lowering_memo = {}

    def __repr__(self):
        return f"Recording(folded={self.folded}, normalized={self.normalized})"


class CompilingInterpretation(Interpretation):
    """A funsor interpretation that records computations for compilation.

    Use as ``with compiling:`` or ``with funsor.interpreter.interpretation(
    compiling):``; each ``with`` block starts a fresh :class:`Recording`.
    """

    is_total = True

    def __init__(self, name="compiling"):
        super().__init__(name)
        self.recording = Recording()

    def __enter__(self):
        self.recording = Recording()
        return super().__enter__()

    def interpret(self, cls, *args):
        if any(_has_real_inputs(arg) for arg in args):
            self.recording.normalized += 1
            return normalize.interpret(cls, *args)
        self.recording.folded += 1
        return eager.interpret(cls, *args)

    def compile(self, result, *, inputs=None):
        """Compile a funsor, or a nesting of tuples, lists and dicts of
        funsors, built in this interpretation's latest block.

        :param dict inputs: optional program inputs (name -> domain), in order;
            defaults to the real free inputs of ``result``.
        :rtype: ~funsor_lowering.OpProgram
        """
        return compile_structure(
            result, inputs=inputs, memo=self.recording.lowering_memo
        )


compiling = CompilingInterpretation()
"""A ready :class:`CompilingInterpretation`."""
