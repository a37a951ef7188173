"""Run the benchmark suite and print ratios.

    python -m benchmarks [--backend numpy|torch|jax] [--repeats 7]
    python benchmarks/run.py --backend torch

Per case: median per-call time (interleaved repeats) of
- ``eager``: funsor eager, what a user pays per call (lazy build of the
  sum_product, ``apply_optimizer``, eager ``reinterpret``);
- ``funsor.compiler``: funsor 0.4.8's own ``compile_funsor`` ("n/a" where it
  cannot compile the case);
- ``compiled``: our ``compile_funsor`` program;
- ``hand``: hand-written backend code;
and the ratios compiled/hand and eager/compiled. Then compile time of the
HMM for T = 10, 100, 1000 (linear growth expected).
"""

import argparse
import os
import platform
import sys

if __package__ in (None, ""):  # run as a script: make the repo importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_case(case, repeats):
    import funsor
    import funsor.compiler

    from benchmarks.cases import array_lib, random_inputs
    from benchmarks.timing import interleaved_medians
    from funsor_lowering import compile_funsor

    arrays = random_inputs(case)
    expr = case.symbolic()
    ours = compile_funsor(expr)
    hand = case.hand(array_lib(funsor.get_backend()))
    methods = {
        "eager": lambda: case.funsor_eager(**arrays),
        "compiled": lambda: ours(**arrays),
        "hand": lambda: hand(**arrays),
    }
    try:
        theirs = funsor.compiler.compile_funsor(expr)
        theirs(**arrays)
        methods["funsor.compiler"] = lambda: theirs(**arrays)
    except NotImplementedError:
        pass
    return interleaved_medians(methods, repeats=repeats)


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


def fmt(seconds):
    if seconds is None:
        return "n/a"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    return f"{seconds * 1e3:.2f} ms"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("--backend", choices=["numpy", "torch", "jax"], default="numpy")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--no-compile-times", action="store_true")
    args = parser.parse_args(argv)

    import funsor

    funsor.set_backend(args.backend)
    from benchmarks.cases import CASES

    print(
        f"backend: {args.backend}; python {platform.python_version()}; "
        f"{platform.machine()}, {os.cpu_count()} cpus; medians of {args.repeats} "
        f"interleaved repeats"
    )
    header = (
        "case",
        "eager",
        "funsor.compiler",
        "compiled",
        "hand",
        "compiled/hand",
        "eager/compiled",
    )
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for case in CASES:
        t = run_case(case, args.repeats)
        row = (
            case.name,
            fmt(t["eager"]),
            fmt(t.get("funsor.compiler")),
            fmt(t["compiled"]),
            fmt(t["hand"]),
            f"{t['compiled'] / t['hand']:.2f}",
            f"{t['eager'] / t['compiled']:.1f}",
        )
        print("| " + " | ".join(row) + " |")
        sys.stdout.flush()

    if not args.no_compile_times:
        times = compile_times()
        print("\nhmm compile time: funsor's lazy build + apply_optimizer (once), then")
        print("our compile_funsor (median of 3), and compile time per time step:")
        for T, (build, compile_) in times.items():
            print(
                f"  T={T:5d}: build {fmt(build):>10}, compile {fmt(compile_):>10}"
                f"  ({fmt(compile_ / T)} per step)"
            )


if __name__ == "__main__":
    main()
