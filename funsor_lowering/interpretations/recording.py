"""What the open compiling blocks have recorded: one :class:`Recording`
per ``with`` block, and the stack of open blocks (innermost last).

Example::

    >>> Recording()
    Recording(folded=0, normalized=0)
"""

from funsor.domains import Reals
from funsor.terms import Variable

from ..extra_ops import split_key
from ..rng_keys import KEY_INPUT

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


# The compiling interpretations whose ``with`` block is open, innermost last.
OPEN_BLOCKS = []


def current_recording():
    """The recording of the innermost open compiling block."""
    return OPEN_BLOCKS[-1].recording
