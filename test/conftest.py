"""Select the funsor backend the funsor way, once, from FUNSOR_BACKEND, and
the float dtype of test data from FUNSOR_FLOAT_DTYPE (see helpers.FLOAT_DTYPE:
float32 on torch and jax, as Pyro and NumPyro users run them, by default)."""

import contextlib
import os

import funsor
import pytest

from .helpers import FLOAT_DTYPE

BACKEND = os.environ.get("FUNSOR_BACKEND", "numpy")
funsor.set_backend(BACKEND)
if BACKEND == "torch":
    import torch

    torch.set_default_dtype(getattr(torch, FLOAT_DTYPE))
elif BACKEND == "numpy" and FLOAT_DTYPE != "float64":
    raise ValueError(
        f"FUNSOR_FLOAT_DTYPE={FLOAT_DTYPE}: the numpy backend's tests run in "
        f"float64 (funsor's numpy dtype); float32 is for torch and jax"
    )
elif BACKEND == "jax":
    import jax

    jax.config.update("jax_enable_x64", FLOAT_DTYPE == "float64")
    # funsor 0.4.8 reduces ops.min with jnp.amax on jax; our jax backend
    # registers the true min when it is first used. Use it from the start,
    # so that eager references are right whichever test runs first.
    from funsor_lowering.backends import array_backend

    array_backend("jax")


def pytest_report_header(config):
    return f"funsor backend: {funsor.get_backend()}, float dtype: {FLOAT_DTYPE}"


# Hypothesis: HYPOTHESIS_PROFILE=large runs the fuzzers longer from the command line.
from hypothesis import settings  # noqa: E402

settings.register_profile("default", max_examples=100, deadline=None)
settings.register_profile("large", max_examples=2000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@contextlib.contextmanager
def contrib_backend(dtype_name):
    """A Pyro test in ``dtype_name`` (torch's default dtype) under the
    ``contrib.funsor`` pyroapi backend, with an empty parameter store
    (tests share parameter names with different shapes). torch only."""
    import pyro
    import pyro.contrib.funsor  # noqa: F401  (registers the pyroapi backend)
    import torch
    from pyroapi import pyro_backend

    dtype = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, dtype_name))
    try:
        with pyro_backend("contrib.funsor"):
            pyro.clear_param_store()
            yield
    finally:
        pyro.clear_param_store()
        torch.set_default_dtype(dtype)


@pytest.fixture
def float64_contrib_backend():
    with contrib_backend("float64"):
        yield


@pytest.fixture
def float32_contrib_backend():
    """Pyro's default dtype, as Pyro's own tests run."""
    with contrib_backend("float32"):
        yield
