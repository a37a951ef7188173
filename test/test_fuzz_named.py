"""Differential fuzzer: random expressions with named batch inputs,
reductions, contractions and substitutions, compiled and run three ways
against funsor's eager evaluation, on the active backend.

Every expression of the grammar must compile: a NotImplementedError fails
the test. Cases that funsor's own eager
evaluation cannot evaluate have no reference and are rejected.

Larger run: ``HYPOTHESIS_PROFILE=large pytest test/test_fuzz_named.py``.
"""

import numpy as np
from funsor.ops import Op
from funsor.terms import Funsor
from hypothesis import given, reject
from hypothesis import strategies as st

from funsor_lowering import compile_funsor, lower
from funsor_lowering.ir.structure import iter_leaves

from .helpers import (
    assert_matches,
    data_of,
    evaluate,
    from_numpy,
    run_three_ways,
    to_numpy,
)
from .named_strategies import expressions


def random_inputs(expr, seed):
    rng = np.random.RandomState(seed)
    return {
        name: from_numpy(np.asarray(rng.randn(*domain.shape), dtype=np.float32))
        for name, domain in expr.inputs.items()
        if domain.dtype == "real"
    }


@given(st.sampled_from([(), (2,)]).flatmap(expressions), st.integers(0, 2**16))
def test_named_expressions_match_eager(expr, seed):
    arrays = random_inputs(expr, seed)
    try:
        expected = data_of(evaluate(expr, arrays))
    except Exception:  # funsor itself cannot evaluate it: no reference
        reject()
    if any(np.isnan(to_numpy(leaf)).any() for leaf in iter_leaves(expected)):
        reject()  # overflowed (exp of exp in float32): no meaningful reference
    try:
        program = compile_funsor(expr)
    except NotImplementedError as error:
        raise AssertionError(
            f"unsupported term in the fuzzer grammar: {error}"
        ) from None
    assert all(isinstance(o.op, Op) for o in program.operations)
    assert not any(isinstance(c, Funsor) for c in program.constants)
    for actual in run_three_ways(program, arrays):
        assert_matches(actual, expected, rtol=1e-4, atol=1e-4)
    assert_matches(
        data_of(evaluate(lower(expr), arrays)), expected, rtol=1e-4, atol=1e-4
    )
