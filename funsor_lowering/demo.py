"""The demo: compile a small funsor computation, show the program and its
generated code, check it against eager funsor, and time both.

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


def example():
    """A small model in plain funsor: an affine map, a nonlinearity and a
    log-density-like score, returned together."""
    from funsor import ops
    from funsor.domains import Reals
    from funsor.terms import Tuple, Variable

    a = Variable("a", Reals[3, 3])
    b = Variable("b", Reals[3])
    x = Variable("x", Reals[3])
    hidden = (a @ x + b).tanh()
    score = -0.5 * (hidden * hidden).sum() + ops.logaddexp(hidden[0], hidden[1])
    return Tuple((hidden, score))


def to_numpy(x):
    if hasattr(x, "detach"):
        x = x.detach().cpu()
    return np.asarray(x)


def main(backend="numpy"):
    import funsor

    funsor.set_backend(backend)
    from funsor.testing import randn

    from funsor_lowering import compile_funsor

    expr = example()
    print(f"funsor backend: {backend}\n")
    print("funsor code compiled:\n")
    print(inspect.getsource(example))
    program = compile_funsor(expr)
    print(program, "\n")
    print(program.as_code(name="demo_program"))

    arrays = {name: randn(domain.shape) for name, domain in expr.inputs.items()}
    expected = expr(**arrays)
    actual = program(**arrays)
    for got, want in zip(actual, expected.args):
        np.testing.assert_allclose(to_numpy(got), to_numpy(want.data), rtol=1e-5)
    print("program output matches eager funsor: yes\n")

    eager_time = median_seconds(lambda: expr(**arrays))
    program_time = median_seconds(lambda: program(**arrays))
    print(f"eager funsor, per call (median): {eager_time * 1e6:9.1f} us")
    print(f"compiled program, per call:      {program_time * 1e6:9.1f} us")
    print(f"speed-up: {eager_time / program_time:.1f}x")
