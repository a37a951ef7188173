"""Data-parallel Pyro training (issue 17.5), run as a user runs it: the
example script trains AutoGaussian(backend="compiled") on 2 processes
(torch.distributed, gloo), each on a shard of the data with gradients
averaged by all-reduce, and checks the parameters equal single-process
training on the full data (float64)."""

import importlib.util
import os
import subprocess
import sys

import funsor
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.skipif(
    funsor.get_backend() != "torch" or importlib.util.find_spec("pyro") is None,
    reason="Pyro's AutoGaussian runs on torch",
)


def test_two_processes_train_as_one_on_the_full_data():
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "data_parallel_svi.py")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "2 processes x 32 data points, 20 steps: parameters equal" in result.stdout
