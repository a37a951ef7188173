"""The conformance runner on tiny test folders (funsor's suite itself runs
in the tox env ``conformance``): reports come back per mode, and a run
stopped at the time limit reports no results and fails ``--check``'s
condition rather than passing with an empty table."""

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
        records, seconds = runs[mode]
        assert [r["outcome"] for r in records.values()] == ["passed"]
        assert seconds > 0


def test_a_run_stopped_at_the_time_limit_has_no_results(tmp_path):
    tests = write_tests(
        tmp_path, "import time\n\ndef test_slow():\n    time.sleep(60)\n"
    )
    runs = runner.run_suites(tests, "numpy", ["test_tiny.py"], timeout=3)
    assert all(runs[mode][0] is None for mode in runner.MODES)
    page = runner.markdown({"numpy": None}, "0.4.8")
    assert "## numpy" in page and "stopped at the time limit" in page
