"""Program passes: each preserves results on generated programs (hypothesis),
and each does its job on small programs written out."""

import funsor
import pytest
from funsor import ops
from funsor.domains import Reals
from hypothesis import given, settings
from hypothesis import strategies as st

from funsor_lowering import compile_funsor, trace_function
from funsor_lowering.ir.editor import PassResult
from funsor_lowering.ir.program import Operation, OpProgram, ValueType
from funsor_lowering.ops.extra_ops import getslice_op
from funsor_lowering.passes.pipeline import (
    defer_expands,
    eliminate_common_subexpressions,
    eliminate_dead_code,
    fold_constants,
    optimize,
    simplify,
    vectorize,
)

from .helpers import assert_matches, backend_randn

BACKEND = funsor.get_backend()
INPUTS = {"x": Reals[2, 3], "y": Reals[3]}
PASSES = [
    vectorize,
    fold_constants,
    simplify,
    defer_expands,
    eliminate_common_subexpressions,
    eliminate_dead_code,
]


def optimize_pipeline(program):
    """``optimize`` (which returns the program) as a pass."""
    optimized = optimize(program)
    return PassResult(optimized, optimized is not program)


def real(shape):
    return ValueType(shape, "real")


class ProgramSketch:
    """A program being generated: values with their shapes."""

    def __init__(self):
        self.constants = [0.0, 1.0, backend_randn(3)]  # dtype of the inputs
        self.shapes = [(), (), (3,), (2, 3), (3,)]  # constants, then x, y
        self.operations, self.types = [], []

    def emit(self, op, args, shape, packed=False):
        self.operations.append(Operation(op, tuple(args), packed))
        self.types.append(real(shape))
        self.shapes.append(shape)
        return len(self.shapes) - 1

    def values(self, shape):
        return [i for i, s in enumerate(self.shapes) if s == shape]

    def program(self, outputs):
        return OpProgram(
            self.constants,
            INPUTS,
            self.operations,
            tuple(outputs),
            value_types=self.types,
        )


STEPS = [
    "tanh",
    "neg",
    "neg_neg",
    "add",
    "mul",
    "add_zero",
    "mul_one",
    "zero_add",
    "transpose",
    "identity_permute",
    "permute_permute",
    "identity_reshape",
    "identity_expand",
    "reshape_reshape",
    "expand_expand",
    "getslice_getslice",
    "identity_getslice",
    "getslice_of_cat",
    "cat_of_slices",
    "unsqueeze",
    "expand_then_add",
    "expand_then_tanh",
    "expand_then_getslice",
    "transpose_op",
    "transposes_of_a_cube",
    "einsum_matvec",
    "einsum_of_permute",
    "permute_of_einsum",
    "repeat",
    "constant_op",
]


def apply_step(sketch, step, pick):
    """Append the operations of one generated step."""
    matrices, vectors = sketch.values((2, 3)), sketch.values((3,))
    tmatrices = sketch.values((3, 2))
    if step in ("tanh", "neg"):
        v = pick(matrices + vectors)
        op = ops.tanh if step == "tanh" else ops.neg
        sketch.emit(op, [v], sketch.shapes[v])
    elif step == "neg_neg":
        v = pick(matrices)
        sketch.emit(ops.neg, [sketch.emit(ops.neg, [v], (2, 3))], (2, 3))
    elif step in ("add", "mul"):
        a, b = pick(matrices), pick(matrices + vectors)
        sketch.emit(getattr(ops, step), [a, b], (2, 3))
    elif step in ("add_zero", "zero_add", "mul_one"):
        v = pick(matrices + vectors)
        c = 1 if step == "mul_one" else 0
        args = [c, v] if step == "zero_add" else [v, c]
        op = ops.mul if step == "mul_one" else ops.add
        sketch.emit(op, args, sketch.shapes[v])
    elif step == "transpose":
        sketch.emit(ops.PermuteOp(dims=(1, 0)), [pick(matrices)], (3, 2))
    elif step == "identity_permute":
        sketch.emit(ops.PermuteOp(dims=(0, 1)), [pick(matrices)], (2, 3))
    elif step == "permute_permute":
        t = sketch.emit(ops.PermuteOp(dims=(1, 0)), [pick(matrices)], (3, 2))
        sketch.emit(ops.PermuteOp(dims=(1, 0)), [t], (2, 3))
    elif step == "identity_reshape":
        sketch.emit(ops.ReshapeOp(shape=(2, 3)), [pick(matrices)], (2, 3))
    elif step == "identity_expand":
        sketch.emit(ops.ExpandOp(shape=(3,)), [pick(vectors)], (3,))
    elif step == "reshape_reshape":
        flat = sketch.emit(ops.ReshapeOp(shape=(6,)), [pick(matrices)], (6,))
        sketch.emit(ops.ReshapeOp(shape=(3, 2)), [flat], (3, 2))
    elif step == "expand_expand":
        row = sketch.emit(ops.ExpandOp(shape=(1, 3)), [pick(vectors)], (1, 3))
        sketch.emit(ops.ExpandOp(shape=(2, 3)), [row], (2, 3))
    elif step == "getslice_getslice":
        index = (Ellipsis, slice(1, 3))
        part = sketch.emit(getslice_op(index), [pick(matrices)], (2, 2))
        sketch.emit(getslice_op((None, 1)), [part], (1, 2))
    elif step == "identity_getslice":
        index, shape = pick(
            [((Ellipsis, slice(0, 3)), (2, 3)), ((Ellipsis, None), (2, 3, 1))]
        )
        sketch.emit(getslice_op(index), [pick(matrices)], shape)
    elif step == "getslice_of_cat":
        parts = [pick(matrices), pick(matrices)]
        both = sketch.emit(ops.CatOp(axis=0), parts, (4, 3), packed=True)
        index, shape = pick(
            [
                ((slice(2, 4),), (2, 3)),  # the second part
                ((slice(0, 2), 1), (2,)),
                ((3,), (3,)),
                ((slice(1, 3),), (2, 3)),  # across both: kept
            ]
        )
        sketch.emit(getslice_op(index), [both], shape)
    elif step == "cat_of_slices":
        # a partition of a matrix's columns (or rows), in some order, maybe
        # with another matrix's column between
        m, axis = pick(matrices), pick([0, 1])
        bounds = pick([[0, 1, 2, 3], [0, 2, 3], [0, 1, 3]] if axis else [[0, 1, 2]])
        ranges = list(zip(bounds, bounds[1:]))
        order = pick([ranges, ranges[::-1], ranges[1:] + ranges[:1]])
        parts = []
        for start, stop in order:
            index = (slice(None), slice(start, stop)) if axis else (slice(start, stop),)
            shape = (2, stop - start) if axis else (stop - start, 3)
            parts.append(sketch.emit(getslice_op(index), [m], shape))
        if axis and pick([False, True]):
            column = (slice(None), slice(0, 1))
            other = sketch.emit(getslice_op(column), [pick(matrices)], (2, 1))
            parts.insert(1, other)
        size = sum(sketch.shapes[p][axis] for p in parts)
        shape = (2, size) if axis else (size, 3)
        both = sketch.emit(ops.CatOp(axis=axis - 2), parts, shape, packed=True)
        start, stop = pick([(0, 1), (1, size), (0, size - 1), (1, 2)])
        index = (slice(None), slice(start, stop)) if axis else (slice(start, stop),)
        part_shape = (2, stop - start) if axis else (stop - start, 3)
        sketch.emit(getslice_op(index), [both], part_shape)
    elif step == "unsqueeze":
        row = sketch.emit(ops.UnsqueezeOp(dim=0), [pick(vectors)], (1, 3))
        sketch.emit(ops.ExpandOp(shape=(2, 3)), [row], (2, 3))
    elif step.startswith("expand_then"):
        wide = sketch.emit(ops.ExpandOp(shape=(2, 3)), [pick(vectors)], (2, 3))
        if step == "expand_then_add":
            sketch.emit(ops.add, [pick(matrices + vectors), wide], (2, 3))
        elif step == "expand_then_tanh":
            sketch.emit(ops.tanh, [wide], (2, 3))
        else:
            index, shape = pick([((1,), (3,)), ((Ellipsis, slice(1, 3)), (2, 2))])
            sketch.emit(getslice_op(index), [wide], shape)
    elif step == "transpose_op":
        axes = pick([(-1, -2), (0, 1), (1, -1)])  # the last: no change
        shape = (2, 3) if axes == (1, -1) else (3, 2)
        v = pick(matrices)
        sketch.emit(ops.TransposeOp(axis1=axes[0], axis2=axes[1]), [v], shape)
    elif step == "transposes_of_a_cube":
        # transposes and permutes of a rank-3 array, composed, then back
        v = sketch.emit(ops.ReshapeOp(shape=(2, 1, 3)), [pick(matrices)], (2, 1, 3))
        for _ in range(pick([1, 2, 3])):
            shape = sketch.shapes[v]
            if pick([True, False]):
                a, b = pick([(0, 1), (-1, -2), (0, 2), (2, -1)])
                dims = list(range(3))
                dims[a % 3], dims[b % 3] = dims[b % 3], dims[a % 3]
                op = ops.TransposeOp(axis1=a, axis2=b)
            else:
                dims = pick([(2, 0, 1), (1, 2, 0), (0, 2, 1)])
                op = ops.PermuteOp(dims=dims)
            v = sketch.emit(op, [v], tuple(shape[d] for d in dims))
        sketch.emit(ops.ReshapeOp(shape=(2, 3)), [v], (2, 3))
    elif step == "einsum_matvec":
        args = [pick(matrices), pick(vectors)]
        sketch.emit(ops.EinsumOp(equation="ab,b->a"), args, (2,), packed=True)
    elif step == "einsum_of_permute" and tmatrices:
        args = [pick(tmatrices), pick(matrices)]
        sketch.emit(ops.EinsumOp(equation="ba,ab->ab"), args, (2, 3), packed=True)
    elif step == "permute_of_einsum":
        e = sketch.emit(
            ops.EinsumOp(equation="ab,b->ab"),
            [pick(matrices), pick(vectors)],
            (2, 3),
            packed=True,
        )
        sketch.emit(ops.PermuteOp(dims=(1, 0)), [e], (3, 2))
    elif step == "repeat" and sketch.operations:
        k = pick(list(range(len(sketch.operations))))
        op = sketch.operations[k]
        sketch.emit(op.op, op.args, sketch.types[k].shape, op.packed)
    elif step == "constant_op":
        sketch.emit(ops.exp, [2], (3,))


@st.composite
def programs(draw):
    sketch = ProgramSketch()

    def pick(candidates):
        return draw(st.sampled_from(candidates))

    for step in draw(st.lists(st.sampled_from(STEPS), min_size=1, max_size=12)):
        apply_step(sketch, step, pick)
    operations = list(range(5, len(sketch.shapes)))
    if not operations:
        operations = [3]
    outputs = draw(st.lists(st.sampled_from(operations), min_size=1, max_size=3))
    return sketch.program(outputs)


@pytest.mark.parametrize(
    "run_pass", PASSES + [optimize_pipeline], ids=lambda p: p.__name__
)
@settings(deadline=None, max_examples=60)
@given(program=programs())
def test_pass_preserves_results(run_pass, program):
    arrays = {"x": backend_randn(2, 3), "y": backend_randn(3)}
    expected = program(**arrays)
    optimized, modified = run_pass(program)
    changed = (optimized.operations, len(optimized.constants), repr(optimized.output))
    if run_pass is not optimize_pipeline:
        assert modified == (
            changed
            != (program.operations, len(program.constants), repr(program.output))
        )
    assert optimized.input_types == program.input_types
    # defer_expands emits each operation it moves an expand past as two
    # (the old expand is left to dead code elimination)
    growth = len(program.operations) if run_pass is defer_expands else 1
    assert len(optimized.operations) <= len(program.operations) + growth
    assert_matches(optimized(**arrays), expected, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------- each pass's job
def sketch_program(build):
    sketch = ProgramSketch()
    out = build(sketch)
    return sketch.program([out])


def op_names(program):
    return [o.op.name for o in program.operations]


def test_cse_merges_equal_operations():
    def build(s):
        a, b = s.emit(ops.tanh, [3], (2, 3)), s.emit(ops.tanh, [3], (2, 3))
        return s.emit(ops.add, [a, b], (2, 3))

    program = eliminate_common_subexpressions(sketch_program(build)).program
    assert op_names(eliminate_dead_code(program).program) == ["tanh", "add"]


def test_dce_drops_unused_operations_and_constants():
    def build(s):
        s.emit(ops.exp, [4], (3,))  # unused
        return s.emit(ops.tanh, [3], (2, 3))

    program = eliminate_dead_code(sketch_program(build)).program
    assert op_names(program) == ["tanh"] and program.constants == ()


@settings(deadline=None, max_examples=30)
@given(program=programs())
def test_passes_report_no_change_at_the_fixed_point(program):
    optimized = optimize(program)
    for run_pass in PASSES:
        assert run_pass(optimized).modified is False, run_pass.__name__


@settings(deadline=None, max_examples=30)
@given(program=programs())
def test_optimize_runs_no_pass_again_on_a_program_it_left_unchanged(program):
    seen = []  # (pass, program it ran on, whether it changed it)

    def recording(run_pass):
        def run(p):
            result = run_pass(p)
            assert result.modified or result.program is p  # unchanged: itself
            seen.append((run_pass, p, result.modified))
            return result

        return run

    optimized = optimize(program, passes=tuple(map(recording, PASSES)))
    left_unchanged = {}
    for run_pass, p, modified in seen:
        assert left_unchanged.get(run_pass) is not p, run_pass.__name__
        if not modified:
            left_unchanged[run_pass] = p
    # and the result is the same fixed point as running every pass
    for run_pass in PASSES:
        assert run_pass(optimized).modified is False, run_pass.__name__


@pytest.mark.parametrize("through_cat", [False, True])
def test_slices_of_slices_and_of_cats_take_the_one_spelling_at_once(through_cat):
    # x[:, 1:3][:, 0] is x[:, 1], spelled as every slice is (whole slices as
    # ":"): one simplify gives it (was x[0:2, 1], spelled x[:, 1] by a later
    # round, which optimize may not run); likewise a part of a cat
    inputs = {"x": Reals[2, 3], "y": Reals[2, 2]}
    first = getslice_op((slice(None), slice(1, 3, 1)))
    operations = [Operation(first, (0,))]
    if through_cat:  # cat(x, y)[:, 0:3][:, 1:3][:, 0]
        operations = [
            Operation(ops.CatOp(axis=-1), (0, 1), packed=True),
            Operation(getslice_op((slice(0, 2, 1), slice(0, 3, 1))), (2,)),
            Operation(first, (3,)),
        ]
    last = len(operations) + 1
    operations.append(Operation(getslice_op((slice(None), 0)), (last,)))
    program = OpProgram([], inputs, operations, last + 1)
    simplified = eliminate_dead_code(simplify(program).program).program
    ((operation,),) = [simplified.operations]
    assert operation.op.defaults["index"] == (slice(None), 1)
    assert simplify(simplified).modified is False
    arrays = {k: backend_randn(*d.shape) for k, d in inputs.items()}
    assert_matches(simplified(**arrays), program(**arrays), rtol=0, atol=0)


def test_simplify_removes_identities_and_units():
    def build(s):
        v = s.emit(ops.PermuteOp(dims=(0, 1)), [3], (2, 3))
        v = s.emit(ops.add, [v, 0], (2, 3))
        v = s.emit(ops.mul, [1, v], (2, 3))
        v = s.emit(ops.neg, [s.emit(ops.neg, [v], (2, 3))], (2, 3))
        t = s.emit(ops.PermuteOp(dims=(1, 0)), [v], (3, 2))
        v = s.emit(ops.PermuteOp(dims=(1, 0)), [t], (2, 3))
        return s.emit(ops.tanh, [v], (2, 3))

    assert op_names(optimize(sketch_program(build))) == ["tanh"]


def test_simplify_composes_transposes_and_permutes():
    def build(s):
        t = s.emit(ops.TransposeOp(axis1=-1, axis2=-2), [3], (3, 2))
        back = s.emit(ops.TransposeOp(axis1=0, axis2=1), [t], (2, 3))
        cube = s.emit(ops.ReshapeOp(shape=(2, 3, 1)), [back], (2, 3, 1))
        p = s.emit(ops.PermuteOp(dims=(2, 0, 1)), [cube], (1, 2, 3))
        q = s.emit(ops.TransposeOp(axis1=0, axis2=-1), [p], (3, 2, 1))
        return s.emit(ops.tanh, [q], (3, 2, 1))

    program = sketch_program(build)
    optimized = optimize(program)
    # the first two cancel; the last two are one permute
    assert op_names(optimized) == ["reshape", "permute", "tanh"]
    assert optimized.operations[1].op.defaults["dims"] == (1, 0, 2)
    arrays = {"x": backend_randn(2, 3), "y": backend_randn(3)}
    assert_matches(optimized(**arrays), program(**arrays))


def test_simplify_composes_reshapes_and_expands():
    def build(s):
        flat = s.emit(ops.ReshapeOp(shape=(6,)), [3], (6,))
        t = s.emit(ops.ReshapeOp(shape=(3, 2)), [flat], (3, 2))
        row = s.emit(ops.ExpandOp(shape=(1, 3)), [4], (1, 3))
        wide = s.emit(ops.ExpandOp(shape=(2, 3)), [row], (2, 3))
        back = s.emit(ops.ReshapeOp(shape=(2, 3)), [t], (2, 3))
        return s.emit(ops.add, [back, wide], (2, 3))

    program = sketch_program(build)
    optimized = optimize(program)
    # back is x itself; the expands compose into one, which the add's own
    # broadcasting makes unneeded (defer_expands)
    assert op_names(optimized) == ["add"]
    arrays = {"x": backend_randn(2, 3), "y": backend_randn(3)}
    assert_matches(optimized(**arrays), program(**arrays))


def test_simplify_composes_getslices():
    def build(s):
        part = s.emit(getslice_op((Ellipsis, slice(1, 3))), [3], (2, 2))
        row = s.emit(getslice_op((1,)), [part], (2,))
        return s.emit(ops.tanh, [row], (2,))

    program = sketch_program(build)
    optimized = optimize(program)
    assert op_names(optimized) == ["getslice", "tanh"]
    arrays = {"x": backend_randn(2, 3), "y": backend_randn(3)}
    assert_matches(optimized(**arrays), program(**arrays))


def test_unit_with_broadcasting_or_array_constant_is_kept():
    def build(s):
        # y + 0-array of shape (2, 3) broadcasts: not an identity
        zeros = s.emit(ops.mul, [3, 0], (2, 3))
        return s.emit(ops.add, [4, zeros], (2, 3))

    program = optimize(sketch_program(build))
    assert "add" in op_names(program)


def test_permutes_fold_into_einsums():
    def build(s):
        t = s.emit(ops.PermuteOp(dims=(1, 0)), [3], (3, 2))
        e = s.emit(ops.EinsumOp(equation="ba,b->ab"), [t, 4], (2, 3), packed=True)
        return s.emit(ops.PermuteOp(dims=(1, 0)), [e], (3, 2))

    program = optimize(sketch_program(build))
    assert op_names(program) == ["einsum"]
    assert program.operations[0].op.defaults["equation"] == "ab,b->ba"
    arrays = {"x": backend_randn(2, 3), "y": backend_randn(3)}
    assert_matches(program(**arrays), sketch_program(build)(**arrays))


def test_constant_folding_computes_constants_but_never_draws():
    def build(s):
        e = s.emit(ops.exp, [2], (3,))
        return s.emit(ops.add, [e, 4], (3,))

    program = fold_constants(sketch_program(build)).program
    assert op_names(eliminate_dead_code(program).program) == ["add"]

    def draw(x):  # two equal draws: neither folded nor merged
        return ops.add(ops.randn(x, (3,)), ops.randn(x, (3,)))

    if BACKEND != "jax":  # (jax draws need a key: tested with the tracer)
        traced = trace_function(draw, {"x": backend_randn(3)})
        assert op_names(traced).count("randn") == 2


def test_compiled_programs_are_optimized():
    from funsor.terms import Variable

    x = Variable("x", Reals[3])
    program = compile_funsor((x + 0) * 1 + x.exp() + x.exp())
    assert op_names(program).count("exp") == 1
    assert "mul" not in op_names(program)
