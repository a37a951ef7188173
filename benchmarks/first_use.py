"""First use in a fresh process: what a user's script pays for its first
program, beside what funsor's eager evaluation pays for its first call.

Each measurement runs in its own interpreter (imports, backend set-up and
inputs are made before the clock starts): the first compile (or trace) and
call of a program, then a second compile and call in the same, now warm,
process; and, in another interpreter, funsor's eager evaluation's first and
second calls. Medians over fresh interpreters::

    python -m benchmarks.first_use [--repeats 3] [--write]
"""

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys

from benchmarks.timing import Report

HERE = os.path.dirname(os.path.abspath(__file__))

# case name -> (how the program is built, the case)
CASES = {
    "hmm_T10": ("compile_funsor", "HMM(10)"),
    "ffbs_5": ("trace_function", "FFBS(5)"),
}

CHILD = """
import json, sys, time
import funsor
funsor.set_backend({backend!r})
from benchmarks.cases import HMM, FFBS, TracedCase, random_inputs
from funsor_lowering import compile_funsor
case = {case}
arrays = random_inputs(case)
traced = isinstance(case, TracedCase)
symbolic = None if traced else case.symbolic()
if {eager!r}:
    run = case.function() if traced else case.funsor_eager
    call = lambda: run(**arrays)
else:
    def call():
        program = case.program(arrays) if traced else compile_funsor(symbolic)
        return program(**arrays)
times = []
for _ in range(2):
    start = time.perf_counter()
    call()
    times.append(time.perf_counter() - start)
print(json.dumps(times))
"""


def fresh_times(backend, case, eager):
    """``[first, second]`` call times in one fresh interpreter."""
    script = CHILD.format(backend=backend, case=case, eager=eager)
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        cwd=os.path.dirname(HERE),
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def medians(backend, case, eager, repeats):
    runs = [fresh_times(backend, case, eager) for _ in range(repeats)]
    return [statistics.median(run[i] for run in runs) for i in range(2)]


def backends():
    needs = {"numpy": "numpy", "torch": "torch", "jax": "jax"}
    return [b for b, m in needs.items() if importlib.util.find_spec(m) is not None]


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.first_use")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--write", action="store_true", help="write RESULTS_first_use.md"
    )
    args = parser.parse_args(argv)
    emit = Report()
    emit(
        f"Medians over {args.repeats} fresh interpreters (`python -m "
        f"benchmarks.first_use{' --write' if args.write else ''}`), "
        f"{os.cpu_count()} cpus. `first` is the process's first compile (or "
        f"trace) and call of the program, `warm` a second one in the same "
        f"process; funsor eager's first and second calls beside them."
    )
    emit()
    emit.header(
        [
            "backend",
            "case",
            "built by",
            "ours: first",
            "ours: warm",
            "eager: first",
            "eager: warm",
            "ours first / eager first",
        ]
    )
    for backend in backends():
        for name, (built_by, case) in CASES.items():
            ours = medians(backend, case, False, args.repeats)
            eager = medians(backend, case, True, args.repeats)
            cells = [f"{t * 1e3:.0f} ms" for t in ours + eager]
            emit.row(
                [backend, name, f"`{built_by}`", *cells, f"{ours[0] / eager[0]:.2f}"]
            )
    if args.write:
        emit.write("RESULTS_first_use.md", "First use in a fresh process")


if __name__ == "__main__":
    main()
