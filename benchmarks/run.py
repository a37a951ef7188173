"""Run the benchmark suite and print ratios.

    python -m benchmarks [--backend numpy|torch|jax] [--repeats 7]
    python -m benchmarks --all --write      # every backend and the scale
                                            # benchmarks, then RESULTS.md + PNG

Per case: median per-call time (interleaved repeats) of
- ``eager``: funsor eager, what a user pays per call (for the sum-product
  cases: lazy build, ``apply_optimizer``, eager ``reinterpret``);
- ``funsor.compiler``: funsor 0.4.8's own ``compile_funsor`` ("n/a" where it
  cannot compile the case);
- ``ours``: our ``compile_funsor`` program; ``ours jit``: ``program.jit()``;
  torch: ``ours compile``: ``program.jit(compiler="compile")``;
- ``hand``: hand-written code that follows the computation's structure;
  ``hand fast``: what a performance-minded person would write (fewest
  calls, vectorized where possible), where it differs;
- jax: ``hand jit`` / ``hand fast jit`` (``jax.jit``) and ``hand scan jit``
  (a ``jax.lax.scan`` version, jitted); torch: ``hand compile``
  (``torch.compile`` of the fastest hand-written version);
then the ratios of ours to the best hand-written code (not compiled) and of
ours jit to the best hand-written code (compiled or not), and the backend
calls of each (``benchmarks/calls.py``). Then compile time of the HMM for
T = 10, 100, 1000 (linear growth expected). With ``--all --write``, also
the scale benchmarks (``benchmarks.lazy_chains``: HMMs up to T = 10,000;
``benchmarks.autogaussian``: Pyro's AutoGaussian), included in RESULTS.md.
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
    """Per-call medians of every method on one case, and backend calls."""
    import funsor
    import funsor.compiler

    from benchmarks.calls import count_calls
    from benchmarks.cases import TracedCase, array_lib, random_inputs
    from benchmarks.timing import interleaved_medians
    from funsor_lowering import compile_funsor

    backend = funsor.get_backend()
    arrays = random_inputs(case)
    traced = isinstance(case, TracedCase)
    ours = case.program(arrays) if traced else compile_funsor(case.symbolic())
    jitted = ours.jit()
    lib = array_lib(backend)
    hands = {"hand": case.hand(lib), "hand fast": case.hand_fast(lib)}
    hands = {k: v for k, v in hands.items() if v is not None}
    methods = {
        "eager": lambda: case.funsor_eager(**arrays),
        "ours": lambda: ours(**arrays),
        "ours jit": lambda: jitted(**arrays),
    }
    if backend == "torch":  # program.jit(compiler="compile") beside trace
        compiled = ours.jit(compiler="compile")
        methods["ours compile"] = lambda: compiled(**arrays)
    methods.update(_calling(hands, arrays))
    methods.update(_calling(jitted_hands(case, hands, backend), arrays))
    if backend == "jax":
        from funsor_lowering.backends.jax_tiering import HOT_CALLS

        for _ in range(HOT_CALLS + 1):  # a program called in a loop, from
            ours(**arrays)  # when its ops are compiled (jax_tiering)
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
    times = interleaved_medians(methods, repeats=repeats)
    calls = {"ours": count_calls(ours, arrays, backend)}
    calls.update((k, count_calls(v, arrays, backend)) for k, v in hands.items())
    return {"times": times, "calls": calls, "operations": len(ours.operations)}


def jitted_hands(case, hands, backend):
    """The hand-written versions compiled by the backend: ``jax.jit`` of
    each, and of its ``jax.lax.scan`` version; ``torch.compile`` of the
    fastest one (the performance-minded version where there is one)."""
    if backend == "jax":
        import jax

        jitted = {f"{k} jit": jax.jit(v) for k, v in hands.items()}
        scan = case.hand_scan()
        if scan is not None:
            jitted["hand scan jit"] = jax.jit(scan)
        return jitted
    if backend == "torch":
        import torch

        fastest = hands.get("hand fast", hands["hand"])
        return {"hand compile": torch.compile(fastest)}
    return {}


def _calling(functions, arrays):
    return {k: (lambda f=f: f(**arrays)) for k, f in functions.items()}


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


def measure(backend, repeats, with_compile_times, names=None):
    """All figures for one backend (its cases named ``names``, default all),
    as a JSON-able dict."""
    import funsor

    funsor.set_backend(backend)
    from benchmarks.cases import CASES

    cases = {}
    for case in CASES:
        if names and case.name not in names:
            continue
        cases[case.name] = run_case(case, repeats)
        print(f"  {backend}: {case.name} done", file=sys.stderr, flush=True)
    result = {"backend": backend, "repeats": repeats, "cases": cases}
    if with_compile_times:
        result["compile_times"] = {str(T): v for T, v in compile_times().items()}
    return result


def geomean(values):
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values))


OURS = ("ours", "ours jit", "ours compile")
HAND = ("hand", "hand fast")
HAND_JIT = ("hand jit", "hand fast jit", "hand scan jit", "hand compile")


def best(times, names):
    """``(name, seconds)`` of the fastest of ``names`` measured, or None."""
    measured = [(times[n], n) for n in names if n in times]
    return None if not measured else min(measured)[::-1]


def best_jit_reference(times):
    """The fastest hand-written code: jitted (jax, torch) or not."""
    return best(times, HAND + HAND_JIT)


def fmt(seconds):
    if seconds is None:
        return "n/a"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    return f"{seconds * 1e3:.2f} ms"


def table(result):
    """Markdown tables of one backend's figures: times, then ratios and
    backend calls."""
    cases = result["cases"]
    columns = ["eager", "funsor.compiler", *OURS, *HAND, *HAND_JIT]
    columns = [c for c in columns if any(c in r["times"] for r in cases.values())]
    lines = _markdown(
        ["case"] + columns,
        [[n] + [fmt(r["times"].get(c)) for c in columns] for n, r in cases.items()],
    )
    rows, ours_ratios, jit_ratios = [], [], []
    for name, r in cases.items():
        t = r["times"]
        hand_name, hand_time = best(t, HAND)
        jit_name, jit_time = best_jit_reference(t)
        ours_jit_name, ours_jit_time = best(t, OURS[1:])
        ours_ratios.append(t["ours"] / hand_time)
        jit_ratios.append(ours_jit_time / jit_time)
        calls = r["calls"]
        rows.append(
            [
                name,
                f"{ours_ratios[-1]:.2f} ({hand_name})",
                f"{jit_ratios[-1]:.2f} ({ours_jit_name} / {jit_name})",
                f"{t['eager'] / t['ours']:.0f}x",
                str(r["operations"]),
                str(calls["ours"]),
                " / ".join(str(calls[k]) for k in HAND if k in calls),
            ]
        )
    lines += [""] + _markdown(
        [
            "case",
            "ours / best hand",
            "ours jit (best) / best hand (any)",
            "eager / ours",
            "operations",
            "calls: ours",
            "calls: hand / hand fast",
        ],
        rows,
    )
    lines += [
        "",
        f"Geometric mean of ours / best hand-written (not compiled): "
        f"**{geomean(ours_ratios):.2f}**; worst case "
        f"{max(ours_ratios):.2f}. Of ours jit (the faster of `jit()` and, on "
        f'torch, `jit(compiler="compile")`) / best hand-written (compiled '
        f"or not): **{geomean(jit_ratios):.2f}**; worst case "
        f"{max(jit_ratios):.2f}.",
    ]
    if "compile_times" in result:
        lines += [
            "",
            "HMM compile time (funsor's lazy build + `apply_optimizer`, once; "
            "our `compile_funsor`, median of 3):",
            "",
        ]
        for T, (build, compile_) in result["compile_times"].items():
            lines.append(
                f"- T={T}: build {fmt(build)}, compile {fmt(compile_)} "
                f"({fmt(compile_ / int(T))} per step)"
            )
    return "\n".join(lines)


def _markdown(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


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
        "program (jax: called in a loop, after its first 100 calls, from when "
        "its ops run as jitted kernels); `ours jit` is `program.jit()` "
        "(numpy: the program itself; "
        "torch: `torch.jit.trace`; jax: `jax.jit`); torch: `ours compile` is "
        '`program.jit(compiler="compile")` (`torch.compile`). `hand` is hand-written '
        "backend code that follows the computation's structure; `hand fast` "
        "is what a performance-minded person would write (fewest calls, "
        "vectorized where possible: constants folded, transitions transposed "
        "once, every Kalman step's information form computed at once and one "
        "factorization per step); jax: `... jit` is `jax.jit` of it and "
        "`hand scan jit` a jitted `jax.lax.scan` version; torch: `hand "
        "compile` is `torch.compile` of the fastest hand-written version. "
        "Ratios compare ours with the fastest hand-written version (not "
        "compiled) and ours jit with the fastest hand-written version, "
        "compiled or not. Calls are backend calls of one call, counted by "
        "`benchmarks/calls.py` (numpy: ufuncs, functions, indexing and "
        "methods; torch: torch functions; jax: jaxpr equations).",
        "",
        "![ratios](results.png)",
    ]
    for result in results:
        sections += ["", f"## {result['backend']}", "", table(result)]
    sections += scale_sections(os.path.dirname(path))
    with open(path, "w") as f:
        f.write("\n".join(sections) + "\n")
    chart(results, os.path.join(os.path.dirname(path), "results.png"))


# The scale benchmarks: each writes its own RESULTS file, which RESULTS.md
# includes (section title, module, file).
SCALE = (
    (
        "HMMs and chains at T = 10 ... 10,000",
        "benchmarks.lazy_chains",
        "RESULTS_lazy_chains.md",
    ),
    (
        "AutoGaussian on a pyro-cov model",
        "benchmarks.autogaussian",
        "RESULTS_autogaussian.md",
    ),
    (
        "Batching (program.vmap) and sharding over host devices",
        "benchmarks.batching",
        "RESULTS_batching.md",
    ),
    (
        "Enumerated HMMs: Pyro's hmm.py models",
        "benchmarks.enum_hmm",
        "RESULTS_enum.md",
    ),
    (
        "First use in a fresh process",
        "benchmarks.first_use",
        "RESULTS_first_use.md",
    ),
    (
        "One log-space contraction step",
        "benchmarks.logspace_steps",
        "RESULTS_logspace_steps.md",
    ),
)


def run_scale_benchmarks():
    """Run each scale benchmark with ``--write`` (one process each)."""
    for _, module, _ in SCALE:
        print(f"running python -m {module} --write", file=sys.stderr, flush=True)
        subprocess.run(
            [sys.executable, "-m", module, "--write"],
            check=True,
            cwd=os.path.dirname(HERE),
            stdout=subprocess.DEVNULL,
        )


def scale_sections(directory):
    """The scale benchmarks' results, read from their files."""
    sections = ["", "## Scale"]
    for title, module, name in SCALE:
        path = os.path.join(directory, name)
        if not os.path.exists(path):
            continue
        with open(path) as f:
            body = f.read().split("\n", 1)[1].strip()  # without its title
        # its sections become subsections of this one
        body = "\n".join(
            "##" + line if line.startswith("## ") else line
            for line in body.splitlines()
        )
        sections += ["", f"### {title}", "", f"From `python -m {module} --write`:"]
        sections += ["", body]
    return sections


def chart(results, path):
    """Bar chart of ours / best hand-written and ours jit / best hand-written
    (compiled or not) per case and backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 4))
    axes = axes if len(results) > 1 else [axes]
    for ax, result in zip(axes, results):
        cases = result["cases"]
        names = list(cases)
        ours = [r["times"]["ours"] / best(r["times"], HAND)[1] for r in cases.values()]
        jit = [
            best(r["times"], OURS[1:])[1] / best_jit_reference(r["times"])[1]
            for r in cases.values()
        ]
        xs = range(len(names))
        ax.bar([x - 0.2 for x in xs], ours, width=0.4, label="ours / best hand")
        ax.bar([x + 0.2 for x in xs], jit, width=0.4, label="ours jit / best (any)")
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
    parser.add_argument("--cases", nargs="*", help="case names (default: all)")
    parser.add_argument(
        "--no-scale",
        action="store_true",
        help="with --all --write: keep the scale results as they are",
    )
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
        results = [
            measure(args.backend, args.repeats, not args.no_compile_times, args.cases)
        ]
        if args.json:
            print(json.dumps(results[0]))
            return
    print(f"machine: {machine()}; medians of {args.repeats} interleaved repeats")
    for result in results:
        print(f"\n## {result['backend']}\n")
        print(table(result))
    if args.write:
        if args.all and not args.no_scale:
            run_scale_benchmarks()
        write_results(results)
        print(f"\nwrote {os.path.join(HERE, 'RESULTS.md')} and results.png")


if __name__ == "__main__":
    main()
