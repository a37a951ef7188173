"""A pytest plugin (loaded by conftest.py) that runs marked tests each in a
forked child process, so that a crash of the interpreter (a segfault in
``torch.jit.trace``, say) fails that test and the run goes on. The child
runs the test's setup, call and teardown and sends its reports back through
pytest's own report serialization (the hooks pytest-xdist uses); a child
that dies without sending them gives a failed report naming its signal or
exit status. POSIX only; elsewhere marked tests run in-process.

Mark a test (or a module, with ``pytestmark``) with ``@pytest.mark.forked``.
"""

import json
import os
import signal
import tempfile

import pytest
from _pytest.runner import runtestprotocol


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "forked: run the test in a forked child process (crash-safe)"
    )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    if item.get_closest_marker("forked") is None or not hasattr(os, "fork"):
        return None
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    for report in _reports_of_a_child(item):
        item.ihook.pytest_runtest_logreport(report=report)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def _reports_of_a_child(item):
    hook, config = item.config.hook, item.config
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "reports.json")
        pid = os.fork()
        if pid == 0:  # the child: run, write the reports, leave at once
            status = 1
            try:
                reports = runtestprotocol(item, log=False)
                data = [
                    hook.pytest_report_to_serializable(config=config, report=r)
                    for r in reports
                ]
                with open(path, "w") as file:
                    json.dump(data, file)
                status = 0
            finally:
                os._exit(status)
        _, status = os.waitpid(pid, 0)
        if os.path.exists(path):
            with open(path) as file:
                data = json.load(file)
            return [
                hook.pytest_report_from_serializable(config=config, data=d)
                for d in data
            ]
    return [_crash_report(item, status)]


def _crash_report(item, status):
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        how = f"CRASHED with signal {number} ({signal.Signals(number).name})"
    else:
        how = f"EXITED with status {os.WEXITSTATUS(status)} before reporting"
    return pytest.TestReport(
        nodeid=item.nodeid,
        location=item.location,
        keywords={name: 1 for name in item.keywords},
        outcome="failed",
        longrepr=f"{item.nodeid}: the test's process {how}",
        when="call",
    )
