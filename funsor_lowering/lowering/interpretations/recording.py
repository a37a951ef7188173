"""What the open compiling blocks have recorded: one :class:`Recording`
per ``with`` block, and the stack of open blocks (innermost last).

Example::

    >>> Recording()
    Recording(folded=0, normalized=0)
"""

import contextvars
import weakref

from funsor.domains import Reals
from funsor.terms import Variable

from ...ops.extra_ops import split_key
from ...tracing.rng_keys import KEY_INPUT

# A jax PRNG key as a block's terms type it (the program types it exactly).
KEY_DOMAIN = Reals[2]


class Recording:
    """What one ``with`` block of a :class:`CompilingInterpretation` saw: how
    many terms it built (eagerly folded or normalized), the lowering cache
    its ``compile`` calls share, and the keys its segments drew with (jax)."""

    __slots__ = ("folded", "normalized", "lowering_memo", "_key")

    def __init__(self):
        self.folded = 0
        self.normalized = 0
        self.lowering_memo = {}
        self._key = None

    @property
    def keyed(self):
        return self._key is not None

    def next_key(self):
        """A fresh key term for a segment that draws on jax: split off the
        block's ``rng_key`` input, as funsor's ``MonteCarlo`` splits."""
        if self._key is None:
            self._key = Variable(KEY_INPUT, KEY_DOMAIN)
        key, self._key = split_key(self._key, index=0), split_key(self._key, index=1)
        return key

    def __repr__(self):
        return f"Recording(folded={self.folded}, normalized={self.normalized})"


class BlockState:
    """One compiling interpretation's state in one context (thread, task):
    its latest block's :class:`Recording`, the stateful interpretations and
    adjoint tapes in effect where the block opened, and the hook contexts
    its open ``with`` blocks entered, and ``compile_function``'s eager
    region (a :class:`~.segments.Segment` whose world holds the values of
    Gaussians built from its keywords), if any."""

    __slots__ = ("recording", "outer", "outer_tapes", "hook_contexts", "region")

    def __init__(self):
        self.recording = Recording()
        self.outer = self.outer_tapes = ()
        self.hook_contexts = []
        self.region = None


# Per context: the compiling interpretations whose ``with`` block is open
# (innermost last), how deep interpretation calls of open blocks nest, and
# each interpretation's BlockState (weakly keyed).
_OPEN_BLOCKS = contextvars.ContextVar("open compiling blocks", default=())
_DEPTH = contextvars.ContextVar("compiling interpretation depth", default=0)
_STATES = contextvars.ContextVar("compiling block states", default=None)


def open_blocks():
    """The compiling interpretations whose block is open in this context."""
    return _OPEN_BLOCKS.get()


def push_block(interp):
    _OPEN_BLOCKS.set(_OPEN_BLOCKS.get() + (interp,))


def pop_block(interp):
    blocks = list(_OPEN_BLOCKS.get())
    del blocks[len(blocks) - 1 - blocks[::-1].index(interp)]
    _OPEN_BLOCKS.set(tuple(blocks))


def block_state(interp):
    """``interp``'s :class:`BlockState` in this context."""
    states = _STATES.get()
    if states is None:
        states = weakref.WeakKeyDictionary()
        _STATES.set(states)
    state = states.get(interp)
    if state is None:
        state = states[interp] = BlockState()
    return state


def eager_region():
    """The eager region (:class:`~.segments.Segment`) of the innermost open
    block that has one, or ``None``."""
    for block in reversed(open_blocks()):
        region = block_state(block).region
        if region is not None:
            return region
    return None


def start_interpreting():
    """Marks the start of an interpretation call of a compiling block (they
    nest when funsor's patterns build terms); returns a token for
    :func:`stop_interpreting`."""
    return _DEPTH.set(_DEPTH.get() + 1)


def stop_interpreting(token):
    _DEPTH.reset(token)


def interpreting_depth():
    """How deep compiling interpretation calls nest here (0: user code)."""
    return _DEPTH.get()


def current_recording():
    """The recording of the innermost open compiling block."""
    return block_state(_OPEN_BLOCKS.get()[-1]).recording
