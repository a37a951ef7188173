"""funsor's sampling and adjoint tape in a compiling block, as segments
(:mod:`.segments`), and the patterns compiling applies to their results.

- ``Funsor.sample`` samples the shadow of the term; the sample (Deltas at
  symbolic points plus a log weight) comes back symbolic.
- An ``AdjointTape`` entered in a block records the calls it sees; its
  ``adjoint`` replays them on shadows under funsor's own tape and takes the
  adjoint there. ``forward_backward`` 's reinterpretation is one step, so
  a lazily built expression stays lazy, as with eager funsor; the adjoint
  dict is keyed by the block's own terms.
- Funsor simplifies a sample's Deltas only at points without real inputs;
  :func:`sample_patterns` substitutes the block's symbolic points.

Example::

    >>> import numpy as np
    >>> from funsor import ops
    >>> from funsor.adjoint import AdjointTape
    >>> from funsor.domains import Reals
    >>> from funsor.terms import Variable
    >>> from funsor_lowering import compiling
    >>> with compiling as interp:
    ...     f, g = Variable("f", Reals[2])["x"], Variable("g", Reals[2])["x"]
    ...     with AdjointTape() as tape:
    ...         log_z = (f + g).reduce(ops.logaddexp, "x")
    ...     message = tape.adjoint(ops.logaddexp, ops.add, log_z, (f,))[f]
    >>> program = interp.compile(message)  # f's backward message: g
    >>> program.inputs, program(g=np.array([1.0, 2.0]))
    (('g',), array([1., 2.]))
"""

import functools
from collections import defaultdict

import funsor.adjoint
import funsor.interpreter
from funsor import ops
from funsor.adjoint import AdjointTape
from funsor.cnf import Contraction
from funsor.delta import Delta
from funsor.integrate import Integrate
from funsor.interpreter import get_interpretation
from funsor.terms import Binary, Funsor, Number, Subs, to_funsor

from ...ops import hooks
from .recording import current_recording, eager_region
from .segments import Segment, _structure, pushed, segment_running


# ------------------------------------------------------------------ sampling
def symbolic_sample(self, sampled_vars, sample_inputs=None, rng_key=None):
    """``Funsor.sample`` in a compiling block: a segment that samples the
    shadow of ``self``; its free real inputs are the segment's inputs."""
    if segment_running():  # a shadow samples as funsor does
        return hooks.original("Funsor.sample")(
            self, sampled_vars, sample_inputs, rng_key
        )
    region = eager_region()
    if region is not None and region.holds((self,)):  # a value of the region
        return region.run(
            lambda world: hooks.original("Funsor.sample")(
                self, sampled_vars, sample_inputs, rng_key
            )
        )
    sampled = frozenset(
        v.name for v in funsor.terms._convert_reduced_vars(sampled_vars, self.inputs)
    )
    if (sampled - sampled_names(self)).isdisjoint(self.inputs):
        return self  # nothing left to sample (funsor's sign to stop)
    params = {k for k, d in self.inputs.items() if d.dtype == "real"} - sampled
    segment = Segment(params, current_recording())

    def draw(world):
        shadow = world.shadow(self)
        sample = hooks.original("Funsor.sample")(
            shadow, sampled, sample_inputs, rng_key
        )
        return None if sample is shadow else sample

    sample = segment.run(draw)
    if sample is None:
        return self  # nothing left to sample (funsor's sign to stop)
    return segment.embed(sample)


def sampled_names(term):
    """Names a sample already fixes: those of its Delta terms (iteratively:
    a long lazy sum, as funsor builds under ``FUNSOR_USE_TCO=1``, would
    exceed Python's recursion limit)."""
    names = set()
    for part in _summands(term, lambda t: isinstance(t, Contraction)):
        if isinstance(part, Delta):
            names.update(part.fresh)
    return frozenset(names)


def _summands(term, opens):
    """The summands of nested ``+`` (``Binary``, and the ``Contraction`` s
    that ``opens`` accepts), left to right, without recursion."""
    result, stack = [], [term]
    while stack:
        term = stack.pop()
        if isinstance(term, Contraction) and term.bin_op is ops.add and opens(term):
            stack.extend(reversed(term.terms))
        elif isinstance(term, Binary) and term.op is ops.add:
            stack.extend((term.rhs, term.lhs))
        else:
            result.append(term)
    return result


def sample_patterns(cls, args):
    """Terms over samples (Deltas at symbolic points, see :mod:`.segments`)
    that funsor's eager patterns simplify only for points without real
    inputs: substitute the points, as those patterns do."""
    if cls is Subs and isinstance(args[0], Delta):
        return _delta_at_its_points(*args)
    if cls is Integrate:
        return _integrate_sample(*args)
    return None


def _sum_terms(term):
    return tuple(_summands(term, lambda t: not t.reduced_vars))


def _integrate_sample(log_measure, integrand, reduced_vars):
    """``Integrate`` over variables a sample fixes: the integrand and the
    rest of the measure at the sample's points, times its log densities."""
    names = frozenset(v.name for v in reduced_vars)
    terms = _sum_terms(log_measure)
    subs, rest = {}, []
    for term in terms:
        if not isinstance(term, Delta):
            rest.append(term)
            continue
        kept = []
        for name, (point, log_density) in term.terms:
            if name in names:
                subs[name] = point
                rest.append(log_density)
            else:
                kept.append((name, (point, log_density)))
        if kept:
            rest.append(Delta(tuple(kept)))
    if not subs:
        return None
    measure = functools.reduce(ops.add, rest)(**subs)
    fixed = frozenset(v for v in reduced_vars if v.name in subs)
    return Integrate(measure, integrand(**subs), reduced_vars - fixed)


def _delta_at_its_points(delta, subs):
    """``delta(**subs)`` where each substituted value is the very point of
    its Delta term (funsor's own substitution wants such points free of real
    inputs; a sample's points are functions of the block's real inputs)."""
    subs = dict(subs)
    kept, log_density = [], Number(0.0)
    for name, (point, term_log_density) in delta.terms:
        if name not in subs:
            kept.append((name, (point, term_log_density)))
        elif subs[name] is point:
            log_density = log_density + term_log_density
        else:
            return None
    if not kept:
        return log_density
    return Delta(tuple(kept)) + log_density


# ------------------------------------------------------------- adjoint tape
class TapeEntry:
    """A step the symbolic tape saw: ``cls(*args)`` or the reinterpretation
    of ``args[0]`` (``forward_backward``), and its symbolic result."""

    __slots__ = ("cls", "args", "result")

    def __init__(self, cls, args, result):
        self.cls, self.args, self.result = cls, args, result


def tape_enter(tape):
    """``AdjointTape.__enter__`` in a compiling block: the tape records the
    calls it sees symbolically."""
    if not segment_running():
        record_symbolically(tape, current_recording())
    return hooks.original("AdjointTape.__enter__")(tape)


def record_symbolically(tape, recording):
    """Make ``tape`` record symbolic calls of a block (whose ``recording``
    its adjoint's segment uses), with its own ``interpret`` and ``adjoint``.
    A tape entered outside the block gets the block's calls from it."""
    if getattr(tape, "symbolic_entries", None) is None:
        tape.symbolic_entries = []
        tape.recording = recording
        tape.interpret = functools.partial(_tape_interpret, tape)
        tape.adjoint = functools.partial(_tape_adjoint, tape)


def _tape_interpret(tape, cls, *args):
    with pushed(tape._old_interpretation):
        result = cls(*args)
    tape.symbolic_entries.append(TapeEntry(cls, args, result))
    return result


def tape_stack_reinterpret(x):
    """``funsor.adjoint.stack_reinterpret`` (``forward_backward``'s) while a
    symbolic tape is on top: one entry for the whole expression."""
    tape = get_interpretation().subinterpretations[0]
    entries = getattr(tape, "symbolic_entries", None)
    if entries is None or segment_running():
        return hooks.original("adjoint.stack_reinterpret")(x)
    with pushed(tape._old_interpretation):
        result = hooks.original("adjoint.stack_reinterpret")(x)
    entries.append(TapeEntry(None, (x,), result))
    return result


def _tape_adjoint(tape, sum_op, bin_op, root, targets=None, *, batch_vars=frozenset()):
    """``AdjointTape.adjoint`` of a symbolic tape: a segment that replays
    the tape on shadows under funsor's own tape, then takes its adjoint."""
    entries = tape.symbolic_entries
    params = {k for k, d in root.inputs.items() if d.dtype == "real"}
    segment = Segment(params, tape.recording)

    def replay(world):
        real_tape = AdjointTape()
        hooks.original("AdjointTape.__enter__")(real_tape)
        try:
            for entry in entries:
                args = world.shadow(entry.args)
                if entry.cls is None:
                    value = hooks.original("adjoint.stack_reinterpret")(args[0])
                else:
                    value = entry.cls(*args)
                world.remember(entry.result, value)
        finally:
            real_tape.__exit__(None, None, None)
        eager_targets = None if targets is None else world.shadow(tuple(targets))
        adjoints = real_tape.adjoint(
            sum_op,
            bin_op,
            world.shadow(root),
            eager_targets,
            batch_vars=world.shadow(frozenset(batch_vars)),
        )
        if targets is not None:
            return [adjoints[t] for t in eager_targets]
        # keys: the block's terms (funsor's own intermediate lazy terms name
        # none of them and are left out)
        keys = {k: _unshadow(world, k) for k in adjoints}
        return {keys[k]: v for k, v in adjoints.items() if keys[k] is not None}

    values = segment.embed(segment.run(replay))
    if targets is not None:
        return dict(zip(targets, values))
    zero = to_funsor(ops.UNITS[sum_op])
    result = defaultdict(lambda: zero)
    result.update(values)
    return result


def _unshadow(world, key):
    """The block's term whose shadow ``key`` is, or ``None``. funsor's tape
    keys lazy terms by a copy with fresh bound names: matched up to them."""
    term = world.inverse.get(id(key))
    if term is None and isinstance(key, Funsor):
        term = world.by_structure.get(_structure(key))
    return term


def symbolic_hooks():
    """Hook replacements (:mod:`funsor_lowering.funsor_hooks`) in effect while a
    compiling block is open: sampling and the adjoint tape run as segments."""
    return {
        "Funsor.sample": symbolic_sample,
        "AdjointTape.__enter__": tape_enter,
        "adjoint.stack_reinterpret": tape_stack_reinterpret,
    }


__all__ = [
    "TapeEntry",
    "record_symbolically",
    "sample_patterns",
    "sampled_names",
    "symbolic_hooks",
    "symbolic_sample",
]
