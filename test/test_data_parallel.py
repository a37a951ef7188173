"""Data-parallel Pyro training (issue 17.5), run as a user runs it: the
example script trains AutoGaussian(backend="compiled") on 2 processes
(torch.distributed, gloo), each on a shard of the data with gradients
averaged by all-reduce, and checks the parameters equal single-process
training on the full data (float64)."""

import importlib.util

import funsor
import pytest

from .helpers import run_example

pytestmark = pytest.mark.skipif(
    funsor.get_backend() != "torch" or importlib.util.find_spec("pyro") is None,
    reason="Pyro's AutoGaussian runs on torch",
)


def test_two_processes_train_as_one_on_the_full_data():
    result = run_example("data_parallel_svi.py")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "2 processes x 32 data points, 20 steps: parameters equal" in result.stdout
