"""``CompilingInterpretation``: run existing funsor code over ``Variable`` s
and compile what it builds.

Inside the block, a term whose arguments have no free real-valued inputs is
evaluated by funsor's ``eager`` interpretation (constant folding at compile
time); any other term is normalized (funsor's ``normalize``), without eager
pattern retries. Sampling and the adjoint tape run as segments traced on
symbolic arrays (:mod:`.eager_steps`). Results keep the ``.inputs`` / ``.output``
they would have had; :meth:`CompilingInterpretation.compile` lowers them to
an ``OpProgram``.

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

import collections
import functools

from funsor import ops
from funsor.adjoint import AdjointTape
from funsor.interpretations import (
    Interpretation,
    StatefulInterpretation,
    eager,
    normalize,
    reflect,
)
from funsor.interpreter import get_interpretation
from funsor.tensor import Tensor
from funsor.terms import (
    Align,
    Binary,
    Cat,
    Funsor,
    Slice,
    Subs,
    Unary,
    Variable,
    substitute,
)

from ...errors import NeedsEagerValues, user_frame
from ...ops import hooks
from ...tracing.rng_keys import KEY_INPUT, KEY_TYPE
from ..compiler import compile_structure
from ..driver import has_real_inputs
from ..sound_algebra import fuses_non_distributive, sound_pattern
from .eager_steps import (
    TapeEntry,
    record_symbolically,
    sample_patterns,
    sampled_names,
    symbolic_hooks,
)
from .recording import (
    KEY_DOMAIN,
    Recording,
    block_state,
    eager_region,
    interpreting_depth,
    open_blocks,
    pop_block,
    push_block,
    start_interpreting,
    stop_interpreting,
)
from .segments import LAZY_TERMS, is_world_value, segment_running


def _has_real_inputs(arg):
    if isinstance(arg, Funsor):
        return has_real_inputs(arg)
    if isinstance(arg, tuple):
        return any(_has_real_inputs(a) for a in arg)
    return False


class SymbolicDataError(AttributeError):
    """``.data`` of a symbolic funsor in a compiling block (an
    ``AttributeError``, as funsor's ``hasattr`` checks expect)."""


def _no_data(funsor):
    """``Funsor.data`` in a block, for funsors that hold no array."""
    raise SymbolicDataError(
        f".data of a symbolic {type(funsor).__name__} with inputs "
        f"{list(funsor.inputs)}: a compiling block has no arrays; compute "
        f"with funsor terms and funsor.ops, or use "
        f"funsor_lowering.trace_function on concrete arrays"
    )


def _concrete_value_guard(name):
    """``float()``, ``int()``, ``bool()`` or ``.item()`` (``name``) of a
    funsor in a block: a ``TypeError`` that says why and points to
    ``trace_function`` where the funsor has free real inputs (funsor's own
    errors there are about argument types or ambiguous truth values)."""
    key = f"Funsor.{name}"
    convert = {"__float__": float, "__int__": int}.get(name)

    def guarded(self):
        if _has_real_inputs(self):
            real = [k for k, d in self.inputs.items() if d.dtype == "real"]
            where = user_frame()
            raise TypeError(
                f"{name.strip('_')}() needs a concrete value"
                f"{f' (at {where})' if where else ''}, but this funsor "
                f"depends on symbolic inputs {real} while compiling: "
                f"{type(self).__name__}. Compiled code cannot branch on or "
                f"convert values; use funsor_lowering.trace_function to trace "
                f"code that needs concrete values."
            )
        original = hooks.original(key)
        if original is not None:
            return original(self)
        if convert is not None:
            return convert(self.data)
        return self.data.item()

    guarded.__name__ = name
    return guarded


def block_hooks():
    """The hook replacements (:mod:`funsor_lowering.funsor_hooks`) in effect while
    a compiling block is open: conversions of symbolic funsors refuse,
    ``.data`` of a funsor without an array raises :class:`SymbolicDataError`,
    funsor's optimizer over the block leaves terms to the lowering's planning,
    ``.reduce(op)`` without names reduces what eager funsor would,
    a Gaussian built from symbolic arrays is built in ``compile_function``'s
    eager region (else raises :class:`NeedsEagerValues`),
    lazily built terms are recorded, and sampling and the adjoint tape run
    as segments (:mod:`.eager_steps`)."""
    replacements = {
        f"Funsor.{name}": _concrete_value_guard(name)
        for name in ("__float__", "__int__", "__bool__", "item")
    }
    replacements["Funsor.data"] = _no_data
    replacements["GaussianMeta.__call__"] = _gaussian_from_funsors
    replacements["reflect.interpret"] = _recording_reflect
    replacements["optimize_base.interpret"] = _optimizer_in_block
    replacements["Funsor.reduce"] = _reduce_in_block
    replacements["sum_product._partition"] = _partition_keeping_repeats
    replacements.update(symbolic_hooks())
    replacements.update(hooks.shape_rule_replacements())
    return replacements


def _partition_keeping_repeats(terms, sum_vars):
    # funsor's sum-products group factors with _partition, which keys a
    # graph by the factors themselves: a factor given twice raises KeyError
    # (and would count once). Eagerly two equal factors are two arrays; in a
    # block they are one cons-hashed term (x.reduce(ops.add, "j") twice).
    # Partition the distinct terms, then give each term its multiplicity.
    counts = collections.Counter(terms)
    components = hooks.original("sum_product._partition")(tuple(counts), sum_vars)
    return [
        (tuple(t for t in group for _ in range(counts[t])), dims)
        for group, dims in components
    ]


_EAGER_ONLY = (
    "needs eager values (funsor 0.4.8 computes it on concrete arrays only). "
    "compile_function handles such code on symbolic arrays (its eager region); in "
    "a `with compiling:` block, move the code into a function and use "
    "compile_function, or funsor_lowering.trace_function."
)


def _gaussian_from_funsors(cls, *args, **kwargs):
    # funsor's Gaussian takes arrays; compile_function's keywords are
    # Variables: in its eager region, the Gaussian is built from their
    # shadows (symbolic arrays), as eager funsor builds it from arrays.
    if any(isinstance(a, Funsor) for a in (*args, *kwargs.values())):
        region = eager_region()
        if region is not None:
            return region.run(
                lambda world: cls(
                    *(_array_of(world, a) for a in args),
                    **{k: _array_of(world, a) for k, a in kwargs.items()},
                )
            )
        raise NeedsEagerValues(
            "a Gaussian built from symbolic arrays (its white_vec, prec_sqrt, "
            "... are program inputs) " + _EAGER_ONLY
        )
    return hooks.original("GaussianMeta.__call__")(cls, *args, **kwargs)


def _array_of(world, value):
    """The shadow array of a funsor argument (others as they are)."""
    if isinstance(value, Funsor):
        return world.shadow(value, True).data
    return value


class CompilingInterpretation(Interpretation):
    """A funsor interpretation that records computations for compilation.

    Use as ``with compiling:`` or ``with funsor.interpreter.interpretation(
    compiling):``; each ``with`` block starts a fresh :class:`Recording`.
    """

    is_total = True

    def __init__(self, name="compiling"):
        super().__init__(name)

    @property
    def recording(self):
        """The :class:`Recording` of this interpretation's latest block in
        this context (thread, task)."""
        return block_state(self).recording

    def __enter__(self):
        state = block_state(self)
        if not any(block is self for block in open_blocks()):
            # funsor re-enters the active interpretation (substitute does):
            # only an outermost block starts a fresh recording
            state.recording = Recording()
            state.outer, state.outer_tapes = _outer_interpretations(
                get_interpretation()
            )
            for tape in state.outer_tapes:
                record_symbolically(tape, state.recording)
        hook_context = hooks.replaced(_block_hooks())
        hook_context.__enter__()
        state.hook_contexts.append(hook_context)
        push_block(self)
        return super().__enter__()

    def __exit__(self, *args):
        try:
            return super().__exit__(*args)
        finally:
            pop_block(self)
            block_state(self).hook_contexts.pop().__exit__(None, None, None)

    def interpret(self, cls, *args):
        if issubclass(cls, Tensor) and isinstance(args[0], Funsor):
            raise TypeError(
                f"funsor.Tensor({args[0]!r}, ...) in a compiling block: a "
                f"Tensor holds an array, and here the data is a funsor (a "
                f"program input is a Variable, not an array); give the "
                f"Variable batch inputs by indexing it, e.g. x['i'] (a "
                f"Variable of Bint inputs), or pass arrays and Tensors to "
                f"funsor_lowering.jit(fn) instead of compiling on Variables"
            )
        state = block_state(self)
        token = start_interpreting()
        try:
            result = None
            for outer in state.outer:
                result = outer.interpret(cls, *args)
                if result is not None:
                    break
            if result is None:
                result = self._interpret(cls, *args)
        finally:
            stop_interpreting(token)
        if not interpreting_depth():  # a call of user code
            for tape in state.outer_tapes:
                tape.symbolic_entries.append(TapeEntry(cls, args, result))
        return result

    def _interpret(self, cls, *args):
        region = block_state(self).region
        if region is not None and region.holds(args):
            # a term over values of compile_function's eager region (Gaussians
            # built from its keywords): evaluated eagerly there, on shadows
            return region.evaluate(cls, args)
        if any(_has_real_inputs(arg) for arg in args):
            self.recording.normalized += 1
            result = sample_patterns(cls, args)
            if result is not None:
                return result
            if cls is Subs:
                return _substituted(*args)
            if cls is Binary and type(args[0]) is ops.TruedivOp:
                # funsor's normalize writes x / y as x * reciprocal(y), and
                # its reciprocal takes 1 / 0 to the largest float, not inf:
                # keep the division as written (as eager funsor divides)
                return reflect.interpret(cls, *args)
            if cls is Unary and _cancels_inexactly(*args):
                # funsor's normalize takes exp(log(x)) to x, where eager funsor
                # gives nan for x < 0 (and log(exp(x)) inf on overflow)
                return reflect.interpret(cls, *args)
            if fuses_non_distributive(cls, args):
                # funsor 0.4.8's normalize would merge this reduction into a
                # Contraction of a non-distributive pair, e.g.
                # (x * 2).reduce(ops.logaddexp): keep the term as written.
                return reflect.interpret(cls, *args)
            return normalize.interpret(cls, *args)
        self.recording.folded += 1
        result = sound_pattern(cls, args)
        return eager.interpret(cls, *args) if result is None else result

    def compile(self, result, *, inputs=None):
        """Compile a funsor, or a nesting of tuples, lists and dicts of
        funsors, built in this interpretation's latest block.

        :param dict inputs: optional program inputs (name -> domain), in order;
            defaults to the real free inputs of ``result``.
        :rtype: ~funsor_lowering.OpProgram
        """
        input_types = None
        if self.recording.keyed:
            # a program that draws on jax takes its key as an input
            if inputs is not None:
                inputs = {**inputs, KEY_INPUT: KEY_DOMAIN}
            input_types = {KEY_INPUT: KEY_TYPE}
        return compile_structure(
            result,
            inputs=inputs,
            memo=self.recording.lowering_memo,
            input_types=input_types,
        )


# funsor's normalize cancels these unary pairs (f(g(x)) -> x); in floating
# point they are not inverses everywhere (log of a negative, exp overflow,
# funsor's reciprocal of 0 is the largest float)
_INEXACT_INVERSES = {
    ops.ExpOp: ops.LogOp,
    ops.LogOp: ops.ExpOp,
    ops.ReciprocalOp: ops.ReciprocalOp,
}


def _cancels_inexactly(op, arg):
    inverse = _INEXACT_INVERSES.get(type(op))
    return inverse is not None and isinstance(arg, Unary) and type(arg.op) is inverse


class EagerOrder(Align):
    """funsor's ``Align``, robust to funsor's renaming of bound variables
    (which rebuilds terms with the old names): names that are no longer
    inputs of ``arg`` are dropped. They were bound, so reduced later, and
    their place never shows in a result's layout."""

    def __init__(self, arg, names):
        super().__init__(arg, tuple(name for name in names if name in arg.inputs))


def _substituted(arg, subs):
    """``Subs(arg, subs)`` in a block: substituted into ``arg``'s subterms,
    rebuilt in the block, as funsor's eager substitutes into lazy terms, so
    the result's inputs come in the order eager funsor's would (a renamed
    input keeps its place; a batched value's inputs come where the
    variable was used). The ``Subs`` stays as written (the compiler lowers
    it) where a value shares inputs with ``arg`` (a gather along an input
    the indexed value has: funsor's eager indexes jointly)."""
    values = dict(subs)
    others = frozenset(arg.inputs) - frozenset(values)
    # funsor's Cat.eager_subs slices each part of a Cat: a scan
    # (sequential_sum_product) then splits its parts level by level until it
    # is unrolled; the lowering slices the concatenation instead
    sliced_cat = isinstance(arg, Cat) and any(
        isinstance(v, Slice) for v in values.values()
    )
    if not sliced_cat and not any(
        others.intersection(v.inputs) for v in values.values()
    ):
        return substitute(arg, subs)
    result = reflect.interpret(Subs, arg, subs)
    # eager's order: each substituted input's place takes its value's inputs
    order = []
    for name in arg.inputs:
        for new in values[name].inputs if name in values else (name,):
            if new not in order and new in result.inputs:
                order.append(new)
    order += [name for name in result.inputs if name not in order]
    if tuple(order) != tuple(result.inputs):
        result = reflect.interpret(EagerOrder, result, tuple(order))
    return result


def _outer_interpretations(interp):
    """The stateful interpretations (``MonteCarlo`` ...) and the adjoint
    tapes active where a block opens: they keep applying inside it, as they
    would to eager code (funsor's default ``eager`` / ``normalize`` are the
    block's own); a tape records the block's calls symbolically."""
    subs = interp.subinterpretations
    stateful = tuple(s for s in subs if isinstance(s, StatefulInterpretation))
    return stateful, tuple(s for s in subs if isinstance(s, AdjointTape))


def _reduce_in_block(self, op, reduced_vars=None):
    """``Funsor.reduce`` in a block: without names, it reduces what eager
    funsor reduces on the arrays the program will receive, its ``Bint``
    inputs and the real names its samples fix (``Delta`` s), never the
    real ``Variable`` s that stand for program inputs. Values of an eager
    region (Gaussians over symbolic arrays) reduce as funsor's."""
    if reduced_vars is None and not segment_running() and not is_world_value(self):
        sampled = sampled_names(self)
        reduced_vars = frozenset(
            Variable(name, domain)
            for name, domain in self.inputs.items()
            if domain.dtype != "real" or name in sampled
        )
    return hooks.original("Funsor.reduce")(self, op, reduced_vars)


def _optimizer_in_block(cls, *args):
    """funsor's optimizer (``apply_optimizer``, which ``funsor.einsum`` and
    the sum-product recipes call) over the block's interpretation: no
    rewrite. Its patterns would re-plan every Contraction the block's
    normalization builds, without end; the lowering plans contractions
    itself (opt_einsum) at compile time. Over other interpretations
    (``reflect``, a segment's eager values) it plans as funsor does."""
    if any(
        isinstance(sub, CompilingInterpretation)
        for sub in get_interpretation().subinterpretations
    ):
        return None
    return hooks.original("optimize_base.interpret")(cls, *args)


def _recording_reflect(cls, *args):
    """funsor's ``reflect`` while a block is open: records lazy terms."""
    result = hooks.original("reflect.interpret")(cls, *args)
    if not interpreting_depth() and not segment_running():
        LAZY_TERMS[id(result)] = result
    return result


@functools.cache
def _block_hooks():
    return block_hooks()


compiling = CompilingInterpretation()
"""A ready :class:`CompilingInterpretation`."""
