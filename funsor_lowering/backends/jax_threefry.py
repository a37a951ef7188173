"""jax key splits and normal draws whose Threefry hash is straight-line code.

On CPU, jax lowers its Threefry-2x32 hash as an XLA while loop of five
iterations (smaller executables); a jitted program of a few dozen small
ops spends more time in those loops than in its arithmetic (``ffbs_5``:
eleven key splits and four draws, ~100 of its ~200 XLA kernels). Here the
same hash is written out round by round, and jax's own ``random.split`` and
``random.normal`` run on it through a PRNG implementation
(``jax.extend.random.define_prng_impl``), so the bits, and every draw made
from them, are jax's own.

They are jax's only where jax's key splits and random bits are the
"partitionable" Threefry ones (``jax_threefry_partitionable``, the default
since jax 0.5) and the default PRNG is Threefry; the first use checks both
against ``jax.random`` once, and otherwise :func:`split` and :func:`normal`
are ``jax.random``'s.

Example::

    >>> import jax
    >>> key = jax.random.PRNGKey(0)
    >>> bool((split(key, 2) == jax.random.split(key, 2)).all())
    True
    >>> bool((normal(key, (3,)) == jax.random.normal(key, (3,))).all())
    True
"""

import functools
import math
import threading

import funsor

if funsor.get_backend() != "jax":  # as jax_backend: funsor breaks otherwise
    funsor.set_backend("jax")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.extend.random import define_prng_impl  # noqa: E402

from ..ops import hooks  # noqa: E402

hooks.install_jax_hooks()  # jax.random.split below is jax's, even while tracing

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = np.uint32(0x1BD11BDA)  # Threefry's key schedule constant


def _rotate_left(x, bits):
    return lax.shift_left(x, np.uint32(bits)) | lax.shift_right_logical(
        x, np.uint32(32 - bits)
    )


def threefry2x32(key1, key2, x1, x2):
    """The Threefry-2x32 hash (20 rounds) of counters ``(x1, x2)`` under
    key ``(key1, key2)``, all ``uint32``: two ``uint32`` arrays."""
    keys = (key1, key2, key1 ^ key2 ^ _PARITY)
    x1, x2 = x1 + keys[0], x2 + keys[1]
    for block in range(5):  # four rounds, then a key injection
        for bits in _ROTATIONS[block % 2]:
            x1 = x1 + x2
            x2 = _rotate_left(x2, bits) ^ x1
        x1 = x1 + keys[(block + 1) % 3]
        x2 = x2 + keys[(block + 2) % 3] + np.uint32(block + 1)
    return x1, x2


def _hashed_counters(key, shape):
    # the hash of each element's index (a uint64 as high and low halves)
    size = math.prod(shape)
    if size >= 2**32:
        raise NotImplementedError(f"{size} random values at once")
    low = lax.iota(np.uint32, size).reshape(shape)
    return threefry2x32(key[0], key[1], jnp.zeros(shape, np.uint32), low)


def _split(key, shape):
    bits1, bits2 = _hashed_counters(key, shape)
    return jnp.stack([bits1, bits2], axis=len(shape))


def _random_bits(key, bit_width, shape):
    bits1, bits2 = _hashed_counters(key, shape)
    if bit_width == 64:
        high = lax.convert_element_type(bits1, np.uint64)
        return lax.shift_left(high, np.uint64(32)) | bits2.astype(np.uint64)
    dtype = {8: np.uint8, 16: np.uint16, 32: np.uint32}[bit_width]
    return lax.convert_element_type(bits1 ^ bits2, dtype)


def _seed(seed):
    return jax.random.key_data(jax.random.key(seed, impl="threefry2x32"))


def _fold_in(key, data):
    threefry = jax.random.wrap_key_data(key, impl="threefry2x32")
    return jax.random.key_data(jax.random.fold_in(threefry, data))


UNROLLED_THREEFRY = define_prng_impl(
    key_shape=(2,),
    seed=_seed,
    split=_split,
    random_bits=_random_bits,
    fold_in=_fold_in,
    name="threefry2x32_unrolled",
)


@functools.partial(jax.jit, static_argnums=1)
def _unrolled_split(key, num):
    keys = jax.random.wrap_key_data(key, impl=UNROLLED_THREEFRY)
    return jax.random.key_data(_jax_split(keys, num))


@functools.partial(jax.jit, static_argnums=(1, 2))
def _unrolled_normal(key, shape, dtype):
    keys = jax.random.wrap_key_data(key, impl=UNROLLED_THREEFRY)
    return jax.random.normal(keys, shape, dtype=dtype)


_check_lock = threading.Lock()
_checked = {}  # jax's settings -> whether the unrolled hash draws as jax


def _jax_random_settings():
    return (
        bool(jax.config.jax_threefry_partitionable),
        str(jax.config.jax_default_prng_impl),
        bool(jax.config.jax_enable_x64),
    )


def _draws_as_jax():
    """Whether, under jax's current settings, the unrolled hash splits keys
    and draws normals bit for bit as ``jax.random`` (checked once per
    settings, on two keys)."""
    settings = _jax_random_settings()
    same = _checked.get(settings)
    if same is None:
        with _check_lock:
            same = _checked.get(settings)
            if same is None:
                same = settings[:2] == (True, "threefry2x32") and _agrees()
                _checked[settings] = same
    return same


def _agrees():
    # normal draws are jax's functions of the random bits: checking the bits
    # checks the draws
    widths = (np.uint32, np.uint64) if jax.config.jax_enable_x64 else (np.uint32,)

    @jax.jit
    def both(key):  # ours and jax's, compiled together
        unrolled = jax.random.wrap_key_data(key, impl=UNROLLED_THREEFRY)
        pairs = [(_unrolled_split(key, 2), _jax_split(key, 2))]
        for dtype in widths:
            ours = jax.random.bits(unrolled, (5,), dtype)
            pairs.append((ours, jax.random.bits(key, (5,), dtype)))
        return jnp.stack([(ours == theirs).all() for ours, theirs in pairs]).all()

    with jax.ensure_compile_time_eval():
        return all(bool(both(jax.random.PRNGKey(seed))) for seed in (0, 1234567))


def _jax_split(key, num):
    # jax.random.split itself (tracing replaces the public name)
    return hooks.original("jax.random.split")(key, num)


def split(key, num=2):
    """``jax.random.split(key, num)`` of a raw ``uint32[2]`` key."""
    if _draws_as_jax():
        return _unrolled_split(key, num)
    return _jax_split(key, num)


def normal(key, shape=(), dtype=jnp.float32):
    """``jax.random.normal(key, shape, dtype)`` of a raw ``uint32[2]`` key."""
    if _draws_as_jax():
        return _unrolled_normal(key, tuple(shape), jnp.dtype(dtype))
    return jax.random.normal(key, tuple(shape), dtype=dtype)
