"""Run each test file alone, in its own pytest process (a file must not
depend on what other files import or register). Arguments go to pytest."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent

failed = []
for path in sorted((ROOT / "test").glob("test_*.py")):
    command = [sys.executable, "-m", "pytest", "-q", "-x", str(path), *sys.argv[1:]]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    last = (result.stdout.strip().splitlines() or ["(no output)"])[-1]
    print(f"{path.name}: {last}", flush=True)
    if result.returncode not in (0, 5):  # 5: nothing collected (backend-only file)
        failed.append(path.name)
        print(result.stdout[-3000:], result.stderr[-3000:], sep="\n")
print(f"each file alone: {len(failed)} failed" + (f": {failed}" if failed else ""))
sys.exit(1 if failed else 0)
