"""Every Python code block of README.md and docs/*.md runs as a standalone
script in a fresh process, from an empty directory, with nothing but its own
imports (blocks fenced ```python torch need torch and Pyro: the torch env
runs them)."""

import importlib.util
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def code_blocks():
    blocks = []
    for doc in DOCS:
        text = doc.read_text()
        for k, match in enumerate(
            re.finditer(r"```python( torch)?\n(.*?)```", text, re.S)
        ):
            needs = ("torch", "pyro") if match.group(1) else ()
            code = textwrap.dedent(match.group(2))  # a block in a list is indented
            blocks.append(pytest.param(code, needs, id=f"{doc.name}-{k}"))
    return blocks


BLOCKS = code_blocks()


def test_docs_have_runnable_blocks():
    assert len(BLOCKS) >= 7
    assert any(p.values[1] for p in BLOCKS)  # the Pyro example


def test_docs_refer_to_no_file_outside_the_repository():
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)#:]+)\)", doc.read_text()):
            assert (doc.parent / target).exists(), f"{doc.name} links to {target}"
        assert "../shared" not in doc.read_text() and "DESIGN.md" not in doc.read_text()


@pytest.mark.parametrize("code, needs", BLOCKS)
def test_block_runs_as_a_standalone_script(code, needs, tmp_path):
    missing = [m for m in needs if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"needs {missing} (the torch env runs it)")
    script = tmp_path / "example.py"
    script.write_text(code)
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    if "def program(*, a, x, b):" in code or "print(program.as_code())" in code:
        assert "def program(*, a, x, b):" in result.stdout
