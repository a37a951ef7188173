"""Medians of interleaved repeats (machines are shared and noisy)."""

import contextlib
import os
import statistics
import time


def calibrate(fn, target=0.01):
    """Calls per timing sample so one sample lasts about ``target`` seconds."""
    fn()  # warm up (first-call costs: caches, code generation)
    number = 1
    while True:
        start = time.perf_counter()
        for _ in range(number):
            fn()
        if time.perf_counter() - start >= target or number >= 100_000:
            return number
        number *= 2


def interleaved_medians(methods, repeats=7, target=0.01):
    """Median per-call seconds of each of ``methods`` (name -> callable),
    sampling the methods in turn, ``repeats`` rounds."""
    numbers = {name: calibrate(fn, target) for name, fn in methods.items()}
    samples = {name: [] for name in methods}
    for _ in range(repeats):
        for name, fn in methods.items():
            number = numbers[name]
            start = time.perf_counter()
            for _ in range(number):
                fn()
            samples[name].append((time.perf_counter() - start) / number)
    return {name: statistics.median(s) for name, s in samples.items()}


def interleaved_single_calls(methods, repeats, context=None):
    """Median seconds of single calls of each of ``methods`` (name ->
    callable; slow ones, not calibrated), sampled in turn, ``repeats``
    rounds; ``context(name)``, where given, is a context manager each call
    runs in (outside the timing)."""
    samples = {name: [] for name in methods}
    for _ in range(repeats):
        for name, fn in methods.items():
            with context(name) if context else contextlib.nullcontext():
                start = time.perf_counter()
                fn()
                samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(s) for name, s in samples.items()}


def median_time(fn, repeats=3):
    """Median seconds of single calls of ``fn`` (for slow one-off work)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


class Report:
    """A benchmark's results: lines printed as they come (tables of rows)
    and kept, to be written to a ``RESULTS_*.md`` file beside this one."""

    def __init__(self):
        self.lines = []

    def __call__(self, line=""):
        print(line, flush=True)
        self.lines.append(line)

    def row(self, cells):
        self("| " + " | ".join(cells) + " |")

    def header(self, cells):
        self.row(cells)
        self("|" + "---|" * len(cells))

    def write(self, name, title):
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
        with open(path, "w") as f:
            f.write(f"# {title}\n\n" + "\n".join(self.lines) + "\n")
