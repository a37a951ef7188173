"""Segments: funsor code that runs on concrete arrays only, inside a
compiling block.

funsor 0.4.8 samples (``Funsor.sample``, which ``MonteCarlo`` calls) and
runs its adjoint tape on concrete arrays only. Inside a ``with compiling:``
block such a step runs as a :class:`Segment` (:mod:`.eager_steps` hooks
the steps in):

1. the symbolic terms it needs are evaluated on symbolic arrays
   (:class:`~funsor_lowering.ops.symbolic.SymbolicArray`), with the
   tracer recording every op (their *shadows*); funsor's own code then runs
   on the shadows once, exactly as it runs eagerly;
2. the recorded ops become a sub-program whose inputs are the block's
   symbolic values (real ``Variable`` s, results of earlier segments, the
   jax ``rng_key``), and each array of the result becomes a
   ``segment_output`` op application over those inputs, named by its
   ``Bint`` inputs: the result is a symbolic funsor again, with the inputs
   and output funsor's eager result has;
3. compiling inlines each segment's sub-program once (:func:`inline_segments`),
   so its random draws stay live ops, drawn once per program call.

The step runs once; a branch or conversion on a shadow's values raises
:class:`~funsor_lowering.ops.concretization.ConcretizationError`, and no
RNG is drawn from. Example::

    >>> import numpy as np
    >>> from funsor import ops
    >>> from funsor.domains import Bint, Reals
    >>> from funsor.integrate import Integrate
    >>> from funsor.montecarlo import MonteCarlo
    >>> from funsor.terms import Variable
    >>> from funsor_lowering import compiling
    >>> with compiling as interp:
    ...     f = Variable("logits", Reals[3])["k"]
    ...     with MonteCarlo(particle=Bint[4]):  # f[k] for k ~ softmax(f)
    ...         draws = Integrate(f - f.reduce(ops.logaddexp, "k"), f, "k")
    >>> print(dict(draws.inputs))
    {'logits': Reals[3], 'particle': Bint[4]}
    >>> interp.compile(draws)(logits=np.array([0.0, 0.0, 50.0]))  # k = 2, surely
    array([50., 50., 50., 50.])
"""

import contextvars
import weakref
from collections import OrderedDict
from contextlib import contextmanager

import funsor.adjoint
import funsor.interpreter
import numpy as np
from funsor import ops
from funsor.cnf import Contraction
from funsor.domains import Array
from funsor.gaussian import Gaussian
from funsor.integrate import Integrate
from funsor.interpretations import (
    Memoize,
    PrioritizedInterpretation,
    StatefulInterpretation,
    reflect,
)
from funsor.interpreter import (
    get_interpretation,
    pop_interpretation,
    push_interpretation,
)
from funsor.montecarlo import extract_samples
from funsor.registry import KeyedRegistry
from funsor.tensor import Tensor
from funsor.terms import (
    Approximate,
    Binary,
    Cat,
    Finitary,
    Funsor,
    Number,
    Reduce,
    Scatter,
    Slice,
    Subs,
    Variable,
)
from funsor.typing import get_origin

from ...backends import array_backend
from ...errors import NeedsEagerValues
from ...ir.editor import Editor, Ref
from ...ir.program import value_type_of
from ...ir.structure import map_leaves
from ...ops.concretization import backend_errors_named
from ...ops.symbolic import SymbolicArray
from ...tracing.rng_keys import KeySource
from ...tracing.tracer import (
    Node,
    OpRecorder,
    TracingInterpretation,
    _build_program,
    tracing_hooks,
)
from ..subprograms import SegmentOutputOp, SegmentProgram, segment_output
from .recording import block_state, open_blocks

# > 0 in a context while a world runs: funsor's own code applies.
_RUNNING = contextvars.ContextVar("segment running", default=0)


def segment_running():
    """Whether a segment's world runs in this context (funsor's own sampler
    and tape apply to its shadows)."""
    return _RUNNING.get() > 0


# Terms user code built lazily (``reflect``, ``lazy``) in compiling blocks,
# by id (compiling records them): shadows of these stay lazy, as funsor's
# eager code would hold them. Cons-hashing hands such a term to later blocks.
LAZY_TERMS = weakref.WeakValueDictionary()


def is_segment_value(term):
    """Whether ``term`` is a segment output (named by ``Bint`` indexing)."""
    return _SEGMENT_VALUES(type(term), *term._ast_values)


# segment outputs, as funsor term patterns: (term class, argument types)
_SEGMENT_VALUES = KeyedRegistry(default=lambda *args: False)


@_SEGMENT_VALUES.register(Finitary, SegmentOutputOp, tuple)
def _segment_output(op, args):
    return True


@_SEGMENT_VALUES.register(Binary, ops.GetitemOp, Funsor, Funsor)
def _indexed_segment_output(op, lhs, rhs):
    return is_segment_value(lhs)


@extract_samples.register(Finitary)
@extract_samples.register(Binary)
def _extract_samples_segment_value(term):
    # a sample's log weight in a compiling block (funsor's is a Tensor)
    if is_segment_value(term):
        return {}
    raise ValueError(f"Could not extract support from {type(term).__name__}")


class Segment:
    """One sampling or adjoint step of a compiling block, run once on the
    shadows of its symbolic inputs (a :class:`World` of symbolic arrays).

    :param frozenset params: names of the real ``Variable`` s that are the
        step's inputs (symbolic arrays in the world); others stay lazy terms.
    :param recording: the block's :class:`~.compiling.Recording`.
    """

    def __init__(self, params, recording):
        self.params = frozenset(params)
        self.recording = recording
        self.backend = array_backend(funsor.get_backend())
        self.inputs = []  # the block's symbolic values behind each input
        self.input_ids = {}  # id(term) -> index in self.inputs
        self.world = World(self, shadow_interpretation(get_interpretation()))

    def input_index(self, term):
        k = self.input_ids.get(id(term))
        if k is None:
            k = self.input_ids[id(term)] = len(self.inputs)
            self.inputs.append(term)
        return k

    def run(self, fn):
        """``fn(world)``, with the tracer recording."""
        return self.world.run(fn)

    def holds(self, args):
        """Whether ``args`` (a term's arguments) hold a value of this
        segment's world: a ``Tensor`` or ``Gaussian`` over symbolic arrays."""
        return any(
            is_world_value(a)
            or (isinstance(a, tuple) and any(is_world_value(b) for b in a))
            for a in args
        )

    def evaluate(self, cls, args):
        """``cls(*args)`` as eager funsor evaluates it, in the world: the
        arguments' shadows, under the interpretations in effect now."""
        interp = shadow_interpretation(get_interpretation())

        def run(world):
            shadows = tuple(world.shadow(a, True) for a in args)
            with pushed(interp):
                return interp.interpret(cls, *shadows)

        return self.run(run)

    def embed(self, result):
        """The world's result as a symbolic funsor (or a nesting of tuples,
        lists and dicts of them)."""
        leaves = _tensor_leaves(result)
        keyed = self.world.keys.used
        program, used = _used_inputs_only(self.world.program(leaves, keyed))
        args = [self.inputs[k] for k in used if k < len(self.inputs)]
        if keyed and len(self.inputs) in used:
            args.append(self.recording.next_key())
        domains = [_positional_domain(leaf) for leaf in leaves]
        segment = SegmentProgram(program, domains)
        terms = {}
        for k, leaf in enumerate(leaves):
            term = Finitary(SegmentOutputOp(segment=segment, index=k), tuple(args))
            for name, domain in leaf.inputs.items():
                term = term[Variable(name, domain)]
            terms[id(leaf)] = term
        return map_leaves(lambda value: _rebuild(value, terms), result)


def _used_inputs_only(program):
    """``program`` without the inputs no output depends on, and the
    positions of those it keeps."""
    editor = Editor.of(program)
    output = editor.copy_operations(program)
    live = editor.live(output)
    names = list(program.input_types)
    used = [k for k in range(len(names)) if Ref("i", k) in live]
    if len(used) == len(names):
        return program, used
    return editor.finish(output, inputs=[names[k] for k in used]), used


class World:
    """The shadows of a segment's symbolic terms: funsor values over
    symbolic arrays."""

    def __init__(self, segment, interp):
        self.segment = segment
        self.interp = interp
        self.recorder = OpRecorder(segment.backend)
        self.arrays = []  # symbolic array of each segment input
        self.memo = {}  # id(symbolic term) -> shadow
        self.keep = []  # symbolic terms in memo, alive
        self.inverse = {}  # id(shadow) -> symbolic term
        self.by_structure = {}  # _structure(lazy shadow) -> symbolic term
        key = SymbolicArray((2,), np.dtype("uint32"))
        self.key = self._register(key) if segment.backend.keyed else None
        self.keys = KeySource(self.key)

    def _register(self, array):
        self.recorder.add(Node(array, live=True))
        return array

    @contextmanager
    def running(self):
        token = _RUNNING.set(_RUNNING.get() + 1)
        try:
            with tracing_hooks(self.segment.backend), self.recorder, self.keys:
                with self.interp:
                    yield
        finally:
            _RUNNING.reset(token)

    def run(self, fn):
        with self.running(), backend_errors_named():
            return fn(self)

    def remember(self, term, shadow, eager=None):
        """``shadow`` is ``term``'s shadow (``eager``: in an eagerly built
        region; ``None``: in both)."""
        for key in (True, False) if eager is None else (eager,):
            self.memo[id(term), key] = shadow
        self.keep.append(term)
        self.inverse.setdefault(id(shadow), term)
        if eager is False:  # a lazy shadow: funsor's tape keys a copy of it
            self.by_structure.setdefault(_structure(shadow), term)
        self.keep.append(shadow)

    def shadow(self, term, eager=False):
        """The value of a symbolic term (or tuple, frozenset of terms) in
        this world: funsor's eager result, except where user code built
        the term lazily (``reflect``, ``lazy``): a lazy term over values."""
        if isinstance(term, (tuple, frozenset)):
            return type(term)(self.shadow(t, eager) for t in term)
        if not isinstance(term, Funsor):
            return term
        eager = eager or id(term) not in LAZY_TERMS
        value = self.memo.get((id(term), eager))
        if value is None:
            value = self._shadow(term, eager)
            self.remember(term, value, eager)
        return value

    def _shadow(self, term, eager):
        if is_world_value(term):
            return term
        if isinstance(term, Variable):
            if term.name in self.segment.params and term.dtype == "real":
                return self._input(term)
            return term
        if isinstance(term, Finitary) and isinstance(term.op, SegmentOutputOp):
            return self._input(term)
        if isinstance(term, (Tensor, Number, Slice)):
            return term
        if eager or not _is_structure(term):
            # Values (indexed inputs ...) are what eager code holds as
            # Tensors (in lazily built terms too); funsor's alpha-renamed
            # copy of a value is the value renamed (the same array).
            original, renames = _unrenamed(term)
            if original is not term:
                value = self.shadow(original, True)
                with pushed(self.interp):
                    return value(**renames)
            eager = True
        # the subterms of a term the block built eagerly are eager too
        # (funsor's normalize builds some of them directly)
        args = tuple(self.shadow(arg, eager) for arg in term._ast_values)
        interp = self.interp if eager else reflect
        with pushed(interp):
            return interp.interpret(get_origin(type(term)), *args)

    def _input(self, term):
        k = self.segment.input_index(term)
        while len(self.arrays) <= k:
            self.arrays.append(None)
        if self.arrays[k] is None:
            domain = term.output
            backend = self.segment.backend
            dtype = backend.float_dtype if domain.dtype == "real" else backend.int_dtype
            self.arrays[k] = self._register(SymbolicArray(domain.shape, dtype))
        return Tensor(self.arrays[k], OrderedDict(), term.dtype)

    def program(self, leaves, keyed):
        """The recorded sub-program from the inputs to ``leaves``' data."""
        arrays = list(self.arrays)
        if keyed:
            arrays.append(self.key)
        kwargs = OrderedDict((f"in{k}", a) for k, a in enumerate(arrays))
        types = OrderedDict(
            (name, value_type_of(a, self.segment.backend)) for name, a in kwargs.items()
        )
        result = tuple(leaf.data for leaf in leaves)
        return _build_program(self.recorder, kwargs, types, result, True)


@contextmanager
def pushed(interp):
    """``interp`` on top of funsor's stack, without entering it (entering
    a compiling interpretation would start a fresh recording)."""
    push_interpretation(interp)
    try:
        yield
    finally:
        pop_interpretation()


def shadow_interpretation(interp):
    """The interpretation shadows are evaluated under: the tracer's, under
    the stateful interpretations (``MonteCarlo`` ...) in effect, including
    those a compiling block applies from outside it."""
    subs = []
    for sub in _flatten(interp):
        if any(sub is block for block in open_blocks()):  # a compiling block
            subs.extend(block_state(sub).outer)
        elif isinstance(sub, StatefulInterpretation):
            subs.append(sub)
    subs.append(TracingInterpretation())
    return subs[0] if len(subs) == 1 else PrioritizedInterpretation(*subs)


def _flatten(interp):
    for sub in interp.subinterpretations:
        if isinstance(sub, Memoize):
            yield from _flatten(sub.base_interpretation)
        else:
            yield sub


# Terms whose structure funsor's adjoint tape follows (the rest are values).
_STRUCTURE = (Reduce, Contraction, Cat, Subs, Scatter, Approximate, Integrate)


def _is_structure(term):
    if isinstance(term, Binary):
        return isinstance(term.op, ops.AssociativeOp)
    return isinstance(term, _STRUCTURE)


def _unrenamed(term):
    """``term`` with funsor's fresh names of bound variables (``x__BOUND_3``)
    back to their own, and the renaming that restores them."""
    bound = [name for name in term.inputs if "__BOUND" in name]
    renames = {_unbound(name): Variable(name, term.inputs[name]) for name in bound}
    if not renames or len(renames) < len(bound) or set(renames) & set(term.inputs):
        return term, {}  # nothing to rename, or names that would collide
    names = {v.name: k for k, v in renames.items()}
    return _rename(term, names), renames


def _rename(term, names):
    if isinstance(term, Variable):
        return Variable(names.get(term.name, term.name), term.output)
    if isinstance(term, (tuple, frozenset)):
        return type(term)(_rename(t, names) for t in term)
    if not isinstance(term, Funsor) or isinstance(term, (Tensor, Number, Slice)):
        return term
    args = tuple(_rename(a, names) for a in term._ast_values)
    return reflect.interpret(get_origin(type(term)), *args)


def is_world_value(term):
    """Whether ``term`` is a value over symbolic arrays (a segment's): a
    ``Tensor`` or ``Gaussian`` of them, or a sum of such (funsor's eager
    Gaussian results are ``Contraction`` s of a Gaussian and a Tensor)."""
    if isinstance(term, Tensor):
        return isinstance(term.data, SymbolicArray)
    if isinstance(term, Gaussian):
        return isinstance(term.white_vec, SymbolicArray)
    if isinstance(term, Contraction) and not term.reduced_vars:
        parts = [t for t in term.terms if not isinstance(t, (Tensor, Number))]
        return any(map(is_world_value, term.terms)) and all(
            isinstance(t, Gaussian) and is_world_value(t) for t in parts
        )
    return False


def _tensor_leaves(value):
    """The ``Tensor`` leaves over symbolic arrays of a funsor result (a
    nesting of funsors, tuples, frozensets, lists and dicts), in order."""
    leaves = []

    def visit(x):
        if isinstance(x, Tensor):
            if isinstance(x.data, SymbolicArray):
                leaves.append(x)
        elif isinstance(x, Gaussian) and is_world_value(x):
            raise NeedsEagerValues(
                "a Gaussian result (of sampling, of the adjoint tape, or built "
                "from compile_function's inputs): a program returns arrays; "
                "reduce the Gaussian's real inputs (as eager funsor would give "
                "a Tensor), or use funsor_lowering.trace_function"
            )
        elif isinstance(x, Funsor):
            for a in x._ast_values:
                visit(a)
        elif isinstance(x, (tuple, frozenset, list)):
            for a in x:
                visit(a)
        elif isinstance(x, dict):
            for a in x.values():
                visit(a)
        return x

    visit(value)
    return leaves


def _unbound(name):
    return name.split("__BOUND")[0]


def _positional_domain(leaf):
    shape = tuple(d.size for d in leaf.inputs.values()) + leaf.output.shape
    return Array[leaf.dtype, shape]


def _rebuild(value, terms):
    """``value`` with its Tensor leaves replaced by their symbolic terms,
    rebuilt by the block's interpretation."""
    if isinstance(value, Tensor):
        return terms[id(value)]
    if isinstance(value, (tuple, frozenset)):
        return type(value)(_rebuild(v, terms) for v in value)
    if not isinstance(value, Funsor) or isinstance(value, (Number, Variable, Slice)):
        return value
    args = tuple(_rebuild(a, terms) for a in value._ast_values)
    return type(value)(*args)


def _structure(term):
    """A hashable form of a lazy term over shadows, up to bound names."""
    if isinstance(term, Tensor):
        inputs = tuple((_unbound(k), d) for k, d in term.inputs.items())
        return ("Tensor", id(term.data), inputs)
    if isinstance(term, Variable):
        return ("Variable", _unbound(term.name), term.output)
    if isinstance(term, Funsor):
        return (type(term).__name__,) + tuple(map(_structure, term._ast_values))
    if isinstance(term, tuple):
        return tuple(map(_structure, term))
    if isinstance(term, frozenset):
        return frozenset(map(_structure, term))
    if isinstance(term, str):
        return _unbound(term)
    return term


__all__ = [
    "LAZY_TERMS",
    "Segment",
    "SegmentOutputOp",
    "pushed",
    "segment_output",
]
