"""Select the funsor backend the funsor way, once, from FUNSOR_BACKEND."""

import os
import warnings

import funsor

BACKEND = os.environ.get("FUNSOR_BACKEND", "numpy")
funsor.set_backend(BACKEND)

# funsor.interpreter.interpretation(x) is deprecated in funsor 0.4.8 but must
# keep working; its warning is expected.
warnings.filterwarnings(
    "ignore", message=".*with interpretation.*", category=DeprecationWarning
)


def pytest_report_header(config):
    return f"funsor backend: {funsor.get_backend()}"
