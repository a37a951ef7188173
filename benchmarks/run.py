"""Run the benchmark suite and print ratios.

    python -m benchmarks [--backend numpy|torch|jax] [--repeats 7]
    python -m benchmarks --all --write      # every backend, then RESULTS.md + PNG

Per case: median per-call time (interleaved repeats) of
- ``eager``: funsor eager, what a user pays per call (for the sum-product
  cases: lazy build, ``apply_optimizer``, eager ``reinterpret``);
- ``funsor.compiler``: funsor 0.4.8's own ``compile_funsor`` ("n/a" where it
  cannot compile the case);
- ``ours``: our ``compile_funsor`` program; ``ours jit``: ``program.jit()``;
- ``hand``: hand-written backend code (on jax also ``hand jit``: ``jax.jit``);
and the ratios ours/hand, ours jit/hand and eager/ours. Then compile time of
the HMM for T = 10, 100, 1000 (linear growth expected).
"""

import argparse
import json
import math
import os
import platform
import subprocess
import sys

if __package__ in (None, ""):  # run as a script: make the repo importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

HERE = os.path.dirname(os.path.abspath(__file__))
BACKENDS = ("numpy", "torch", "jax")


def run_case(case, repeats):
    import funsor
    import funsor.compiler

    from benchmarks.cases import TracedCase, array_lib, random_inputs
    from benchmarks.timing import interleaved_medians
    from funsor_lowering import compile_funsor

    backend = funsor.get_backend()
    arrays = random_inputs(case)
    traced = isinstance(case, TracedCase)
    ours = case.program(arrays) if traced else compile_funsor(case.symbolic())
    jitted = ours.jit()
    hand = case.hand(array_lib(backend))
    methods = {
        "eager": lambda: case.funsor_eager(**arrays),
        "ours": lambda: ours(**arrays),
        "ours jit": lambda: jitted(**arrays),
    }
    if hand is not None:
        methods["hand"] = lambda: hand(**arrays)
    if backend == "jax":
        import jax

        if hand is not None:
            hand_jit = jax.jit(hand)
            methods["hand jit"] = lambda: hand_jit(**arrays)
        for name in list(methods):  # wait for jax's async results
            if name != "eager":
                methods[name] = _blocking(methods[name])
    if not traced:  # funsor's compiler takes terms, not functions
        try:
            theirs = funsor.compiler.compile_funsor(case.symbolic())
            theirs(**arrays)
            methods["funsor.compiler"] = lambda: theirs(**arrays)
        except (NotImplementedError, TypeError, AssertionError):
            pass
    return interleaved_medians(methods, repeats=repeats)


def _blocking(fn):
    import jax

    return lambda: jax.block_until_ready(fn())


def compile_times(Ts=(10, 100, 1000)):
    # funsor's own apply_optimizer recurses once per factor (T=1000 needs
    # more than Python's default limit); our lowering is iterative.
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20_000))
    from benchmarks.cases import HMM
    from benchmarks.timing import median_time
    from funsor_lowering import compile_funsor

    results = {}
    for T in Ts:
        case = HMM(T)
        build = median_time(case.symbolic, repeats=1)  # funsor's part: slow
        expr = case.symbolic()
        results[T] = (build, median_time(lambda expr=expr: compile_funsor(expr)))
    return results


def measure(backend, repeats, with_compile_times):
    """All figures for one backend, as a JSON-able dict."""
    import funsor

    funsor.set_backend(backend)
    from benchmarks.cases import CASES

    cases = {}
    for case in CASES:
        cases[case.name] = run_case(case, repeats)
        print(f"  {backend}: {case.name} done", file=sys.stderr, flush=True)
    result = {"backend": backend, "repeats": repeats, "cases": cases}
    if with_compile_times:
        result["compile_times"] = {str(T): v for T, v in compile_times().items()}
    return result


def geomean(values):
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _ratio(a, b):
    return "n/a" if b is None else f"{a / b:.2f}"


def fmt(seconds):
    if seconds is None:
        return "n/a"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    return f"{seconds * 1e3:.2f} ms"


def table(result):
    """Markdown table of one backend's figures."""
    has_hand_jit = any("hand jit" in t for t in result["cases"].values())
    header = ["case", "eager", "funsor.compiler", "ours", "ours jit", "hand"]
    header += ["hand jit"] if has_hand_jit else []
    header += ["ours/hand", "ours jit/hand", "eager/ours"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, t in result["cases"].items():
        row = [name] + [fmt(t.get(k)) for k in header[1 : 7 if has_hand_jit else 6]]
        jit_reference = t.get("hand jit" if has_hand_jit else "hand")
        row += [
            _ratio(t["ours"], t.get("hand")),
            _ratio(t["ours jit"], jit_reference),
            f"{t['eager'] / t['ours']:.0f}x",
        ]
        lines.append("| " + " | ".join(row) + " |")
    ratios = [t["ours"] / t["hand"] for t in result["cases"].values() if "hand" in t]
    lines.append("")
    lines.append(
        f"Geometric mean of ours/hand: **{geomean(ratios):.2f}** "
        f"(over the {len(ratios)} cases with a hand-written version)."
    )
    if "compile_times" in result:
        lines.append("")
        lines.append(
            "HMM compile time (funsor's lazy build + `apply_optimizer`, once; "
        )
        lines.append("our `compile_funsor`, median of 3):")
        lines.append("")
        for T, (build, compile_) in result["compile_times"].items():
            lines.append(
                f"- T={T}: build {fmt(build)}, compile {fmt(compile_)} "
                f"({fmt(compile_ / int(T))} per step)"
            )
    return "\n".join(lines)


def machine():
    return (
        f"python {platform.python_version()}, {platform.machine()}, "
        f"{os.cpu_count()} cpus, {platform.platform()}"
    )


def write_results(results, path=os.path.join(HERE, "RESULTS.md")):
    sections = [
        "# Benchmark results",
        "",
        "Produced by `python -m benchmarks --all --write` "
        f"(medians of {results[0]['repeats']} interleaved repeats per method; "
        "ratios of medians). Machine: " + machine() + ". Shared machines are "
        "noisy: compare ratios, not absolute times.",
        "",
        "Methods: `eager` is funsor 0.4.8 evaluating eagerly per call (for the "
        "sum-product cases including the lazy build and `apply_optimizer` a "
        "funsor user pays); `funsor.compiler` is funsor 0.4.8's own compiler "
        "(n/a where it cannot compile the case); `ours` is `compile_funsor`'s "
        "program; `ours jit` is `program.jit()` (numpy: the program itself; "
        "torch: `torch.jit.trace`; jax: `jax.jit`); `hand` is hand-written "
        "backend code (jax: also `hand jit`, its `jax.jit`, the reference for "
        "`ours jit`).",
        "",
        "![ratios](results.png)",
    ]
    for result in results:
        sections += ["", f"## {result['backend']}", "", table(result)]
    with open(path, "w") as f:
        f.write("\n".join(sections) + "\n")
    chart(results, os.path.join(os.path.dirname(path), "results.png"))


def chart(results, path):
    """Bar chart of ours/hand and ours jit/hand per case and backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 4))
    axes = axes if len(results) > 1 else [axes]
    for ax, result in zip(axes, results):
        cases = {n: t for n, t in result["cases"].items() if "hand" in t}
        names = list(cases)
        ours = [t["ours"] / t["hand"] for t in cases.values()]
        jit = [t["ours jit"] / t.get("hand jit", t["hand"]) for t in cases.values()]
        xs = range(len(names))
        ax.bar([x - 0.2 for x in xs], ours, width=0.4, label="ours / hand")
        ax.bar([x + 0.2 for x in xs], jit, width=0.4, label="ours jit / hand (jit)")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.axhline(1.3, color="gray", linewidth=0.8, linestyle="--")
        ax.set_xticks(list(xs))
        ax.set_xticklabels(names, rotation=30, ha="right")
        ax.set_title(result["backend"])
        ax.set_ylabel("time ratio (lower is better)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("--backend", choices=BACKENDS, default="numpy")
    parser.add_argument("--all", action="store_true", help="every backend")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--no-compile-times", action="store_true")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--write", action="store_true", help="write RESULTS.md and results.png"
    )
    args = parser.parse_args(argv)

    if args.all:
        # one process per backend: funsor cannot switch back from jax
        results = []
        for backend in BACKENDS:
            command = [sys.executable, "-m", "benchmarks", "--backend", backend]
            command += ["--repeats", str(args.repeats), "--json"]
            if args.no_compile_times or backend != "numpy":
                command.append("--no-compile-times")
            out = subprocess.run(
                command,
                check=True,
                capture_output=True,
                text=True,
                cwd=os.path.dirname(HERE),
            ).stdout
            results.append(json.loads(out))
    else:
        results = [measure(args.backend, args.repeats, not args.no_compile_times)]
        if args.json:
            print(json.dumps(results[0]))
            return
    print(f"machine: {machine()}; medians of {args.repeats} interleaved repeats")
    for result in results:
        print(f"\n## {result['backend']}\n")
        print(table(result))
    if args.write:
        write_results(results)
        print(f"\nwrote {os.path.join(HERE, 'RESULTS.md')} and results.png")


if __name__ == "__main__":
    main()
