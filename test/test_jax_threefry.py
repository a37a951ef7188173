"""jax key splits and normal draws of keyed programs (``jax_threefry``) are
``jax.random``'s bit for bit, eagerly and under ``jax.jit``, in either
Threefry mode; on CPU their compiled code has no XLA while loop."""

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from .conftest import BACKEND

pytestmark = pytest.mark.skipif(
    BACKEND != "jax", reason="jax keys (FUNSOR_BACKEND=jax runs these)"
)

if BACKEND == "jax":
    import jax
    import jax.numpy as jnp

    from funsor_lowering.backends import jax_threefry

SEEDS = st.integers(0, 2**32 - 1)
SHAPES = st.lists(st.integers(1, 4), max_size=3).map(tuple)


def raw_key(seed, other):
    return jnp.asarray([seed, other], dtype=jnp.uint32)


@given(SEEDS, SEEDS, st.integers(1, 5))
def test_split_is_jax_random_split(seed, other, num):
    key = raw_key(seed, other)
    expected = np.asarray(jax.random.split(key, num))
    np.testing.assert_array_equal(np.asarray(jax_threefry.split(key, num)), expected)
    jitted = jax.jit(jax_threefry.split, static_argnums=1)
    np.testing.assert_array_equal(np.asarray(jitted(key, num)), expected)


@given(SEEDS, SEEDS, SHAPES, st.sampled_from(["float32", "float16"]))
def test_normal_is_jax_random_normal(seed, other, shape, dtype):
    key = raw_key(seed, other)
    expected = np.asarray(jax.random.normal(key, shape, dtype=dtype))
    actual = jax_threefry.normal(key, shape, dtype=dtype)
    assert actual.dtype == expected.dtype and actual.shape == shape
    np.testing.assert_array_equal(np.asarray(actual), expected)
    jitted = jax.jit(lambda k: jax_threefry.normal(k, shape, dtype=dtype))
    np.testing.assert_array_equal(np.asarray(jitted(key)), expected)


def test_original_threefry_mode_draws_as_jax():
    # jax's other Threefry mode splits keys differently: jax.random's own
    key = jax.random.PRNGKey(11)
    with jax.threefry_partitionable(False):
        assert not jax_threefry._draws_as_jax()
        split = jax_threefry.split(key, 3)
        normal = jax_threefry.normal(key, (2, 3))
        np.testing.assert_array_equal(split, jax.random.split(key, 3))
        np.testing.assert_array_equal(normal, jax.random.normal(key, (2, 3)))
        with jax.threefry_partitionable(True):
            partitionable = jax.random.split(key, 3)
    assert not np.array_equal(split, partitionable)  # the modes do differ
    assert jax_threefry._draws_as_jax()


def test_draws_compile_without_while_loops_on_cpu():
    if jax.default_backend() != "cpu":
        pytest.skip("jax lowers Threefry as a while loop on CPU only")

    def draws(key):
        first, second = jax_threefry.split(key, 2)
        return jax_threefry.normal(first, (4, 2)), jax_threefry.split(second, 2)

    key = jax.random.PRNGKey(0)
    hlo = jax.jit(draws).lower(key).compile().as_text()
    assert not re.search(r"\bwhile\(", hlo)
    jax_hlo = jax.jit(lambda k: jax.random.split(k, 2)).lower(key).compile().as_text()
    assert re.search(r"\bwhile\(", jax_hlo)  # what jax_threefry avoids
