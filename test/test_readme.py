"""The README's Python examples run as written (in a numpy-backend process,
which is what they use; blocks fenced ```python torch need torch and Pyro
and are run by the Pyro tests' equivalents instead)."""

import os
import pathlib
import re
import subprocess
import sys

README = pathlib.Path(__file__).parent.parent / "README.md"


def test_readme_examples_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) >= 2
    env = dict(os.environ, FUNSOR_BACKEND="numpy")
    result = subprocess.run(
        [sys.executable, "-c", "\n".join(blocks)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "def program(*, a, x, b):" in result.stdout
