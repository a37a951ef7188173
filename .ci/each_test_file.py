"""Run test files each in its own fresh pytest process, and go on after a
failure or a crash: a segfault in one file (say inside ``torch.jit.trace``)
shows as that file's failure, naming the signal and the test that was
running, and the other files still run.

    python .ci/each_test_file.py                        every test/test_*.py
    python .ci/each_test_file.py 'test_pyro_*.py'       files matching a glob
    python .ci/each_test_file.py 'test_pyro_*.py' -- -k jit   pytest arguments

The children are new interpreters (subprocess, not fork), so a file must not
depend on what other files import or register. Exit status 1 if any file
failed or crashed.
"""

import pathlib
import signal
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTHING_COLLECTED = 5  # pytest's exit status for a backend-only file


def split_arguments(argv):
    if "--" in argv:
        cut = argv.index("--")
        return argv[:cut] or ["test_*.py"], argv[cut + 1 :]
    return argv or ["test_*.py"], []


def test_files(patterns, folder):
    files = sorted({p for pattern in patterns for p in folder.glob(pattern)})
    if not files:
        sys.exit(f"each_test_file: no file in {folder} matches {patterns}")
    return files


def running_test(stdout):
    """The test a crashed child was running: the last one pytest -v started."""
    started = [line for line in stdout.splitlines() if "::" in line]
    return started[-1].split()[0] if started else "(before any test)"


def run_alone(path, pytest_args):
    command = [sys.executable, "-m", "pytest", "-v", str(path), *pytest_args]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if result.returncode < 0:
        name = signal.Signals(-result.returncode).name
        summary = f"CRASHED with {name} in {running_test(result.stdout)}"
    else:
        summary = (result.stdout.strip().splitlines() or ["(no output)"])[-1]
    ok = result.returncode in (0, NOTHING_COLLECTED)
    print(f"{path.name}: {summary}", flush=True)
    if not ok:
        print(result.stdout[-3000:], result.stderr[-3000:], sep="\n", flush=True)
    return ok


def main(argv, folder=ROOT / "test"):
    patterns, pytest_args = split_arguments(argv)
    files = test_files(patterns, folder)
    failed = [p.name for p in files if not run_alone(p, pytest_args)]
    print(f"each file alone: {len(failed)} failed" + (f": {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
