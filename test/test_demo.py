"""The README's demo runs on every backend and checks itself against funsor."""

import funsor

from funsor_lowering.__main__ import main


def test_demo_runs_and_matches_eager(capsys):
    main(["demo", "--backend", funsor.get_backend()])
    out = capsys.readouterr().out
    assert "program output matches eager funsor: yes" in out
    assert "def demo_program(*, init, trans):" in out
    assert "speed-up:" in out
