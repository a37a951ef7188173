"""Property-based differential tests: random real-valued expressions compiled
and run three ways, against funsor's eager evaluation."""

import numpy as np
from funsor.interpretations import reflect
from funsor.interpreter import reinterpret
from funsor.ops import Op
from funsor.terms import Funsor
from hypothesis import given, reject
from hypothesis import strategies as st

from funsor_lowering import compile_funsor
from funsor_lowering.funsor_hooks import package_shape_rules
from funsor_lowering.ir.structure import iter_leaves

from .helpers import check_compiled, data_of, evaluate, from_numpy, to_numpy
from .strategies import programs


def random_inputs(expr, seed):
    rng = np.random.RandomState(seed)
    return {
        name: from_numpy(np.asarray(rng.randn(*domain.shape), dtype=np.float32))
        for name, domain in expr.inputs.items()
    }


def require_reference(expr, seed):
    """Reject examples funsor itself cannot evaluate (no reference)."""
    try:
        value = data_of(evaluate(expr, random_inputs(expr, seed)))
    except NotImplementedError:
        reject()
    if any(np.isnan(to_numpy(leaf)).any() for leaf in iter_leaves(value)):
        reject()  # overflowed: no meaningful reference


@given(programs(), st.integers(0, 2**16))
def test_compiled_matches_eager(expr, seed):
    require_reference(expr, seed)
    program = check_compiled(
        expr, arrays=random_inputs(expr, seed), rtol=1e-4, atol=1e-5
    )
    # Nothing of funsor is left at run time: ops and arrays only.
    assert all(isinstance(o.op, Op) for o in program.operations)
    assert not any(isinstance(c, Funsor) for c in program.constants)


@given(programs(), st.integers(0, 2**16))
def test_reflect_built_matches_eager(expr, seed):
    # The same expression built without normalization (raw Unary/Binary
    # terms), with the shape rules it was generated with (the package's).
    with reflect, package_shape_rules():
        raw = reinterpret(expr)
    require_reference(raw, seed)
    check_compiled(raw, arrays=random_inputs(expr, seed), rtol=1e-4, atol=1e-5)


@given(programs())
def test_compiling_twice_gives_the_same_program(expr):
    first, second = compile_funsor(expr), compile_funsor(expr)
    assert first.operations == second.operations
    assert str(first) == str(second)
