"""Long chains built lazily outside a compiling block, then compiled; and,
for scale, an HMM with emission factors compiled by ``compile_function``.

A funsor user who builds ``sequential_sum_product`` under ``lazy`` gets a
term funsor has already unrolled (one contraction per step, a tree of depth
log T). ``compile_funsor`` batches the tree's isomorphic operations level by
level (``program/vectorize.py``), so the program's length grows like
log T. Printed per T: funsor's lazy build (once), our compile time, the
program's operations, and per-call time against funsor evaluating
``sequential_sum_product`` eagerly on the same arrays (medians of
interleaved repeats)::

    python -m benchmarks.lazy_chains [--write]
"""

import argparse
import os
import time

import funsor
import numpy as np
from funsor import ops
from funsor.domains import Bint, Reals
from funsor.interpretations import lazy
from funsor.sum_product import MarkovProduct, sequential_sum_product
from funsor.tensor import Tensor
from funsor.terms import Variable

from benchmarks.timing import Report, interleaved_medians

S = 3  # hidden states
HERE = os.path.dirname(os.path.abspath(__file__))


def chain(trans, T):
    """The log-partition function of a chain with ``trans`` factors."""
    time = Variable("time", Bint[T])
    result = sequential_sum_product(
        ops.logaddexp, ops.add, trans, time, {"prev": "curr"}
    )
    return result.reduce(ops.logaddexp, frozenset({"prev", "curr"}))


def symbolic_chain(T, how):
    trans = Variable("trans", Reals[T, S, S])["time", "prev", "curr"]
    with lazy:
        if how == "sequential_sum_product":
            return chain(trans, T)
        product = MarkovProduct(ops.logaddexp, ops.add, trans, "time", {"prev": "curr"})
        return product.reduce(ops.logaddexp, frozenset({"prev", "curr"}))


def hmm(T):
    """An HMM with emission factors, as funsor code: a function of funsors."""

    def log_likelihood(trans, emit):
        factor = trans["time", "prev", "curr"] + emit["time", "curr"]
        return chain(factor, T)

    return log_likelihood


def measure(T, how, repeats):
    from benchmarks.calls import count_calls
    from funsor_lowering import compile_function, compile_funsor

    rng = np.random.RandomState(0)
    data = {"trans": rng.randn(T, S, S), "emit": rng.randn(T, S)}
    start = time.perf_counter()
    if how == "compile_function":  # no lazy build: the function runs once
        build, fn = 0.0, hmm(T)
        program = compile_function(fn, trans=Reals[T, S, S], emit=Reals[T, S])
    else:
        del data["emit"]
        expr = symbolic_chain(T, how)
        build = time.perf_counter() - start
        start = time.perf_counter()
        program = compile_funsor(expr)
    compile_time = time.perf_counter() - start

    def eager():
        if how == "compile_function":
            return hmm(T)(**{k: Tensor(v) for k, v in data.items()}).data
        return chain(Tensor(data["trans"])["time", "prev", "curr"], T).data

    def ours():
        return program(**data)

    np.testing.assert_allclose(ours(), eager(), rtol=1e-9)
    medians = interleaved_medians({"eager": eager, "ours": ours}, repeats)
    return {
        "T": T,
        "how": how,
        "build": build,
        "compile": compile_time,
        "operations": len(program.operations),
        "calls": count_calls(program, data, "numpy"),
        "eager": medians["eager"],
        "ours": medians["ours"],
    }


def fmt(seconds):
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.lazy_chains")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--sizes", default="10,100,1000,10000")
    parser.add_argument(
        "--write", action="store_true", help="write RESULTS_lazy_chains.md"
    )
    args = parser.parse_args(argv)
    funsor.set_backend("numpy")
    emit = Report()

    emit(
        f"Lazily built chains, numpy, {os.cpu_count()} cpus: medians of "
        f"{args.repeats} interleaved repeats (`python -m benchmarks.lazy_chains"
        f"{' --write' if args.write else ''}`); `eager` is funsor's "
        "`sequential_sum_product` on the arrays, per call; `calls` are the "
        "program's numpy calls in one call (`benchmarks/calls.py`)."
    )
    emit()
    header = ["built with", "T", "lazy build", "compile", "operations", "calls"]
    emit.header(header + ["eager", "ours", "eager/ours"])
    for how in ("sequential_sum_product", "MarkovProduct", "compile_function"):
        for T in (int(t) for t in args.sizes.split(",")):
            r = measure(T, how, args.repeats)
            what = f"`{how}` under `lazy`"
            if how == "compile_function":
                what = "an HMM with emissions in `compile_function`"
            build = fmt(r["build"]) if how != "compile_function" else "none"
            row = [what, str(T), build, fmt(r["compile"])]
            row += [str(r["operations"]), str(r["calls"])]
            row += [fmt(r["eager"]), fmt(r["ours"])]
            row.append(f"{r['eager'] / r['ours']:.1f}x")
            emit.row(row)
    if args.write:
        emit.write("RESULTS_lazy_chains.md", "Lazily built chains")


if __name__ == "__main__":
    main()
