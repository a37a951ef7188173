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

from funsor.adjoint import AdjointTape
from funsor.interpretations import Interpretation, eager, normalize, reflect
from funsor.terms import Funsor, Subs

from ..compiler import compile_structure
from ..lowering import has_real_inputs


def _has_real_inputs(arg):
    if isinstance(arg, Funsor):
        return has_real_inputs(arg)
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


class ConcreteValueGuard:
    """While a compiling block is open, ``float()``, ``int()``, ``bool()``
    and ``.item()`` of a funsor with free real inputs raise a ``TypeError``
    that says why and points to ``trace_function`` (funsor's own errors
    there are about argument types or ambiguous truth values), and so does
    entering an ``AdjointTape`` (with ``NotImplementedError``)."""

    METHODS = ("__float__", "__int__", "__index__", "__bool__", "item")
    _depth = 0
    _saved = {}

    @classmethod
    def install(cls):
        if cls._depth == 0:
            for name in cls.METHODS:
                cls._saved[name] = Funsor.__dict__.get(name)
                setattr(Funsor, name, cls._guard(name, cls._saved[name]))
            cls._saved_tape_enter = AdjointTape.__enter__
            AdjointTape.__enter__ = _refuse_adjoint_tape
        cls._depth += 1

    @classmethod
    def uninstall(cls):
        cls._depth -= 1
        if cls._depth == 0:
            for name, original in cls._saved.items():
                if original is None:
                    delattr(Funsor, name)
                else:
                    setattr(Funsor, name, original)
            AdjointTape.__enter__ = cls._saved_tape_enter

    @staticmethod
    def _guard(name, original):
        convert = {"__float__": float, "__int__": int, "__index__": int}.get(name)

        def guarded(self):
            if _has_real_inputs(self):
                real = [k for k, d in self.inputs.items() if d.dtype == "real"]
                raise TypeError(
                    f"{name.strip('_')}() needs a concrete value, but this funsor "
                    f"depends on symbolic inputs {real} while compiling: "
                    f"{type(self).__name__}. Compiled code cannot branch on or "
                    f"convert values; use funsor_lowering.trace_function to trace "
                    f"code that needs concrete values."
                )
            if original is not None:
                return original(self)
            if convert is not None:
                return convert(self.data)
            return self.data.item()

        guarded.__name__ = name
        return guarded


def _refuse_adjoint_tape(tape):
    raise NotImplementedError(
        "funsor.adjoint.AdjointTape (forward_backward, adjoint) inside "
        "compile_function / compiling: funsor 0.4.8's adjoint needs eager "
        "values (over symbolic terms its bound-variable bookkeeping gives "
        "wrong marginals). Use funsor_lowering.trace_function on a function "
        "of arrays that builds Tensors; it records the adjoint computation."
    )


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
        ConcreteValueGuard.install()
        return super().__enter__()

    def __exit__(self, *args):
        try:
            return super().__exit__(*args)
        finally:
            ConcreteValueGuard.uninstall()

    def interpret(self, cls, *args):
        if any(_has_real_inputs(arg) for arg in args):
            self.recording.normalized += 1
            if cls is Subs:
                # funsor 0.4.8's normalize pushes substitutions through Cat
                # into terms whose inputs disagree (sequential_sum_product
                # with odd lengths); the compiler lowers Subs itself.
                return reflect.interpret(cls, *args)
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
