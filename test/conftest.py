"""Select the funsor backend the funsor way, once, from FUNSOR_BACKEND."""

import os

import funsor

BACKEND = os.environ.get("FUNSOR_BACKEND", "numpy")
funsor.set_backend(BACKEND)


def pytest_report_header(config):
    return f"funsor backend: {funsor.get_backend()}"


# Hypothesis: HYPOTHESIS_PROFILE=large runs the fuzzers longer from the command line.
from hypothesis import settings  # noqa: E402

settings.register_profile("default", max_examples=100, deadline=None)
settings.register_profile("large", max_examples=2000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
