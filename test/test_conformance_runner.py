"""The conformance runner on tiny test folders (funsor's suite itself runs
in the tox env ``conformance``): reports come back per mode, test by test;
a run stopped at the time limit keeps the tests it finished, says so in
the table, and fails ``--check``'s condition rather than passing."""

from funsor_lowering.conformance import runner


def write_tests(tmp_path, body):
    tests = tmp_path / "funsor-x" / "test"
    tests.mkdir(parents=True)
    (tests / "test_tiny.py").write_text(body)
    return tests


def test_runs_report_each_test_eagerly_and_compiled(tmp_path):
    tests = write_tests(tmp_path, "def test_one():\n    assert 1 + 1 == 2\n")
    runs = runner.run_suites(tests, "numpy", ["test_tiny.py"], timeout=300)
    for mode in runner.MODES:
        run = runs[mode]
        assert [r["outcome"] for r in run.records.values()] == ["passed"]
        assert run.collected == 1 and not run.stopped and run.seconds > 0


SLOW_SECOND_TEST = """\
import time

def test_quick():
    assert True

def test_failing():
    assert 1 == 2

def test_slow():
    time.sleep(300)
"""


def test_a_stopped_run_keeps_the_tests_it_finished(tmp_path, capsys):
    tests = write_tests(tmp_path, SLOW_SECOND_TEST)
    runs = runner.run_suites(tests, "numpy", ["test_tiny.py"], timeout=45)
    for mode in runner.MODES:
        run = runs[mode]
        assert run.stopped and run.collected == 3
        outcomes = {t.split("::")[-1]: r["outcome"] for t, r in run.records.items()}
        assert outcomes == {"test_quick": "passed", "test_failing": "failed"}
    result, failed = runner.summarize("numpy", runs, 45)
    assert failed  # a stopped run never passes --check
    assert "STOPPED" in capsys.readouterr().out
    page = runner.markdown({"numpy": result}, "0.4.8")
    assert "the 2 of 3 collected tests that finished in both runs" in page
    assert "| test_tiny.py | 2 | 1 | 1 |" in page


def test_a_run_stopped_before_any_test_finished_has_no_results(tmp_path):
    tests = write_tests(
        tmp_path, "import time\n\ndef test_slow():\n    time.sleep(60)\n"
    )
    runs = runner.run_suites(tests, "numpy", ["test_tiny.py"], timeout=3)
    assert all(runs[mode].records == {} for mode in runner.MODES)
    result, failed = runner.summarize("numpy", runs, 3)
    assert result is None and failed
    page = runner.markdown({"numpy": None}, "0.4.8")
    assert "## numpy" in page and "stopped at the time limit" in page
