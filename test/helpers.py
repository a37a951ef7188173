"""Differential checks: compiled programs against funsor's eager evaluation."""

import os
import pickle
import subprocess
import sys
import threading

import funsor
import numpy as np
from funsor.tensor import Tensor
from funsor.terms import Binary, Finitary, Funsor, Number, Tuple, Unary, Variable
from funsor.testing import randn

from funsor_lowering.ops.shapes import find_domain

# The float dtype of test data: FUNSOR_FLOAT_DTYPE, by default each
# backend's own default (numpy float64; torch and jax float32).
FLOAT_DTYPE = os.environ.get(
    "FUNSOR_FLOAT_DTYPE",
    "float64" if os.environ.get("FUNSOR_BACKEND", "numpy") == "numpy" else "float32",
)
if FLOAT_DTYPE not in ("float32", "float64"):
    raise ValueError(f"FUNSOR_FLOAT_DTYPE={FLOAT_DTYPE}: expected float32 or float64")


def to_numpy(x):
    if isinstance(x, (bool, int, float, np.ndarray, np.generic)):
        return np.asarray(x)
    if funsor.get_backend() == "torch":
        return x.detach().cpu().numpy()
    return np.asarray(x)


def backend_exp(x):
    """The backend's own ``exp`` (not ``funsor.ops``): a call tracing cannot
    record. On torch ``expm1(x) + 1``: ``torch.exp`` has an exact
    ``funsor.ops`` equivalent, which tracing records as it."""
    backend = funsor.get_backend()
    if backend == "torch":
        import torch

        return torch.expm1(x) + 1
    if backend == "jax":
        import jax.numpy as jnp

        return jnp.exp(x)
    return np.exp(x)


def evaluate(expr, arrays):
    """funsor's own eager evaluation of ``expr`` at ``arrays`` (terms built
    under ``reflect`` are reinterpreted eagerly after substitution), with
    batch inputs in the order of ``expr.inputs`` (DESIGN's layout rule)."""
    with funsor.interpretations.eager:
        value = funsor.interpreter.reinterpret(expr(**arrays))
    return _align_like(value, expr)


def _align_like(value, expr):
    if isinstance(value, Tuple):
        return Tuple(tuple(_align_like(v, e) for v, e in zip(value.args, expr.args)))
    order = tuple(k for k, d in expr.inputs.items() if d.dtype != "real")
    if isinstance(value, Tensor):
        assert set(value.inputs) == set(order), (value.inputs, order)
        return value.align(order)
    return value


def data_of(value):
    """The backend data of an eagerly evaluated funsor (nested for Tuple)."""
    if isinstance(value, (Tensor, Number)):
        return value.data
    if isinstance(value, Tuple):
        return tuple(data_of(arg) for arg in value.args)
    if isinstance(value, Funsor):
        raise AssertionError(f"eager funsor did not evaluate: {value!r}")
    if isinstance(value, (tuple, list)):
        return type(value)(data_of(v) for v in value)
    if isinstance(value, dict):
        return {k: data_of(v) for k, v in value.items()}
    return value


def assert_matches(actual, expected, rtol=None, atol=None, path="output"):
    """Same nesting, same shapes, close values; arrays of the backend.

    The default tolerances follow the dtypes compared: ``rtol=1e-5,
    atol=1e-6``, or ``1e-4`` each where either side is float32 (some 800
    units in the last place, the rounding of a short chain of float32 ops).
    """
    if isinstance(expected, (tuple, list)):
        assert type(actual) is type(expected), (
            f"{path}: {type(actual)} != {type(expected)}"
        )
        assert len(actual) == len(expected), f"{path}: length differs"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_matches(a, e, rtol, atol, f"{path}[{i}]")
        return
    if isinstance(expected, dict):
        assert isinstance(actual, dict) and set(actual) == set(expected), path
        for k in expected:
            assert_matches(actual[k], expected[k], rtol, atol, f"{path}[{k!r}]")
        return
    a, e = to_numpy(actual), to_numpy(expected)
    single = np.float32 in (a.dtype, e.dtype)
    rtol = (1e-4 if single else 1e-5) if rtol is None else rtol
    atol = (1e-4 if single else 1e-6) if atol is None else atol
    assert a.shape == e.shape, f"{path}: shape {a.shape} != expected {e.shape}"
    # A NaN reference would make the comparison vacuous: cases avoid them.
    assert not np.isnan(e).any(), f"{path}: the reference has NaNs"
    np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, err_msg=path)


def from_numpy(x, dtype=None):
    """A numpy array as an array of the active backend, of ``dtype``; by
    default float64 data (numpy's random numbers) is in the suite's float
    dtype (``FLOAT_DTYPE``) and other dtypes are kept."""
    backend = funsor.get_backend()
    if backend == "numpy":
        return x if dtype is None else np.asarray(x, dtype)
    x = np.asarray(x)
    if dtype is None and x.dtype == np.float64:
        dtype = FLOAT_DTYPE
    if dtype is not None:
        x = x.astype(dtype)
    if backend == "torch":
        import torch

        return torch.as_tensor(x)
    import jax.numpy as jnp

    return jnp.asarray(x)


def backend_randn(*shape):
    """Random normal backend arrays (jax arrays on jax, where funsor's randn
    gives numpy arrays)."""
    x = randn(shape)
    if funsor.get_backend() == "jax":
        import jax.numpy as jnp

        x = jnp.asarray(x)
    return x


def random_arrays(inputs):
    """Backend arrays for the real-valued inputs of a program or funsor."""
    return {k: backend_randn(*d.shape) for k, d in inputs.items() if d.dtype == "real"}


def run_three_ways(program, arrays):
    """The program's outputs: called, exec'd from as_code, and unpickled."""
    called = program(**arrays)
    namespace = {}
    exec(program.as_code(name="program2"), namespace)
    from_code = namespace["program2"](**arrays)
    unpickled = pickle.loads(pickle.dumps(program))(**arrays)
    return called, from_code, unpickled


def check_compiled(expr, program=None, arrays=None, **tolerances):
    """Check ``compile_funsor(expr)`` three ways (and ``lower(expr)``
    evaluated by funsor) against ``expr(**arrays)`` evaluated by funsor."""
    from funsor_lowering import compile_funsor, lower

    if arrays is None:
        arrays = random_arrays(expr.inputs)
    expected = data_of(evaluate(expr, arrays))
    if program is None:
        program = compile_funsor(expr)
    assert program.inputs == tuple(
        k for k, d in expr.inputs.items() if d.dtype == "real"
    )
    for actual in run_three_ways(program, arrays):
        assert_matches(actual, expected, **tolerances)
    lowered = lower(expr)
    assert_is_lowered(lowered)
    assert_matches(data_of(evaluate(lowered, arrays)), expected, **tolerances)
    return program


LOWERED_TYPES = (Variable, Number, Tensor, Unary, Binary, Finitary, Tuple)


def assert_is_lowered(lowered):
    """Only real Variables, constants without inputs, Unary / Binary /
    Finitary / Tuple; each term's domain agrees with its data shape rule."""
    stack = [lowered]
    while stack:
        term = stack.pop()
        assert isinstance(term, LOWERED_TYPES), f"not lowered: {type(term).__name__}"
        assert all(d.dtype == "real" for d in term.inputs.values()), term.inputs
        if isinstance(term, (Unary, Binary, Finitary)):
            args = term._ast_values[1:]
            args = args[0] if isinstance(term, Finitary) else args
            domains = [a.output for a in args]
            if isinstance(term, Finitary):
                domains = [tuple(domains)]
            # the rules the lowering used
            assert find_domain(term.op, *domains) == term.output, term
            stack.extend(args)
        elif isinstance(term, Tuple):
            stack.extend(term.args)


def run_in_fresh_process(program, arrays, tmp_path, absent_module):
    """``program(**arrays)`` run in a fresh Python process from its pickle,
    checking there that ``absent_module`` was never imported."""
    (tmp_path / "program.pkl").write_bytes(pickle.dumps((program, arrays)))
    script = (
        "import pickle, sys, funsor\n"
        f"funsor.set_backend({program.backend!r})  # unpickling never sets it\n"
        "program, arrays = pickle.loads(open(sys.argv[1], 'rb').read())\n"
        "result = program(**arrays)\n"
        "pickle.dump(result, open(sys.argv[2], 'wb'))\n"
        f"assert {absent_module!r} not in sys.modules, 'imported {absent_module}'\n"
    )
    env = dict(os.environ)
    env.pop("FUNSOR_BACKEND", None)
    subprocess.run(
        [sys.executable, "-c", script, tmp_path / "program.pkl", tmp_path / "out.pkl"],
        check=True,
        env=env,
        timeout=300,
    )
    return pickle.loads((tmp_path / "out.pkl").read_bytes())


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_example(name, *args, env=None):
    """``examples/<name>`` run as a user runs it (a fresh process); returns
    the completed process (output captured)."""
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", name), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=None if env is None else {**os.environ, **env},
        timeout=600,
    )


def chain_sum_product(factors, T, kept=frozenset()):
    """funsor's log-space ``sum_product`` of chain ``factors`` over
    ``x0 .. x{T-1}`` but ``kept``, built under ``reflect`` and planned by
    ``apply_optimizer`` (what a funsor user compiles)."""
    from funsor import ops
    from funsor.interpretations import reflect
    from funsor.optimizer import apply_optimizer
    from funsor.sum_product import sum_product

    with reflect:
        expr = sum_product(
            ops.logaddexp,
            ops.add,
            factors,
            frozenset(f"x{t}" for t in range(T)) - frozenset(kept),
            frozenset(),
        )
        return apply_optimizer(expr)


def call_in_threads(fn, count):
    """``fn(k)`` for ``k`` in ``range(count)``, each in a thread of its own,
    all released together (a barrier); returns the exceptions they raised."""
    barrier, errors = threading.Barrier(count), []

    def run(k):
        barrier.wait()
        try:
            fn(k)
        except Exception as error:  # noqa: BLE001 - returned to the caller
            errors.append(error)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def assert_gradients_match(fn, reference, arrays):
    """Gradients of the scalar ``fn(arrays)`` (jax.grad, torch autograd)
    equal those of ``reference(arrays)`` for every array, and are not all
    zero (else the comparison would say little)."""
    names = sorted(arrays)

    def gradients(f):
        if funsor.get_backend() == "jax":
            import jax

            return jax.grad(f)(arrays)
        import torch

        leaves = {k: v.clone().requires_grad_() for k, v in arrays.items()}
        grads = torch.autograd.grad(f(leaves), [leaves[k] for k in names])
        return dict(zip(names, grads))

    actual, expected = gradients(fn), gradients(reference)
    for k in names:
        assert_matches(actual[k], expected[k], path=k)
    assert sum(float(np.abs(to_numpy(g)).sum()) for g in expected.values()) > 0
