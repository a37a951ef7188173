"""Batching and sharding: per-call time of ``program.vmap`` against a
Python loop over the batch, and of a jitted jax program on inputs sharded
over 1, 2, 4 and 8 host devices.

    python -m benchmarks.batching [--write]

The vmap table runs on numpy, torch and jax (one process each: funsor
cannot switch back from jax); the sharding table in one process with
``XLA_FLAGS=--xla_force_host_platform_device_count=8``. Medians of
interleaved repeats; ratios in one run.
"""

import argparse
import json
import os
import subprocess
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = (1, 10, 100, 1000)
CASE_NAMES = ("hmm_T10", "kalman_T10")


def measure_vmap(backend, repeats):
    import funsor

    funsor.set_backend(backend)
    import numpy as np

    from benchmarks.cases import CASES, TracedCase, random_inputs
    from benchmarks.timing import interleaved_medians
    from funsor_lowering import compile_funsor

    rows = []
    for name in CASE_NAMES:
        case = next(c for c in CASES if c.name == name)
        arrays = random_inputs(case)
        traced = isinstance(case, TracedCase)
        program = case.program(arrays) if traced else compile_funsor(case.symbolic())
        first = program.inputs[0]  # batched; the others shared
        batched = program.vmap({k: (0 if k == first else None) for k in program.inputs})
        for size in SIZES:
            data = dict(arrays)
            data[first] = _stack([arrays[first] * (1 + 0.01 * i) for i in range(size)])
            members = [{**arrays, first: data[first][i]} for i in range(size)]
            vmapped = batched.for_size(size)

            def loop(members=members, program=program):
                return [program(**m) for m in members]

            methods = {"loop": loop, "vmap": lambda d=data, v=vmapped: v(**d)}
            if backend == "jax":
                import jax

                methods = {
                    k: (lambda f=f: jax.block_until_ready(f()))
                    for k, f in methods.items()
                }
            times = interleaved_medians(methods, repeats=repeats)
            np.testing.assert_allclose(
                np.asarray(vmapped(**data)),
                np.stack([np.asarray(x) for x in loop()]),
                rtol=1e-4,
                atol=1e-4,
            )
            rows.append(
                {
                    "case": name,
                    "size": size,
                    "operations": len(vmapped.operations),
                    **times,
                }
            )
    return rows


def _stack(values):
    import funsor

    if funsor.get_backend() == "torch":
        import torch

        return torch.stack(values)
    if funsor.get_backend() == "jax":
        import jax.numpy as jnp

        return jnp.stack(values)
    import numpy as np

    return np.stack(values)


def measure_sharding(repeats, particles=4096):
    """A vmapped Kalman filter over ``particles`` parameter sets, jitted,
    its batched input sharded over the first 1, 2, 4, 8 devices."""
    import funsor

    funsor.set_backend("jax")
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from benchmarks.cases import Kalman, random_inputs
    from benchmarks.timing import interleaved_medians

    case = Kalman(10)
    arrays = random_inputs(case)
    program = case.program(arrays)
    batched = program.vmap({k: (0 if k == "w" else None) for k in program.inputs})
    jitted = batched.jit()
    noise = np.random.RandomState(0).randn(particles, *arrays["w"].shape)
    w = (np.asarray(arrays["w"]) + 0.1 * noise).astype(np.float32)
    expected = np.asarray(batched(**{**arrays, "w": w}))
    methods = {}
    for count in (1, 2, 4, 8):
        mesh = Mesh(np.array(jax.devices()[:count]), ("particles",))
        data = {
            k: jax.device_put(v, NamedSharding(mesh, P()))
            for k, v in arrays.items()
            if k != "w"
        }
        data["w"] = jax.device_put(w, NamedSharding(mesh, P("particles")))
        out = jitted(**data)
        np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-4, atol=1e-4)
        methods[count] = lambda d=data: jax.block_until_ready(jitted(**d))
    times = interleaved_medians(methods, repeats=repeats)
    return {"particles": particles, "times": {str(k): v for k, v in times.items()}}


def fmt(seconds):
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"


def run_child(args):
    env = dict(os.environ)
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.batching", *args],
        check=True,
        capture_output=True,
        text=True,
        cwd=os.path.dirname(HERE),
        env=env,
    ).stdout
    return json.loads(out)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.batching")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child == "sharding":
        print(json.dumps(measure_sharding(args.repeats)))
        return
    if args.child:
        print(json.dumps(measure_vmap(args.child, args.repeats)))
        return

    lines = [
        "# Batching and sharding",
        "",
        f"`python -m benchmarks.batching{' --write' if args.write else ''}`: "
        f"medians of {args.repeats} interleaved repeats, {os.cpu_count()} cpus.",
        "",
        "## `program.vmap` against a Python loop",
        "",
        "The first input batched, the others shared; `loop` calls the program "
        "once per member, `vmap` calls the batched program once (its operation "
        "count does not depend on the batch size).",
        "",
        "| backend | case | batch | operations | loop | vmap | loop/vmap |",
        "|---|---|---|---|---|---|---|",
    ]
    for backend in ("numpy", "torch", "jax"):
        for r in run_child(["--child", backend, "--repeats", str(args.repeats)]):
            lines.append(
                f"| {backend} | {r['case']} | {r['size']} | {r['operations']} | "
                f"{fmt(r['loop'])} | {fmt(r['vmap'])} | {r['loop'] / r['vmap']:.1f}x |"
            )
    sharding = run_child(["--child", "sharding", "--repeats", str(args.repeats)])
    base = sharding["times"]["1"]
    lines += [
        "",
        "## Sharding over host devices (jax)",
        "",
        f"A vmapped Kalman filter (T=10) over {sharding['particles']} parameter "
        "sets, under `jit`, its batched input sharded over the first N of 8 "
        "host devices (`NamedSharding`); time ratio against one device. The "
        f"host devices share this machine's {os.cpu_count()} cpus.",
        "",
        "| devices | per call | 1 device / N devices |",
        "|---|---|---|",
    ]
    for count, seconds in sharding["times"].items():
        lines.append(f"| {count} | {fmt(seconds)} | {base / seconds:.2f}x |")
    text = "\n".join(lines)
    print(text)
    if args.write:
        with open(os.path.join(HERE, "RESULTS_batching.md"), "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
