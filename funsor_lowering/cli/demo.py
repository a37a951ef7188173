"""The demo: compile a small funsor model (an HMM by variable elimination),
show the program and its generated code, check it against eager funsor, and
time both.

Run it with ``python -m funsor_lowering demo [--backend numpy|torch|jax]``.
"""

import inspect
import statistics
import timeit

import numpy as np


def median_seconds(fn, repeats=7, min_time=0.05):
    """Median over ``repeats`` of the per-call time of ``fn``."""
    number = 1
    while timeit.timeit(fn, number=number) < min_time and number < 1_000_000:
        number *= 2
    return statistics.median(timeit.repeat(fn, number=number, repeat=repeats)) / number


T, S = 6, 3  # time steps, states


def hmm(init, trans):
    """A discrete hidden Markov model in plain funsor: the log-likelihood of
    T steps of S states by variable elimination (funsor's sum_product,
    planned by its optimizer), and the filtering distribution of the last
    state. ``init`` and ``trans`` are funsors: Variables to compile, Tensors
    to evaluate eagerly."""
    from funsor import ops
    from funsor.interpretations import reflect
    from funsor.optimizer import apply_optimizer
    from funsor.sum_product import sum_product
    from funsor.terms import Tuple

    factors = [init["x0"]] + [trans[t][f"x{t - 1}", f"x{t}"] for t in range(1, T)]
    hidden = frozenset(f"x{t}" for t in range(T))
    with reflect:  # build lazily, let funsor's optimizer plan it
        joint = sum_product(ops.logaddexp, ops.add, factors, hidden, frozenset())
        last = sum_product(
            ops.logaddexp, ops.add, factors, hidden - {f"x{T - 1}"}, frozenset()
        )
        return apply_optimizer(Tuple((joint, last)))


def to_numpy(x):
    if hasattr(x, "detach"):
        x = x.detach().cpu()
    return np.asarray(x)


# What each backend needs installed, and how to install it.
REQUIREMENTS = {
    "numpy": ((), ""),
    "torch": (
        ("torch",),
        "pip install 'funsor_lowering[torch]'  (or: pip install .[torch])",
    ),
    "jax": (
        ("jax", "numpyro"),
        "pip install 'funsor_lowering[jax]'  (or: pip install .[jax])",
    ),
}


def missing_requirements(backend):
    """The packages ``backend`` needs that are not installed."""
    import importlib.util

    return [m for m in REQUIREMENTS[backend][0] if importlib.util.find_spec(m) is None]


def main(backend="numpy"):
    """Run the demo on ``backend``; returns 0, or 1 (with an install hint on
    stderr) when the backend is not installed."""
    import sys

    missing = missing_requirements(backend)
    if missing:
        print(
            f"The {backend} backend needs {', '.join(missing)}, which is not "
            f"installed. Install it with:\n    {REQUIREMENTS[backend][1]}",
            file=sys.stderr,
        )
        return 1
    import funsor

    funsor.set_backend(backend)
    from funsor.domains import Reals
    from funsor.interpretations import eager
    from funsor.interpreter import reinterpret
    from funsor.tensor import Tensor
    from funsor.terms import Variable
    from funsor.testing import randn

    from funsor_lowering import compile_funsor

    init, trans = Variable("init", Reals[S]), Variable("trans", Reals[T, S, S])
    print(f"funsor backend: {backend}\n")
    print("funsor code compiled:\n")
    print(inspect.getsource(hmm))
    program = compile_funsor(hmm(init, trans))
    print(program, "\n")
    print(program.as_code(name="demo_program"))

    arrays = {"init": randn((S,)), "trans": randn((T, S, S))}

    def eager_funsor():
        """What funsor users pay per call: build, optimize, evaluate."""
        expr = hmm(Tensor(arrays["init"]), Tensor(arrays["trans"]))
        with eager:
            return reinterpret(expr)

    expected = eager_funsor()
    actual = program(**arrays)
    for got, want in zip(actual, expected.args):
        np.testing.assert_allclose(to_numpy(got), to_numpy(want.data), rtol=1e-5)
    print("program output matches eager funsor: yes\n")

    eager_time = median_seconds(eager_funsor)
    program_time = median_seconds(lambda: program(**arrays))
    print(f"eager funsor, per call (median): {eager_time * 1e6:9.1f} us")
    print(f"compiled program, per call:      {program_time * 1e6:9.1f} us")
    print(f"speed-up: {eager_time / program_time:.1f}x")
    if backend in _JIT_NAMES:  # jax.jit / torch.jit.trace of the program
        _show_jit(program, arrays, expected, eager_time, _JIT_NAMES[backend])
    return 0


_JIT_NAMES = {"jax": "jax.jit", "torch": "torch.jit.trace"}


def _show_jit(program, arrays, expected, eager_time, jit_name):
    """The jitted program: its outputs checked, its speed-up printed."""
    jitted = program.jit()
    for got, want in zip(jitted(**arrays), expected.args):
        np.testing.assert_allclose(to_numpy(got), to_numpy(want.data), rtol=1e-5)
    print(f"\nprogram.jit() ({jit_name}) matches eager funsor: yes")
    jit_time = median_seconds(lambda: _ready(jitted(**arrays)))
    print(f"jitted program, per call:        {jit_time * 1e6:9.1f} us")
    print(f"speed-up of the jitted program: {eager_time / jit_time:.1f}x")


def _ready(outputs):
    """Wait for jax's asynchronous results (a no-op elsewhere)."""
    for value in outputs:
        if hasattr(value, "block_until_ready"):
            value.block_until_ready()
    return outputs
