"""``python -m funsor_lowering conformance``: funsor's own test suite, from
its source distribution, run eagerly and with the functions under test
compiled (:mod:`.plugin`), on each backend; writes the table of
``docs/conformance.md`` and, with ``--check``, fails where a test that
passes eagerly fails compiled and is not a named exclusion
(:data:`.exclusions.EXCLUDED`).

The source distribution is fetched from the package index with pip (the
version of the installed funsor) into a cache folder; nothing of funsor's
is kept in this repository.
"""

import argparse
import fnmatch
import json
import os
import pathlib
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from typing import NamedTuple

import funsor

from .exclusions import EXCLUDED

BACKENDS = ("numpy", "torch", "jax")
MODES = ("eager", "compiled")
DEFAULT_CACHE = pathlib.Path(tempfile.gettempdir()) / "funsor_lowering_conformance"


def funsor_tests(cache=DEFAULT_CACHE, version=funsor.__version__):
    """The folder of funsor ``version``'s test files, from its source
    distribution (downloaded once into ``cache``)."""
    root = pathlib.Path(cache) / f"funsor-{version}"
    tests = root / "test"
    if tests.is_dir():
        return tests
    cache = pathlib.Path(cache)
    cache.mkdir(parents=True, exist_ok=True)
    archive = cache / f"funsor-{version}.tar.gz"
    if not archive.exists():
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"]
        command += ["--no-binary", ":all:", "--dest", str(cache)]
        subprocess.run(command + [f"funsor=={version}"], check=True)
    with tarfile.open(archive) as tar:
        members = [
            m for m in tar.getmembers() if m.name.startswith(f"funsor-{version}/test/")
        ]
        tar.extractall(cache, members=members, filter="data")
    return tests


class Run(NamedTuple):
    """One pytest run of funsor's tests: ``{test id: record}`` of the tests
    it finished, its seconds, how many tests it collected, and whether it
    was stopped at the time limit."""

    records: dict
    seconds: float
    collected: int
    stopped: bool


def run_suites(tests, backend, files=None, timeout=3600):
    """Run funsor's test files (all, or ``files``) on ``backend`` eagerly
    and compiled, in two fresh pytest processes side by side; a
    :class:`Run` per mode. A run still going at ``timeout`` seconds is
    stopped and keeps the tests it finished (the plugin writes each test's
    record as it finishes)."""
    started = time.perf_counter()
    runs = {mode: _start(tests, backend, mode, files) for mode in MODES}
    results = {}
    for mode, (process, report) in runs.items():
        try:
            process.wait(timeout=max(1, timeout - (time.perf_counter() - started)))
            stopped = False
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            stopped = True
        records, collected = _read_report(report)
        seconds = time.perf_counter() - started
        results[mode] = Run(records, seconds, collected, stopped)
    return results


def _start(tests, backend, mode, files):
    handle, report = tempfile.mkstemp(suffix=f"-{backend}-{mode}.jsonl")
    os.close(handle)
    targets = [str(tests / f) for f in files] if files else [str(tests)]
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly"]
    command += ["-p", "no:cacheprovider", "-p", "funsor_lowering.conformance.plugin"]
    command += [f"--funsor-lowering={mode}", f"--funsor-lowering-report={report}"]
    command += ["--rootdir", str(tests.parent), *targets]
    env = dict(os.environ, FUNSOR_BACKEND=backend)
    env.pop("CI", None)  # funsor skips its slow jax tests on CI: run them all
    process = subprocess.Popen(
        command,
        cwd=tests.parent,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return process, report


def _read_report(report):
    """``({test id: record}, number collected)`` from a plugin report."""
    records, collected = {}, 0
    with open(report) as lines:
        for line in lines:
            record = json.loads(line)
            if "collected" in record:
                collected = record["collected"]
            else:
                records[record.pop("test")] = record
    os.remove(report)
    return records, collected


def finished_in_both(runs):
    """The eager and compiled records, cut to the tests both runs finished
    where one was stopped (a test the stopped run never reached is not a
    failure)."""
    eager, compiled = runs["eager"].records, runs["compiled"].records
    if not any(run.stopped for run in runs.values()):
        return eager, compiled
    both = eager.keys() & compiled.keys()
    return (
        {t: r for t, r in eager.items() if t in both},
        {t: r for t, r in compiled.items() if t in both},
    )


def excluded(test, backend):
    """The reason ``test`` is excluded on ``backend``, or ``None``."""
    for pattern, (backends, reason) in EXCLUDED.items():
        if backend in backends and fnmatch.fnmatchcase(test, pattern):
            return reason
    return None


def compare(eager, compiled, backend):
    """Per test file: counts; and the regressions (passed eagerly, not
    compiled), split into excluded and unexpected ones."""
    files = {}
    regressions, unexpected, stale = [], [], []
    for test, record in eager.items():
        name = test.split("::")[0].rsplit("/", 1)[-1]
        row = files.setdefault(name, Counter())
        row["tests"] += 1
        other = compiled.get(test, {"outcome": "missing", "error": ""})
        passed_eagerly = record["outcome"] in ("passed", "xpassed")
        passed = other["outcome"] in ("passed", "xpassed")
        row["eager"] += passed_eagerly
        row["compiled"] += passed_eagerly and passed
        row["ran compiled"] += (
            passed and other.get("compiled", 0) + other.get("cached", 0) > 0
        )
        reason = excluded(test, backend)
        if passed_eagerly and not passed:
            row["excluded" if reason else "unexpected"] += 1
            (regressions if reason else unexpected).append((test, other["error"]))
        elif reason and passed_eagerly:
            stale.append(test)
    return files, regressions, unexpected, stale


def summarize(backend, runs, timeout):
    """Print one backend's result; ``(result for markdown, failed)``."""
    eager, compiled = finished_in_both(runs)
    stopped = [m for m in MODES if runs[m].stopped]
    if not eager:
        print(f"{backend}: no test finished in both runs: no results")
        return None, True
    files, regressions, unexpected, stale = compare(eager, compiled, backend)
    partial = None
    if stopped:
        partial = (len(eager), runs["eager"].collected, timeout)
        print(
            f"{backend}: STOPPED at the time limit ({timeout:.0f} s) before the "
            f"{' and '.join(stopped)} run finished; {len(eager)} of "
            f"{runs['eager'].collected} tests finished in both runs",
            flush=True,
        )
    eager_s, compiled_s = runs["eager"].seconds, runs["compiled"].seconds
    total = sum(files.values(), Counter())
    print(
        f"{backend}: {total['tests']} tests, {total['eager']} pass eagerly, "
        f"{total['compiled']} of them compiled ({total['excluded']} excluded, "
        f"{total['unexpected']} unexpected failures); "
        f"{eager_s:.0f} s eager, {compiled_s:.0f} s compiled",
        flush=True,
    )
    for test, error in unexpected:
        print(f"  UNEXPECTED {test}: {error}")
    for test in stale:
        print(f"  passes now, remove its exclusion: {test}")
    result = (files, regressions, unexpected, eager_s, compiled_s, partial)
    return result, bool(stopped) or bool(unexpected)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m funsor_lowering conformance")
    parser.add_argument("--backend", nargs="+", choices=BACKENDS, default=BACKENDS)
    parser.add_argument("--files", nargs="*", help="test files (default: all)")
    parser.add_argument("--cache", default=str(DEFAULT_CACHE))
    parser.add_argument(
        "--timeout", type=float, default=3600, help="seconds per backend (both runs)"
    )
    parser.add_argument(
        "--write", metavar="PATH", help="write the markdown table (docs/conformance.md)"
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 if a test passing eagerly fails compiled, unexcluded",
    )
    args = parser.parse_args(argv)
    tests = funsor_tests(args.cache)
    results = {}
    failed = False
    for backend in args.backend:
        runs = run_suites(tests, backend, args.files, args.timeout)
        results[backend], backend_failed = summarize(backend, runs, args.timeout)
        failed = failed or backend_failed
    if args.write:
        pathlib.Path(args.write).write_text(markdown(results, funsor.__version__))
    return 1 if args.check and failed else 0


def markdown(results, version):
    """``docs/conformance.md``: a table per backend, then the exclusions."""
    lines = [
        "# Conformance: funsor's own test suite, compiled",
        "",
        f"funsor {version}'s test files, from its source distribution, run by",
        "`python -m funsor_lowering conformance` twice per backend: eagerly, and",
        "with funsor's functions under test wrapped by `funsor_lowering.jit`",
        "(the list: `funsor_lowering/conformance/wrapped.py`). Columns:",
        "",
        "- *tests*: collected; *eager*: passed eagerly (xfail and skip excluded);",
        "- *compiled*: of those, passed with the wrapped functions compiled;",
        "- *ran compiled*: passed with at least one wrapped call running a",
        "  compiled program (other tests call no wrapped function, or call them",
        "  under `lazy` / `reflect` / `moment_matching`, where `jit` runs them",
        "  as written);",
        "- *excluded*: fail compiled, named with a reason below.",
        "",
    ]
    for backend, result in results.items():
        lines += _backend_section(backend, result)
    lines += ["## Exclusions", ""]
    if not EXCLUDED:
        lines.append("None.")
    for pattern, (backends, reason) in EXCLUDED.items():
        lines.append(f"- `{pattern}` ({', '.join(backends)}): {reason}")
    return "\n".join(lines) + "\n"


def _backend_section(backend, result):
    """One backend's table (and its failures) for :func:`markdown`."""
    if result is None:
        return [
            f"## {backend}",
            "",
            "Not in the last run: it was stopped at the time limit "
            "(`--timeout`) before any test finished in both runs.",
            "",
        ]
    files, regressions, unexpected, eager_s, compiled_s, partial = result
    lines = [
        f"## {backend}",
        "",
        f"Eager run {eager_s:.0f} s, compiled run {compiled_s:.0f} s.",
        "",
    ]
    if partial:
        finished, collected, limit = partial
        lines += [
            f"Stopped at the time limit ({limit:.0f} s): the rows count the "
            f"{finished} of {collected} collected tests that finished in "
            "both runs.",
            "",
        ]
    lines += [
        "| file | tests | eager | compiled | ran compiled | excluded | unexpected |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    total = Counter()
    for name in sorted(files):
        total += files[name]
        lines.append(_row(name, files[name]))
    lines += [_row("**total**", total), ""]
    if regressions or unexpected:
        lines += ["Failing compiled:", ""]
        for test, error in regressions + unexpected:
            lines.append(f"- `{test}`: {_without_paths(error)[:160]}")
        lines.append("")
    return lines


def _without_paths(message):
    """``message`` with absolute file paths cut to their last two parts
    (the doc is committed: no machine's paths in it).

    >>> _without_paths("error at /usr/lib/python3.11/site-packages/x/y.py:3")
    'error at x/y.py:3'
    """
    return re.sub(r"/(?:[^/\s]+/)*([^/\s]+/[^/\s]+)", r"\1", message)


def _row(name, row):
    columns = ("tests", "eager", "compiled", "ran compiled", "excluded", "unexpected")
    return f"| {name} | " + " | ".join(str(row[c]) for c in columns) + " |"


if __name__ == "__main__":
    sys.exit(main())
