"""Run a program under ``jax.jit`` with its inputs sharded over 8 devices.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python examples/sharding.py

On one CPU the flag makes jax see 8 host devices. A batch of particles is
split over a ``Mesh`` of the devices with a ``NamedSharding``; the program
runs unchanged, gives the unsharded result, and its output keeps the
particle sharding.
"""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import funsor  # noqa: E402

funsor.set_backend("jax")

import jax  # noqa: E402
import numpy as np  # noqa: E402
from funsor import ops  # noqa: E402
from funsor.domains import Reals  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from funsor_lowering import compile_function  # noqa: E402

PARTICLES, DIM = 64, 3


@compile_function(x=Reals[PARTICLES, DIM], a=Reals[DIM, DIM])
def log_weights(x, a):
    """Per particle: logsumexp of an affine map of the particle."""
    return ops.logsumexp((x @ a).tanh(), -1)


def main():
    devices = jax.devices()
    assert len(devices) == 8, f"expected 8 devices, got {len(devices)}: set XLA_FLAGS"
    mesh = Mesh(np.array(devices), ("particles",))
    by_particle = NamedSharding(mesh, P("particles"))
    replicated = NamedSharding(mesh, P())

    rng = np.random.RandomState(0)
    x = rng.randn(PARTICLES, DIM).astype(np.float32)
    a = rng.randn(DIM, DIM).astype(np.float32)
    expected = log_weights(x=x, a=a)  # one device, unsharded

    sharded = log_weights.jit()(
        x=jax.device_put(x, by_particle), a=jax.device_put(a, replicated)
    )
    np.testing.assert_allclose(np.asarray(sharded), np.asarray(expected), rtol=1e-5)
    assert sharded.sharding.is_equivalent_to(by_particle, sharded.ndim), (
        sharded.sharding
    )
    print(f"{PARTICLES} particles on {len(devices)} devices:", sharded.sharding.spec)


if __name__ == "__main__":
    main()
