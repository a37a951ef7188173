"""A pytest plugin running funsor's test files with funsor's functions under
test compiled by :func:`funsor_lowering.jit`.

Use: ``pytest -p funsor_lowering.conformance.plugin --funsor-lowering=compiled
--funsor-lowering-report=report.jsonl funsor-0.4.8/test/test_sum_product.py``.

``--funsor-lowering=compiled`` replaces each entry of
:data:`~.wrapped.WRAPPED` by ``jit(original)`` when pytest starts, before
any test file imports it; ``eager`` leaves funsor as it is (the baseline).
The plugin also does what funsor's repository's ``test/conftest.py`` does,
which its source distribution leaves out: it selects the backend named by
``FUNSOR_BACKEND``, and before each test seeds the random generators and
sets double precision (torch's default dtype, jax's x64 mode).

The report has a first line ``{"collected": N}``, then one JSON line per
test, written as soon as the test finishes (a run stopped at a time limit
keeps the tests it finished): its outcome, the first line of its error,
its seconds, and how many wrapped calls compiled a program, ran a cached
one, or ran as written (under ``lazy``, ``reflect`` ... or inside another
wrapped call being traced).
"""

import json
import os

import funsor
import numpy as np
import pytest

from ..backends import array_backend
from .wrapped import targets

_JITTED = []
_COUNTED = ("compiled", "cached", "inlined")


def pytest_addoption(parser):
    group = parser.getgroup("funsor_lowering")
    group.addoption(
        "--funsor-lowering",
        choices=("eager", "compiled"),
        default="compiled",
        help="run funsor's functions under test eagerly or compiled by jit",
    )
    group.addoption(
        "--funsor-lowering-report",
        default=None,
        help="write one JSON line per test to this file",
    )


def pytest_configure(config):
    # what funsor's repository's test/conftest.py does (its source
    # distribution ships the test files without it): the backend from
    # FUNSOR_BACKEND, before the test files are imported
    funsor.set_backend(os.environ.get("FUNSOR_BACKEND", "numpy"))
    config._funsor_lowering_outcomes = {}
    if config.getoption("funsor_lowering") == "compiled":
        wrap_all()


def pytest_runtest_setup(item):
    # ... and each test's seeds (so both runs see the same random data) and
    # dtypes: funsor's suite runs in double precision (torch's default
    # dtype float64, jax's x64 mode)
    np.random.seed(0)
    array_backend(funsor.get_backend()).prepare_funsor_test()


def wrap_all():
    """Replace every wrapped entry by ``jit(original)`` (once)."""
    if _JITTED:
        return
    from funsor_lowering import jit

    for owner, name, dotted in targets():
        jitted = jit(getattr(owner, name))
        jitted.conformance_name = dotted
        setattr(owner, name, jitted)
        _JITTED.append(jitted)


def _call_counts():
    totals = dict.fromkeys(_COUNTED, 0)
    for jitted in _JITTED:
        info = jitted.cache_info()
        for key in _COUNTED:
            totals[key] += info.get(key, 0)
    return totals


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    before = _call_counts()
    yield
    after = _call_counts()
    item._funsor_lowering_calls = {k: after[k] - before[k] for k in _COUNTED}


def pytest_runtest_logreport(report):
    record = _record(report.nodeid)
    if record is None:
        return
    record["seconds"] = round(record.get("seconds", 0.0) + report.duration, 3)
    if report.outcome == "failed" and record["outcome"] != "failed":
        record["outcome"] = "failed"
        crash = getattr(report.longrepr, "reprcrash", None)
        text = crash.message if crash is not None else str(report.longrepr)
        record["error"] = (text.strip().splitlines() or [""])[0][:300]
    elif report.outcome == "skipped" and record["outcome"] == "passed":
        record["outcome"] = "xfailed" if hasattr(report, "wasxfail") else "skipped"
    elif hasattr(report, "wasxfail") and report.outcome == "passed":
        record["outcome"] = "xpassed" if report.when == "call" else record["outcome"]


_CONFIG = []


def _record(nodeid):
    if not _CONFIG:
        return None
    outcomes = _CONFIG[0]._funsor_lowering_outcomes
    return outcomes.setdefault(nodeid, {"outcome": "passed", "error": ""})


def _write(record):
    path = _CONFIG[0].getoption("funsor_lowering_report") if _CONFIG else None
    if path:
        with open(path, "a") as out:
            out.write(json.dumps(record) + "\n")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    _CONFIG[:] = [session.config]
    path = session.config.getoption("funsor_lowering_report")
    if path:
        open(path, "w").close()


def pytest_collection_finish(session):
    _write({"collected": len(session.items)})


def pytest_runtest_teardown(item, nextitem):
    calls = getattr(item, "_funsor_lowering_calls", None)
    if calls is not None:
        _record(item.nodeid).update(calls)


def pytest_runtest_logfinish(nodeid, location):
    # each test's record as soon as its teardown is reported
    _write({"test": nodeid, **_record(nodeid)})
