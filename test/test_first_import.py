"""Every public name and every module works as the very first import of a
fresh interpreter (then the test's funsor backend is set and the name is
used), and the package's modules form no import cycle."""

import concurrent.futures
import importlib.util
import os
import subprocess
import sys

import funsor
import pytest

import funsor_lowering

from .import_graph import find_cycles, import_graph, module_names, upward_imports

BACKEND = funsor.get_backend()
MODULES = sorted(module_names())
NAMES = sorted(funsor_lowering.__all__) + ["__version__"]

# Modules that need an optional dependency: (prefix, the packages it needs).
OPTIONAL = {
    "funsor_lowering.backends.torch_backend": ("torch",),
    "funsor_lowering.backends.torch_minipyro": ("torch",),
    "funsor_lowering.backends.jax_backend": ("jax",),
    "funsor_lowering.backends.jax_primitives": ("jax",),
    "funsor_lowering.backends.jax_tiering": ("jax",),
    "funsor_lowering.pyro": ("torch", "pyro"),
}


def _missing(module):
    if module.startswith("funsor_lowering.backends.jax_") and BACKEND != "jax":
        return ["the jax backend (importing the jax adapter selects it)"]
    for prefix, needs in OPTIONAL.items():
        if module == prefix or module.startswith(prefix + "."):
            return [n for n in needs if importlib.util.find_spec(n) is None]
    return []


def _script(first_line, use):
    return "\n".join(
        [
            first_line,
            "import funsor",
            f"funsor.set_backend({BACKEND!r})",
            use,
            "print('ok')",
        ]
    )


def _run(script):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=os.path.dirname(os.path.dirname(funsor_lowering.__file__)),
    )
    return result.returncode, result.stdout + result.stderr


@pytest.fixture(scope="module")
def results():
    """All the fresh-interpreter runs, four at a time."""
    scripts = {}
    for name in NAMES:
        scripts[name] = _script(
            f"from funsor_lowering import {name}", f"assert {name} is not None"
        )
    for module in MODULES:
        if not _missing(module):
            scripts[module] = _script(
                f"import {module}", f"import sys; assert {module!r} in sys.modules"
            )
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        futures = {key: pool.submit(_run, script) for key, script in scripts.items()}
        return {key: future.result() for key, future in futures.items()}


@pytest.mark.parametrize("name", NAMES)
def test_public_name_as_first_import(results, name):
    returncode, output = results[name]
    assert returncode == 0 and output.strip().endswith("ok"), output


@pytest.mark.parametrize("module", MODULES)
def test_module_as_first_import(results, module):
    missing = _missing(module)
    if missing:
        pytest.skip(f"needs {missing} (run in the tox env that installs it)")
    returncode, output = results[module]
    assert returncode == 0 and output.strip().endswith("ok"), output


def test_modules_import_no_layer_above_their_own_and_form_no_cycle():
    graph = import_graph()
    assert (
        "funsor_lowering.tracing.tracer" in graph["funsor_lowering.pyro.autogaussian"]
    )
    assert upward_imports(graph) == set()
    assert find_cycles(graph) == []


def test_the_layer_check_finds_upward_imports():
    graph = {
        "funsor_lowering.ir.program": {"funsor_lowering.ops.extra_ops"},
        "funsor_lowering.ops.shapes": {"funsor_lowering.passes.simplify"},
    }
    assert upward_imports(graph) == {("ops.shapes", "passes.simplify")}


def test_the_cycle_check_finds_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycles(graph) == [["a", "b", "c"]]


# A script's lines (after the backend is set) defining fn: the FFBS recipe on
# a two-variable Gaussian chain, imported by name before funsor_lowering.
RECIPE_LINES = [
    "from funsor.domains import Bint, Reals",
    "from funsor.gaussian import Gaussian",
    "from funsor.recipes import forward_filter_backward_rsample",
    "from funsor_lowering import trace_function",
    "def fn(w0, P0, w1, P1):",
    "    f = {'x0': Gaussian(white_vec=w0, prec_sqrt=P0,"
    " inputs=OrderedDict(x0=Reals[2])),",
    "         'x1': Gaussian(white_vec=w1, prec_sqrt=P1,"
    " inputs=OrderedDict(x0=Reals[2], x1=Reals[2]))}",
    "    samples, log_prob = forward_filter_backward_rsample(",
    "        f, frozenset(f), frozenset(), {'particle': Bint[3]})",
    "    return {k: v.data for k, v in samples.items()}, log_prob.data",
]


@pytest.mark.skipif(BACKEND != "torch", reason="torch._dynamo is torch's")
def test_tracing_a_gaussian_recipe_does_not_import_torch_dynamo():
    """A fresh process's first trace stays light: torch's ``meta`` kernels
    written in Python import ``torch._dynamo`` (seconds) on first use, so
    small traced shapes are evaluated on stand-ins instead."""
    script = "\n".join(
        [
            "import sys",
            "from collections import OrderedDict",
            "import funsor, torch",
            "funsor.set_backend('torch')",
            *RECIPE_LINES,
            "arrays = dict(w0=torch.randn(2), P0=torch.randn(2, 2),",
            "              w1=torch.randn(4), P1=torch.randn(4, 4))",
            "program = trace_function(fn, arrays)",
            "assert program.stats()['by_op'].get('cat'), program.stats()",
            "assert 'torch._dynamo' not in sys.modules, 'torch._dynamo imported'",
        ]
    )
    _assert_runs(script)


@pytest.mark.skipif(BACKEND != "numpy", reason="one backend is enough")
def test_a_recipe_imported_before_funsor_lowering_is_traced_as_one_dense_draw():
    """``from funsor.recipes import forward_filter_backward_rsample`` before
    funsor_lowering is imported (the usual import order): the name is bound
    to the function object funsor_lowering hooks, so the trace is the dense
    draw (one Cholesky factorization), equal to eager funsor."""
    script = "\n".join(
        [
            "from collections import OrderedDict",
            "import numpy as np",
            "import funsor",
            "funsor.set_backend('numpy')",
            *RECIPE_LINES,
            "rng = np.random.default_rng(0)",
            "arrays = dict(w0=rng.standard_normal(2), P0=np.eye(2) * 2,",
            "              w1=rng.standard_normal(4), P1=np.eye(4) + 0.1)",
            "program = trace_function(fn, arrays)",
            "assert program.stats()['by_op']['cholesky'] == 1, program",
            "np.random.seed(1)",
            "expected = fn(**arrays)",
            "np.random.seed(1)",
            "actual = program(**arrays)",
            "for k in expected[0]:",
            "    assert np.allclose(actual[0][k], expected[0][k]), k",
            "assert np.allclose(actual[1], expected[1])",
        ]
    )
    _assert_runs(script)


@pytest.mark.skipif(BACKEND == "numpy", reason="funsor has no numpy distributions")
def test_gaussian_patterns_are_hooked_when_the_backend_is_set_after_the_import():
    """``import funsor_lowering`` before ``funsor.set_backend``: the
    backend's distributions register funsor's ``eager_normal`` and
    ``eager_mvn`` then, and still run the package's replacements where a
    context selects them (tracing computes them with ``funsor.ops`` only)."""
    script = "\n".join(
        [
            "import funsor_lowering",
            "from funsor_lowering import funsor_hooks as hooks",
            "import funsor",
            f"funsor.set_backend({BACKEND!r})",
            "from funsor import Real, Reals, Tensor, Variable, ops",
            f"dist = funsor.{BACKEND}.distributions",
            "prototype = funsor.tensor.get_default_prototype()",
            "loc = Tensor(ops.new_zeros(prototype, (2,)))",
            "scale = Tensor(ops.new_zeros(prototype, (2, 2)))",
            "seen = []",
            "def replacement(*args):",
            "    seen.append(type(args[0]).__name__)",
            "with hooks.replaced({'distribution.eager_normal': replacement,",
            "                     'distribution.eager_mvn': replacement}):",
            "    dist.Normal(loc[0], 1.0 + loc[1], Variable('x', Real))",
            "    dist.MultivariateNormal(loc, scale + 1.0, Variable('y', Reals[2]))",
            "assert len(seen) == 2, seen",
        ]
    )
    _assert_runs(script)


@pytest.mark.skipif(BACKEND != "numpy", reason="scipy serves the numpy backend")
def test_scipy_is_imported_only_by_programs_that_need_it():
    """numpy programs take ``scipy.special``'s ``expit`` and
    ``scipy.linalg``'s LAPACK wrappers (a third of a second each to import)
    when they first need them: an HMM never imports scipy, a Cholesky
    factorization imports ``scipy.linalg`` (where scipy is installed)."""
    script = "\n".join(
        [
            "import sys",
            "import numpy as np",
            "import funsor",
            "funsor.set_backend('numpy')",
            "from funsor import ops",
            "from funsor_lowering import trace_function",
            "from funsor_lowering.backends import numpy_lapack",
            "def hmm(init, trans):",
            "    alpha = init",
            "    for t in range(trans.shape[0]):",
            "        alpha = ops.logsumexp(alpha[:, None] + trans[t], 0)",
            "    return ops.logsumexp(alpha, 0)",
            "init, trans = np.zeros(3), np.random.randn(4, 3, 3)",
            "program = trace_function(hmm, {'init': init, 'trans': trans})",
            "assert np.allclose(program(init=init, trans=trans), hmm(init, trans))",
            "assert 'scipy.special' not in sys.modules, 'scipy.special imported'",
            "assert 'scipy.linalg' not in sys.modules, 'scipy.linalg imported'",
            "a = np.eye(3) * 2.0",
            "program = trace_function(lambda a: ops.cholesky(a), {'a': a})",
            "assert np.allclose(program(a=a), np.linalg.cholesky(a))",
            "assert ('scipy.linalg' in sys.modules) == numpy_lapack.AVAILABLE",
        ]
    )
    _assert_runs(script)


def _assert_runs(script):
    """``script`` runs to its end in a fresh interpreter."""
    code, output = _run(script + "\nprint('ok')")
    assert code == 0 and output.strip().endswith("ok"), output
