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
from funsor.gaussian import GaussianMeta
from funsor.interpretations import Interpretation, eager, normalize, reflect
from funsor.terms import Funsor, Subs, _convert_reduced_vars

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


class NeedsEagerValues(NotImplementedError):
    """Raised inside a compiling block by funsor code that only works on
    eager values (the adjoint tape, sampling). ``compile_function`` catches
    it and traces the function on example arrays instead."""


class ConcreteValueGuard:
    """While a compiling block is open, ``float()``, ``int()``, ``bool()``
    and ``.item()`` of a funsor with free real inputs raise a ``TypeError``
    that says why and points to ``trace_function`` (funsor's own errors
    there are about argument types or ambiguous truth values); entering an
    ``AdjointTape`` and sampling raise :class:`NeedsEagerValues`."""

    METHODS = ("__float__", "__int__", "__index__", "__bool__", "item")
    _depth = 0
    _saved = {}

    @classmethod
    def _patches(cls):
        """(owner, attribute, replacement) for every patched attribute."""
        patches = [(Funsor, name, cls._guard(name)) for name in cls.METHODS]
        patches.append((AdjointTape, "__enter__", _refuse_adjoint_tape))
        patches.append((Funsor, "sample", _refuse_sampling))
        patches.append((GaussianMeta, "__call__", _gaussian_from_funsors))
        return patches

    @classmethod
    def install(cls):
        if cls._depth == 0:
            for owner, name, replacement in cls._patches():
                cls._saved[owner, name] = owner.__dict__.get(name)
                setattr(owner, name, replacement)
        cls._depth += 1

    @classmethod
    def uninstall(cls):
        cls._depth -= 1
        if cls._depth == 0:
            for (owner, name), original in cls._saved.items():
                if original is None:
                    delattr(owner, name)
                else:
                    setattr(owner, name, original)

    @classmethod
    def _guard(cls, name):
        original = Funsor.__dict__.get(name)
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


_EAGER_ONLY = (
    "needs eager values (funsor 0.4.8 computes it on concrete arrays only). "
    "compile_function handles such code by tracing it on example arrays; in "
    "a `with compiling:` block, move the code into a function and use "
    "compile_function, or funsor_lowering.trace_function."
)


def _refuse_adjoint_tape(tape):
    # Over symbolic terms funsor 0.4.8's tape merges cons-hashed results and
    # mixes alpha-renamed bound variables: the marginals come out wrong.
    raise NeedsEagerValues(
        "funsor.adjoint.AdjointTape (forward_backward, adjoint) " + _EAGER_ONLY
    )


def _refuse_sampling(self, sampled_vars, sample_inputs=None, rng_key=None):
    # Lazily, funsor's sample is a no-op (or a draw folded into a constant).
    sampled = {v.name for v in _convert_reduced_vars(sampled_vars, self.inputs)}
    if sampled.isdisjoint(self.inputs):
        return self
    raise NeedsEagerValues(f"sampling {type(self).__name__} " + _EAGER_ONLY)


def _gaussian_from_funsors(cls, *args, **kwargs):
    # funsor's Gaussian takes arrays; compile_function's keywords are
    # Variables: trace the function on example arrays instead.
    if any(isinstance(a, Funsor) for a in (*args, *kwargs.values())):
        raise NeedsEagerValues(
            "a Gaussian built from symbolic arrays (its white_vec, prec_sqrt, "
            "... are program inputs) " + _EAGER_ONLY
        )
    return _ORIGINAL_GAUSSIAN_CALL(cls, *args, **kwargs)


_ORIGINAL_GAUSSIAN_CALL = GaussianMeta.__call__


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
            try:
                return normalize.interpret(cls, *args)
            except AssertionError:
                # funsor 0.4.8's normalize merges some reductions into
                # Contractions of non-distributive pairs, e.g.
                # (x * 2).reduce(ops.logaddexp): keep the term as written.
                return reflect.interpret(cls, *args)
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
