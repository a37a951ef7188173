"""test/forked.py, the runner of Pyro's tests in forked processes: a test
whose process crashes fails with its signal named, and the run goes on with
the other tests' outcomes intact."""

import os
import subprocess
import sys

import pytest

CASES = """
import os, signal, pytest

pytestmark = pytest.mark.forked

def test_crash():
    os.kill(os.getpid(), signal.SIGSEGV)

def test_pass():
    assert 1 + 1 == 2

@pytest.mark.parametrize("x", [1, 2])
def test_fail(x):
    assert x == 1
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forked tests need fork()")
def test_a_crash_fails_one_forked_test_and_the_run_goes_on(tmp_path):
    (tmp_path / "test_cases.py").write_text(CASES)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "test.forked", "-p", "no:randomly"]
        + ["-q", "-p", "no:cacheprovider", str(tmp_path / "test_cases.py")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": root},
    )
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "test_crash: the test's process CRASHED with signal 11 (SIGSEGV)" in out
    assert "2 failed, 2 passed" in out, out
    assert "assert 2 == 1" in out  # the child's own failure report came back
