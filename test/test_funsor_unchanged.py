"""Importing the package leaves funsor as it was (issue 42.3): in two fresh
processes, one importing ``funsor_lowering`` and one not, a battery of lazy
and eager funsor computations gives the same domains and bit-identical
results. The package's own shape rules apply only in its own work, also
to terms that its work built first."""

import os
import subprocess
import sys
import textwrap

import funsor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BATTERY = textwrap.dedent(
    """
    import hashlib, sys
    from collections import OrderedDict

    import funsor
    import numpy as np

    funsor.set_backend(sys.argv[1])
    if sys.argv[2] == "import":
        from funsor_lowering import compile_funsor, jit  # noqa: F401
    import funsor.sum_product as sp
    from funsor import Bint, Real, Reals, Tensor, Variable, ops
    from funsor.interpretations import lazy, normalize, reflect
    from funsor.interpreter import interpretation

    rng = np.random.default_rng(0)

    def array(*shape):
        data = rng.normal(size=shape)
        if sys.argv[1] == "torch":
            import torch

            return torch.tensor(data)
        if sys.argv[1] == "jax":
            import jax.numpy as jnp

            return jnp.asarray(data)
        return data

    def show(value):
        head = f"{type(value).__name__} {dict(value.inputs)} {value.output}"
        data = getattr(value, "data", None)
        if data is None:  # a lazy result: its repr
            return f"{head} {value!r}"
        return f"{head} {hashlib.md5(np.asarray(data).tobytes()).hexdigest()[:16]}"

    x, y = Variable("x", Reals[2, 3]), Variable("y", Reals[3])
    m = Variable("m", Reals[3, 3])
    LAZY = {
        "sum axis": lambda: ops.sum(x, 0), "sum": lambda: ops.sum(x),
        "amax": lambda: ops.amax(x, -1), "logsumexp": lambda: ops.logsumexp(x, 1),
        "mean": lambda: ops.mean(x, 0), "argmax": lambda: ops.argmax(x, 0),
        "permute": lambda: ops.permute(x, (1, 0)),
        "transpose": lambda: ops.transpose(x, 0, 1),
        "expand": lambda: ops.expand(y, (4, 3)),
        "unsqueeze": lambda: ops.unsqueeze(y, 0),
        "getitem": lambda: x[0], "einsum": lambda: ops.einsum((x, y), "ij,j->i"),
        "diagonal": lambda: ops.diagonal(m, -1, -2),
        "triangular_solve": lambda: ops.triangular_solve(Variable("b", Reals[3, 2]), m),
        "matmul": lambda: x @ y, "cat": lambda: ops.cat((x, x), 0),
        "stack": lambda: ops.stack((y, y), 0), "reshape": lambda: x.reshape((3, 2)),
    }
    INTERPRETATIONS = [("lazy", lazy), ("reflect", reflect), ("normalize", normalize)]
    kept = []  # the package's own terms, alive while funsor builds the same
    if sys.argv[2] == "import":
        from funsor_lowering.funsor_hooks import package_shape_rules

        for name, interp in INTERPRETATIONS:
            for case, build in LAZY.items():
                with interpretation(interp), package_shape_rules():
                    kept.append(build())
    for name, interp in INTERPRETATIONS:
        for case, build in LAZY.items():
            try:
                with interpretation(interp):
                    term = build()
                print(name, case, term.output, dict(term.inputs), type(term).__name__)
            except Exception as error:
                print(name, case, "raises", type(error).__name__)
    t = Tensor(array(3, 4), OrderedDict(i=Bint[3], j=Bint[4]))
    u = Tensor(array(4, 2), OrderedDict(j=Bint[4], k=Bint[2]))
    EAGER = {
        "reduce": lambda: t.reduce(ops.logaddexp, "j"),
        "contract": lambda: (t + u).reduce(ops.logaddexp, "j"),
        "min": lambda: t.reduce(ops.min, "j"), "max": lambda: t.reduce(ops.max),
        "sum_product": lambda: sp.sum_product(
            ops.logaddexp, ops.add, [t, u], frozenset({"j", "k"})
        ),
        "sum axis": lambda: ops.sum(Tensor(array(2, 3)), 0),
        "permute": lambda: ops.permute(Tensor(array(2, 3)), (1, 0)),
        "substitute": lambda: (x.sum() + y.sum())(x=Tensor(array(2, 3))),
    }
    for case, build in EAGER.items():
        try:
            print("eager", case, show(build()))
        except Exception as error:
            print("eager", case, "raises", type(error).__name__)
    # funsor's find_domain table for funsor's own op types: the function
    # registered for each (its code's file and line; a wrapper's differs)
    from funsor.domains import find_domain

    for cls, rule in find_domain.registry.items():
        if cls.__module__.startswith("funsor."):
            code = rule.__code__
            where = "/".join(code.co_filename.rsplit("/", 2)[-2:])
            print("find_domain", cls.__qualname__, where, code.co_firstlineno)
    """
)


def run_battery(imports):
    backend = funsor.get_backend()
    result = subprocess.run(
        [sys.executable, "-c", BATTERY, backend, "import" if imports else "none"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_funsor_infers_and_computes_the_same_with_and_without_the_import():
    without, with_import = run_battery(False), run_battery(True)
    assert len([line for line in without if "find_domain" not in line]) == 3 * 18 + 8
    assert len([line for line in without if "find_domain" in line]) > 10
    assert with_import == without
