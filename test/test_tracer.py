"""trace_function: funsor's own tracer scenarios (including the ones it marks
expected-to-fail), nested inputs and outputs, live random ops, untraced data
flow. Each traced program is run on *fresh* arrays and compared with the
function itself (funsor eager) on those arrays, so a value baked in at trace
time cannot pass."""

from collections import OrderedDict

import funsor
import numpy as np
import pytest
from funsor import ops
from funsor.adjoint import AdjointTape, forward_backward
from funsor.delta import Delta
from funsor.domains import Bint, Real, Reals
from funsor.interpretations import reflect
from funsor.op_factory import make_op
from funsor.optimizer import apply_optimizer
from funsor.sum_product import sum_product
from funsor.tensor import Tensor
from funsor.terms import to_data, to_funsor

from funsor_lowering import compile_function, trace_function
from funsor_lowering.tracing.tracer import RANDOM_OPS, UntracedValueError

from .helpers import (
    assert_matches,
    backend_randn,
    from_numpy,
    run_three_ways,
    to_numpy,
)


def fresh(shapes):
    return {k: backend_randn(*s) for k, s in shapes.items()}


def check_traced(fn, shapes, three_ways=True, **tolerances):
    program = trace_function(fn, fresh(shapes))
    arrays = fresh(shapes)  # different values than at trace time
    expected = fn(**arrays)
    results = run_three_ways(program, arrays) if three_ways else [program(**arrays)]
    for actual in results:
        assert_matches(actual, expected, **tolerances)
    return program


def test_funsor_identity_and_chain():
    # funsor 0.4.8's tracer tests test_id and test_chain
    check_traced(lambda x: x, {"x": (2, 3)})

    def chain(x):
        for _ in range(10):
            x = ops.mul(x, x)
        return x

    program = check_traced(chain, {"x": (4,)}, rtol=1e-4)
    assert len(program.operations) == 10


def test_funsor_used_inside_the_function():
    # funsor 0.4.8's test_use_funsor_interally_1: arrays -> funsors -> arrays
    def fn(x, y, z):
        x, y, z = to_funsor(x), to_funsor(y), to_funsor(z)
        return to_data(x @ y + z + 1)

    check_traced(fn, {"x": (2, 3), "y": (3, 4), "z": (2, 4)}, rtol=1e-5)


def test_funsor_sum_product_over_tensors():
    # funsor 0.4.8's tracer test: sum_product over Tensors inside the function
    # (its tracer loses the Tensor contractions; ours captures them).
    def fn(f, g, h):
        factors = [Tensor(f)["x"], Tensor(g)["x", "y"], Tensor(h)["y", "z", "i"]]
        with reflect:
            expr = sum_product(
                ops.logaddexp, ops.add, factors, frozenset("xyzi"), frozenset("i")
            )
        return apply_optimizer(expr).data

    check_traced(fn, {"f": (5,), "g": (5, 4), "h": (4, 3, 2)}, rtol=1e-4)


def test_funsor_wrapped_op_is_one_operation():
    @make_op
    def wrapper(x: Real) -> Real:
        return ops.add(ops.exp(x), x)  # not traced inside: one operation

    def fn(x):
        return ops.add(wrapper(ops.add(x, 1.0)), 1.0)

    # A locally defined op can be called, not printed or pickled.
    program = check_traced(fn, {"x": ()}, three_ways=False)
    assert [o.op.name for o in program.operations] == ["add", "wrapper", "add"]


def test_tuple_and_nested_outputs_and_inputs():
    def fn(params, x):
        loc, scale = params["loc"], params["scale"][0]
        z = ops.mul(ops.sub(x, loc), ops.exp(scale))
        return z, {"sum": ops.sum(z), "pair": [ops.neg(z), 2.0]}

    program = trace_function(
        fn,
        {
            "params": {"loc": backend_randn(3), "scale": [backend_randn()]},
            "x": backend_randn(3),
        },
    )
    arrays = {
        "params": {"loc": backend_randn(3), "scale": [backend_randn()]},
        "x": backend_randn(3),
    }
    for actual in run_three_ways(program, arrays):
        assert_matches(actual, fn(**arrays))
    with pytest.raises(TypeError, match=r"input 'params'.*\['scale'\]"):
        program(params={"loc": backend_randn(3)}, x=backend_randn(3))


def test_tensor_contraction_inside_is_captured():
    def fn(f, g):
        joint = Tensor(f)["x"] + Tensor(g)["x", "y"]
        return joint.reduce(ops.logaddexp, "x").data, joint.reduce(ops.max).data

    program = check_traced(fn, {"f": (3,), "g": (3, 4)})
    assert program.operations  # computed by the program, not baked in


def test_random_ops_are_live():
    if funsor.get_backend() == "jax":  # jax takes its rng_key as an input
        import jax

        def fn(x, key):
            return ops.add(x, ops.randn(x, (4,), key))

        keys = [jax.random.PRNGKey(k) for k in (0, 1)]
        program = trace_function(fn, {"x": backend_randn(4), "key": keys[0]})
        x = backend_randn(4)
        first, second = program(x=x, key=keys[0]), program(x=x, key=keys[1])
        assert_matches(program(x=x, key=keys[0]), first)  # same key, same draw
    else:

        def fn(x):
            return ops.add(x, ops.randn(x, (4,)))

        program = trace_function(fn, {"x": backend_randn(4)})
        x = backend_randn(4)
        first, second = program(x=x), program(x=x)
    assert not np.allclose(to_numpy(first), to_numpy(second))
    assert any(isinstance(o.op, RANDOM_OPS) for o in program.operations)


def test_arrays_that_depend_on_no_input_are_constants_unless_strict():
    scale = backend_randn(3)

    def fn(x):
        y = scale * 2  # the backend's operator on a constant: not recorded
        return ops.exp(ops.mul(x, y))

    program = trace_function(fn, {"x": backend_randn(3)})
    assert program.constants  # embedded by default, as jax.jit does
    x = backend_randn(3)
    assert_matches(program(x=x), fn(x))
    with pytest.raises(UntracedValueError, match=r"shape \(3,\).*outside recorded"):
        trace_function(fn, {"x": backend_randn(3)}, allow_constants=False)


def test_a_backend_literal_is_a_constant():
    # e.g. ``torch.tensor(0.5)`` written in the traced function
    def fn(x):
        half = from_numpy(np.array(0.5))
        return ops.mul(x, half)

    program = trace_function(fn, {"x": backend_randn(3)})
    x = backend_randn(3)
    assert_matches(program(x=x), fn(x))
    with pytest.raises(UntracedValueError, match=r"shape \(\)"):
        trace_function(fn, {"x": backend_randn(3)}, allow_constants=False)


def test_a_large_constant_is_held_once_not_copied_per_call():
    big = backend_randn(1024, 512)  # 2 MiB in float32, 4 MiB in float64

    def fn(x):
        return ops.add(ops.matmul(x, big), 1.0)

    program = trace_function(fn, {"x": backend_randn(2, 1024)})
    assert any(c is big for c in program.constants)  # by reference
    held = sum(getattr(c, "nbytes", 0) for c in program.constants)
    assert held < 2 * big.nbytes  # once
    x = backend_randn(2, 1024)
    assert_matches(program(x=x), fn(x), rtol=1e-5)
    assert any(c is big for c in program.constants)  # still the same array


def test_python_operators_on_traced_values_are_recorded():
    def fn(x, y):
        return {"sum": -x + 2 * y / (1 + abs(x)), "index": (x @ y)[None], "gt": x > y}

    x, y = backend_randn(3), backend_randn(3)
    program = trace_function(fn, {"x": x, "y": y})
    x, y = backend_randn(3), backend_randn(3)
    assert_matches(program(x=x, y=y), fn(x, y))


def test_constants_from_constants_are_fine():
    def fn(x):
        return ops.add(x, ops.new_arange(x, 3))

    check_traced(fn, {"x": (3,)})


def test_compile_and_trace_agree():
    def funsor_fn(a, b):
        return ((a * b).exp() + a).sum()

    compiled = compile_function(funsor_fn, a=Reals[3], b=Reals[3])

    def array_fn(a, b):
        return funsor_fn(Tensor(a), Tensor(b)).data

    traced = trace_function(array_fn, fresh({"a": (3,), "b": (3,)}))
    arrays = fresh({"a": (3,), "b": (3,)})
    assert_matches(traced(**arrays), compiled(**arrays))


def test_bad_inputs():
    with pytest.raises(TypeError, match="expects a dict"):
        trace_function(lambda x: x, [backend_randn(2)])
    with pytest.raises(TypeError, match=r"input 'x'.*expected a"):
        trace_function(lambda x: x, {"x": [1.0, 2.0]})


def marginals(f, g, h):
    """funsor.adjoint over Tensors: the partition function and the adjoint
    (marginal message) of every factor."""
    factors = [Tensor(f)["x"], Tensor(g)["x", "y"], Tensor(h)["y", "z", "i"]]
    with AdjointTape() as tape:
        z = sum_product(
            ops.logaddexp, ops.add, factors, frozenset("xyz"), frozenset("i")
        )
    adjoints = tape.adjoint(ops.logaddexp, ops.add, z, targets=factors)
    names = ["f", "g", "h"]
    return {
        "z": z.data,
        "marginals": {n: adjoints[t].data for n, t in zip(names, factors)},
    }


def test_adjoint_marginals_are_traced():
    check_traced(marginals, {"f": (2,), "g": (2, 3), "h": (3, 4, 2)}, rtol=1e-4)


def test_forward_backward_is_traced():
    def fn(f, g):
        factors = Tensor(f)["x"] + Tensor(g)["x", "y"]
        forward, backward = forward_backward(ops.logaddexp, ops.add, factors)
        return forward.data, [v.data for v in backward.values()]

    check_traced(fn, {"f": (3,), "g": (3, 4)}, rtol=1e-4)


def test_op_with_array_parameters_is_refused():
    def fn(x):
        # the fill value is an array parameter: no op instance can hold it
        return ops.add(x, ops.new_full(x, (3,), ops.sum(x)))

    with pytest.raises(NotImplementedError, match="parameters are computed arrays"):
        trace_function(fn, {"x": backend_randn(3)})


# ------------------------------------------- discrete sampling (Tensor._sample)
def discrete_draws(logits, key=None):
    """Draw N samples of k (per batch row b) from a Tensor log-density with
    funsor's sampler; returns the points and the log normalizer factor."""
    f = Tensor(logits)["b", "k"]
    sample = f.sample(frozenset({"k"}), OrderedDict(n=Bint[4000]), rng_key=key)
    (delta,) = [t for t in sample.terms if isinstance(t, Delta)]
    (factor,) = [t for t in sample.terms if isinstance(t, Tensor)]
    return delta.terms[0][1][0].data, factor.data


def test_discrete_samples_are_live_with_softmax_frequencies():
    logits = np.array([[0.0, 1.0, 2.0], [1.0, 1.0, -1.0]])
    arrays = {"logits": from_numpy(logits)}
    if funsor.get_backend() == "jax":
        import jax

        keys = [jax.random.PRNGKey(k) for k in (0, 1)]
        program = trace_function(discrete_draws, dict(arrays, key=keys[0]))
        (first, factor), (second, _) = (program(**arrays, key=k) for k in keys)
    else:
        program = trace_function(discrete_draws, arrays)
        (first, factor), (second, _) = program(**arrays), program(**arrays)
    assert any(isinstance(o.op, RANDOM_OPS) for o in program.operations)
    first, second = np.asarray(to_numpy(first)), np.asarray(to_numpy(second))
    assert first.shape == (4000, 2) and not np.array_equal(first, second)
    probs = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    for b in range(2):
        freqs = np.bincount(first[:, b], minlength=3) / 4000
        stderr = np.sqrt(probs[b] * (1 - probs[b]) / 4000)
        assert np.all(np.abs(freqs - probs[b]) < 5 * stderr)
    # the factor is the log normalizer per row, as funsor's sampler gives
    expected = np.log(np.exp(logits).sum(-1))
    np.testing.assert_allclose(
        np.broadcast_to(to_numpy(factor), (4000, 2))[0], expected, rtol=1e-5
    )


def test_ops_with_several_outputs_are_recorded():
    # ops.qr returns (Q, R): the program holds the pair and takes its items
    def fn(a):
        q, r = ops.qr(a)
        return {"r": r, "product": ops.matmul(q, r)}

    program = trace_function(fn, {"a": backend_randn(4, 3)})
    a = backend_randn(4, 3)
    assert_matches(program(a=a), fn(a))
    assert_matches(program(a=a)["product"], a)


def test_abstract_results_are_remembered_by_shape_and_stay_distinct_values():
    """Abstract evaluation is cached per op and argument shapes and dtypes:
    the same op on two traced values of one shape gives two values (the
    program computes both, and each is read where it is used)."""
    from funsor_lowering.tracing import abstract

    def fn(x, y):
        a, b = ops.exp(x), ops.exp(y)  # one cached signature, two values
        return a + b * 2, a * 2.5

    abstract._RESULT_TYPES.clear()
    arrays = fresh({"x": (3,), "y": (3,)})
    program = trace_function(fn, arrays)
    assert program.stats()["by_op"]["exp"] == 2
    assert any(key[0] is ops.exp for key in abstract._RESULT_TYPES)
    again = fresh({"x": (3,), "y": (3,)})
    expected = fn(**again)
    for actual, want in zip(program(**again), expected):
        assert_matches(actual, want)


@pytest.mark.parametrize(
    "shapes, axis",
    [
        ([(2, 3), (4, 3)], 0),
        ([(2, 3), (2, 1), (2, 5)], -1),
        ([(3, 1, 2), (3, 4, 2)], 1),
        ([(5,)], 0),
    ],
)
def test_cat_is_traced_by_its_shape_rule(shapes, axis):
    """``ops.cat`` of traced parts: shape by rule (numpy, torch) or by the
    backend (jax), checked against the function on fresh arrays."""

    def fn(**parts):
        return ops.cat([parts[f"p{k}"] for k in range(len(shapes))], axis)

    program = check_traced(fn, {f"p{k}": s for k, s in enumerate(shapes)})
    assert program.stats()["by_op"]["cat"] == 1


def test_cat_of_mismatched_parts_is_an_error_as_in_eager():
    """The shape rule does not invent a shape for parts the backend itself
    refuses to join: tracing raises as eager evaluation does."""
    arrays = {"a": backend_randn(2, 3), "b": backend_randn(2, 4)}

    def fn(a, b):
        return ops.cat([a, b], 0)

    errors = (ValueError, RuntimeError, TypeError)  # numpy, torch, jax
    with pytest.raises(errors):
        fn(**arrays)
    with pytest.raises(errors):
        trace_function(fn, arrays)


@pytest.mark.skipif(funsor.get_backend() != "torch", reason="torch's meta path")
def test_large_arguments_are_evaluated_on_meta_tensors():
    """Above the stand-in size, torch evaluates shapes on ``meta`` tensors
    (no memory for the values); the program still matches eager."""
    from funsor_lowering.backends import torch_backend

    rows = torch_backend.STAND_IN_ELEMENTS // 64 + 1  # x alone is above the limit

    def fn(x, y):
        return ops.cat([ops.log(ops.exp(x)), y], 0).sum(0)

    check_traced(fn, {"x": (rows, 64), "y": (3, 64)}, three_ways=False, rtol=1e-4)


EINSUM_SHAPES = [  # (equation, shapes, whether the rule gives the shape)
    ("...ij,...jk->...ik", [(4, 2, 3), (3, 5)], True),
    ("...ij,...jk->...ik", [(2, 3), (6, 3, 5)], True),
    ("...ij,...j->...i", [(1, 2, 3), (4, 3)], True),
    ("...i,...ij->...j", [(3,), (2, 3, 4)], True),
    ("ab,bc->ac", [(2, 3), (3, 4)], True),
    ("ab,ab->a", [(2, 3), (2, 3)], True),
    ("ii->i", [(3, 3)], True),
    ("...ij->...ji", [(2, 4, 3)], True),
    ("...ij,...jk->...ik", [(2, 3), (2, 5)], False),  # sizes differ
    ("...ij,...jk->...ik", [(3, 2, 3), (2, 3, 5)], False),  # batches differ
    ("i->ii", [(3,)], False),  # a repeated output letter
]


@pytest.mark.parametrize("equation, shapes, by_rule", EINSUM_SHAPES)
def test_einsum_shape_rule_agrees_with_evaluation(equation, shapes, by_rule):
    _check_shape_rule(ops.einsum, ([_symbolic(s) for s in shapes], equation), by_rule)


@pytest.mark.parametrize(
    "shape, index, by_rule",
    [
        ((4, 3), (Ellipsis, 0), True),
        ((4, 3), (slice(1, 3), None, slice(None, None, 2)), True),
        ((2, 4, 3), (Ellipsis, slice(0, 2, 1), slice(2, 6, 1)), True),
        ((2, 4, 3), (0, Ellipsis, None), True),
        ((4,), slice(-3, None), True),
        ((4, 3), (5,), False),  # out of range
        ((4, 3), (0, 0, 0), False),  # too many indices
        ((4, 3), (slice(None, None, -1),), False),  # a negative step
    ],
)
def test_getslice_shape_rule_agrees_with_evaluation(shape, index, by_rule):
    _check_shape_rule(ops.getslice, (_symbolic(shape), index), by_rule)


def _symbolic(shape):
    from funsor_lowering.ops.symbolic import SymbolicArray

    return SymbolicArray(tuple(shape), backend_randn(1).dtype)


def _check_shape_rule(op, args, by_rule):
    """Where ``by_rule``, the rule gives the shape and dtype the backend's
    evaluation gives; else it leaves the op to evaluation (which raises
    the backend's error where the backend refuses)."""
    from funsor_lowering.backends import array_backend
    from funsor_lowering.funsor_hooks import original
    from funsor_lowering.runtime.codegen import bind_call
    from funsor_lowering.tracing import abstract

    backend = array_backend(funsor.get_backend())
    rule = abstract._RULES[type(op)](bind_call(op, args, {}).arguments, backend)
    if not by_rule:
        assert rule is None
        return
    call = original("Op.__call__")
    evaluated = backend.abstract_eval(lambda *a: call(op, *a), args, {})
    assert (tuple(rule.shape), rule.dtype) == (
        tuple(evaluated.shape),
        evaluated.dtype,
    )


def test_a_delta_substituted_with_its_own_point_is_funsors_log_density():
    # funsor adds log(all(point == point)): zero, or -inf where a point has
    # a NaN; traced as four ops on the point's data
    def fn(p, log_density):
        inputs = OrderedDict(i=Bint[3])
        point = Tensor(p, inputs)
        delta = Delta("x", point, Tensor(log_density, inputs))
        return delta(x=point).data

    p, log_density = backend_randn(3, 2), backend_randn(3)
    program = trace_function(fn, {"p": p, "log_density": log_density})
    assert program.stats()["by_op"].get("eq") == 1, program
    with_nan = to_numpy(p).copy()
    with_nan[1, 0] = np.nan
    for data in (p, from_numpy(with_nan)):
        expected = to_numpy(fn(data, log_density))
        assert_matches(program(p=data, log_density=log_density), expected)
    assert np.isneginf(expected[1]) and np.isfinite(expected[[0, 2]]).all()


def test_backend_functions_with_an_ops_equivalent_are_recorded_as_it():
    # model-side code as Pyro's funsor code writes it: x.exp(), .logsumexp,
    # torch.nn.functional.linear, .dim() on traced values
    if funsor.get_backend() != "torch":
        pytest.skip("torch functions")
    import torch

    def fn(x, w, b):
        y = torch.nn.functional.linear(x, w, b)
        total = x.exp().sum() + torch.logsumexp(y, -1) + y.logsumexp(-1, keepdim=True)
        return total + torch.sigmoid(y).sum(-1) + x.exp().log1p().abs().sum() * x.dim()

    shapes = {"x": (2, 3), "w": (4, 3), "b": (4,)}
    program = check_traced(fn, shapes, rtol=1e-5)
    # recorded as ops on the inputs: no array was baked in as a constant
    assert all(getattr(c, "shape", ()) == () for c in program.constants)
    with pytest.raises(TypeError, match="torch.cumsum"):
        trace_function(lambda x: torch.cumsum(x, 0), fresh({"x": (3,)}))


def test_full_like_of_a_traced_value():
    # funsor's examples/forward_backward.py starts its backward pass from
    # Tensor(ops.full_like(alpha.data, 0.0), ...); on jax funsor fills a
    # numpy array, which abstract evaluation on jax tracers could not
    check_traced(lambda x: ops.add(ops.full_like(x, 0.5), x), {"x": (3,)})
