"""One log-space contraction step, three ways: what the compiler emits for
``logsumexp_j x[b, i, j] + y[b, j, k]`` (a round of an HMM's log-depth
product, a step of a planned contraction) against hand-written code.

- ``broadcast``: a broadcast ``add`` and the backend's ``logsumexp`` (what
  the compiler emits for steps of at most ``BROADCAST_LIMIT`` elements);
- ``logspace_einsum``: the package's op (above that size): max-shifted
  ``exp``, one ``einsum``, ``log``, and the underflow check;
- ``hand exp-matmul-log``: the same without the check, as Pyro's
  ``torch_log`` einsum backend computes it (it loses entries that
  underflow: ``-inf`` where the step is finite, rows ~800 nats apart in
  float64).

Printed per shape: medians of interleaved repeats in one process, in
float64, one thread, as ratios to the hand-written code::

    python -m benchmarks.logspace_steps [--write]
"""

import argparse

import funsor
import numpy as np

from benchmarks.timing import Report, interleaved_medians

# (batch, states): the step multiplies ``batch`` pairs of S x S matrices
SHAPES = [(1, 4), (1, 16), (1, 32), (1, 128), (16, 8), (16, 32), (64, 32)]
EQUATION = "bij,bjk->bik"


def _numpy_methods(x, y):
    from funsor_lowering.backends.numpy_backend import logsumexp
    from funsor_lowering.ops.logspace_einsum import logspace_einsum

    def hand(x, y):
        sx, sy = np.amax(x, -1, keepdims=True), np.amax(y, -2, keepdims=True)
        return np.log(np.matmul(np.exp(x - sx), np.exp(y - sy))) + sx + sy

    return {
        "broadcast": lambda: logsumexp(x[..., :, :, None] + y[..., None, :, :], -2),
        "logspace_einsum": lambda: logspace_einsum((x, y), equation=EQUATION),
        "hand exp-matmul-log": lambda: hand(x, y),
    }


def _torch_methods(x, y):
    import torch

    from funsor_lowering.backends.torch_backend import logsumexp
    from funsor_lowering.ops.logspace_einsum import logspace_einsum

    x, y = torch.as_tensor(x), torch.as_tensor(y)

    def hand(x, y):
        sx, sy = torch.amax(x, -1, keepdim=True), torch.amax(y, -2, keepdim=True)
        return torch.log(torch.matmul(torch.exp(x - sx), torch.exp(y - sy))) + sx + sy

    return {
        "broadcast": lambda: logsumexp(x[..., :, :, None] + y[..., None, :, :], -2),
        "logspace_einsum": lambda: logspace_einsum((x, y), equation=EQUATION),
        "hand exp-matmul-log": lambda: hand(x, y),
    }


METHODS = {"numpy": _numpy_methods, "torch": _torch_methods}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.logspace_steps")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--write", action="store_true", help="write RESULTS_logspace_steps.md"
    )
    args = parser.parse_args(argv)
    import torch

    from funsor_lowering.backends import array_backend
    from funsor_lowering.lowering.rules.contraction import BROADCAST_LIMIT

    torch.set_num_threads(1)
    emit = Report()
    emit(
        f"`python -m benchmarks.logspace_steps{' --write' if args.write else ''}`:"
        f" medians of {args.repeats} interleaved repeats, float64, one thread; "
        f"times as ratios to `hand exp-matmul-log` (lower is faster). The "
        f"compiler takes `logspace_einsum` above {BROADCAST_LIMIT} elements "
        f"of the broadcast (batch * S^3), else `broadcast`."
    )
    rng = np.random.default_rng(0)
    for backend, methods in METHODS.items():
        funsor.set_backend(backend)
        array_backend(backend)
        emit()
        emit(f"## {backend}")
        emit()
        emit.header(
            ["batch, S", "broadcast", "logspace_einsum", "compiler's pick", "hand"]
        )
        for batch, states in SHAPES:
            x = rng.normal(size=(batch, states, states))
            y = rng.normal(size=(batch, states, states))
            times = interleaved_medians(methods(x, y), repeats=args.repeats)
            hand = times["hand exp-matmul-log"]
            picked = (
                "logspace_einsum"
                if batch * states**3 > BROADCAST_LIMIT
                else "broadcast"
            )
            emit.row(
                [
                    f"{batch}, {states}",
                    f"{times['broadcast'] / hand:.2f}",
                    f"{times['logspace_einsum'] / hand:.2f}",
                    f"{times[picked] / hand:.2f} ({picked})",
                    f"{hand * 1e6:.1f} us",
                ]
            )
    funsor.set_backend("numpy")
    if args.write:
        emit.write("RESULTS_logspace_steps.md", "One log-space contraction step")


if __name__ == "__main__":
    main()
