""".ci/each_test_file.py, which CI uses to run Pyro's test files each in a
fresh process: a file whose process crashes fails with its signal and the
test that was running named, and the files after it still run."""

import importlib.util
import os
import pathlib

import pytest

RUNNER = pathlib.Path(__file__).resolve().parent.parent / ".ci" / "each_test_file.py"

CRASHING = """
import os, signal

def test_before():
    assert 1 + 1 == 2

def test_crash():
    os.kill(os.getpid(), signal.SIGSEGV)
"""

PASSING = """
def test_pass():
    assert 2 + 2 == 4
"""

FAILING = """
def test_fail():
    assert 2 + 2 == 5
"""


def load_runner():
    spec = importlib.util.spec_from_file_location("each_test_file", RUNNER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(os.name != "posix", reason="signals are POSIX")
def test_a_crashing_file_fails_by_name_and_the_run_goes_on(tmp_path, capsys):
    (tmp_path / "test_a_crash.py").write_text(CRASHING)
    (tmp_path / "test_b_fail.py").write_text(FAILING)
    (tmp_path / "test_c_pass.py").write_text(PASSING)
    status = load_runner().main(["test_*.py", "--", "-p", "no:randomly"], tmp_path)
    out = capsys.readouterr().out
    assert status == 1, out
    assert "test_a_crash.py: CRASHED with SIGSEGV in " in out, out
    assert "test_a_crash.py::test_crash" in out.split("CRASHED with SIGSEGV in ")[1]
    assert "test_b_fail.py: " in out and "1 failed" in out, out
    assert "test_c_pass.py: " in out and "1 passed" in out, out
    assert "each file alone: 2 failed: ['test_a_crash.py', 'test_b_fail.py']" in out


def test_a_pattern_matching_no_file_is_an_error(tmp_path):
    with pytest.raises(SystemExit, match="no file in .* matches"):
        load_runner().main(["test_nothing_*.py"], tmp_path)
