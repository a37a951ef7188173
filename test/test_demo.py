"""The README's demo runs on every backend and checks itself against funsor."""

import importlib.util
import subprocess
import sys

import funsor
import pytest

from funsor_lowering.__main__ import main


def test_demo_runs_and_matches_eager(capsys):
    main(["demo", "--backend", funsor.get_backend()])
    out = capsys.readouterr().out
    assert "program output matches eager funsor: yes" in out
    assert "def demo_program(*, init, trans):" in out
    assert "speed-up:" in out


def test_demo_shows_jit_on_jax_and_torch(capsys):
    backend = funsor.get_backend()
    main(["demo", "--backend", backend])
    out = capsys.readouterr().out
    if backend == "numpy":
        assert "program.jit()" not in out
    else:
        assert "program.jit() (" in out and "matches eager funsor: yes" in out


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_demo_prints_an_install_hint_for_a_missing_backend(
    backend, monkeypatch, capsys
):
    real_find_spec = importlib.util.find_spec

    def find_spec(name, *args):  # as if the backend were not installed
        return None if name in ("torch", "jax") else real_find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    assert main(["demo", "--backend", backend]) == 1
    err = capsys.readouterr().err
    assert f"The {backend} backend needs" in err and f"[{backend}]" in err


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_demo_command_without_the_backend_installed(backend):
    if importlib.util.find_spec(backend) is not None:
        pytest.skip(f"{backend} is installed here (the numpy env runs this)")
    result = subprocess.run(
        [sys.executable, "-m", "funsor_lowering", "demo", "--backend", backend],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1
    assert "pip install" in result.stderr and "Traceback" not in result.stderr
