"""Calls that alternate between input dtypes (call signatures) against calls
of one signature: the cost of the program's signature table.

    python -m benchmarks.signatures [--backend numpy|torch|jax] [--repeats 9]
    python -m benchmarks.signatures --all --write   # RESULTS_signatures.md

For HMM programs of two sizes, the median per-call time (interleaved
repeats) of calls that alternate float64 and float32 inputs (float32 and
float16 on jax), against the mean of the two single-signature medians. The
ratio should be close to 1: a signature seen before goes straight to its
generated body. Also reports whether alternating calls generated code or
grew ``linecache`` (they must not).
"""

import argparse
import linecache
import os
import subprocess
import sys

if __package__ in (None, ""):  # run as a script: make the repo importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

HERE = os.path.dirname(os.path.abspath(__file__))
DTYPES = {"numpy": ("float64", "float32"), "torch": ("float64", "float32")}
DTYPES["jax"] = ("float32", "float16")


def _arrays(case, dtype):
    import funsor
    import numpy as np

    from benchmarks.cases import random_inputs

    arrays = random_inputs(case)
    out = {}
    for name, value in arrays.items():
        data = np.asarray(value if funsor.get_backend() != "torch" else value.numpy())
        data = data.astype(dtype)
        if funsor.get_backend() == "torch":
            import torch

            data = torch.as_tensor(data)
        elif funsor.get_backend() == "jax":
            import jax.numpy as jnp

            data = jnp.asarray(data)
        out[name] = data
    return out


def measure(backend, repeats):
    import funsor

    funsor.set_backend(backend)
    from benchmarks.cases import HMM
    from benchmarks.timing import interleaved_medians
    from funsor_lowering import compile_funsor

    block = _blocker(backend)
    rows = []
    for T in (12, 300):
        case = HMM(T)
        program = compile_funsor(case.symbolic())
        first, second = (_arrays(case, d) for d in DTYPES[backend])
        program(**first), program(**second)
        cached = len(linecache.cache)
        state = {"flip": False}

        def alternating(program=program, first=first, second=second, state=state):
            state["flip"] = not state["flip"]
            return block(program(**(first if state["flip"] else second)))

        times = interleaved_medians(
            {
                "first": lambda p=program, a=first, b=block: b(p(**a)),
                "second": lambda p=program, a=second, b=block: b(p(**a)),
                "alternating": alternating,
            },
            repeats=repeats,
        )
        single = (times["first"] + times["second"]) / 2
        rows.append(
            {
                "case": case.name,
                "operations": len(program.operations),
                "single_us": single * 1e6,
                "alternating_us": times["alternating"] * 1e6,
                "ratio": times["alternating"] / single,
                "linecache_growth": len(linecache.cache) - cached,
                "cache": program.cache_info(),
            }
        )
    return rows


def _blocker(backend):
    if backend == "jax":
        import jax

        return jax.block_until_ready
    return lambda x: x


def table(backend, rows):
    lines = [
        f"### {backend} ({' / '.join(DTYPES[backend])})",
        "",
        "| case | operations | one signature | alternating | ratio "
        "| linecache growth |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['case']} | {r['operations']} | {r['single_us']:.1f} us | "
            f"{r['alternating_us']:.1f} us | {r['ratio']:.2f} | "
            f"{r['linecache_growth']} |"
        )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.signatures")
    parser.add_argument("--backend", choices=sorted(DTYPES), default="numpy")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--all", action="store_true", help="every backend")
    parser.add_argument("--write", action="store_true", help="RESULTS_signatures.md")
    args = parser.parse_args(argv)
    if not args.all:
        print(table(args.backend, measure(args.backend, args.repeats)))
        return
    parts = []
    for backend in ("numpy", "torch", "jax"):  # one process each (funsor backend)
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.signatures",
                "--backend",
                backend,
                "--repeats",
                str(args.repeats),
            ],
            capture_output=True,
            text=True,
            check=True,
            cwd=os.path.dirname(HERE),
        )
        parts.append(result.stdout.strip())
        print(parts[-1], flush=True)
    if args.write:
        header = [
            "# Alternating call signatures",
            "",
            "`python -m benchmarks.signatures --all --write`: medians of "
            "interleaved repeats; ratio = alternating / mean of the two "
            "single-signature medians (target: at most 1.2).",
            "",
        ]
        path = os.path.join(HERE, "RESULTS_signatures.md")
        with open(path, "w") as f:
            f.write("\n".join(header + ["\n\n".join(parts)]) + "\n")


if __name__ == "__main__":
    main()
