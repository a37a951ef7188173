"""``program.vmap(in_axes)``: the same program over a new leading batch axis.

Each operation is rewritten once, by the rules that batch isomorphic
operations in ``vectorize`` (elementwise ops, reductions, layout ops,
``einsum``, ``matmul``, ``cat``, both ``logsumexp_scan`` s) and
funsor_lowering's batch rules
(:func:`funsor_lowering.ops.batching.batch_op`: ops on trailing axes, axis
parameters counted from the end). A value computed from a batched value is
batched; others stay as they are (one copy serves every batch member).
The result is one operation per operation, whatever the batch size: a
:class:`VmappedProgram` instantiates it per batch size on first use.

Example::

    >>> import numpy as np
    >>> from funsor.domains import Reals
    >>> from funsor.terms import Variable
    >>> from funsor_lowering import compile_funsor
    >>> a, x = Variable("a", Reals[2, 2]), Variable("x", Reals[2])
    >>> program = compile_funsor((a @ x).exp().sum())
    >>> batched = program.vmap({"a": None, "x": 0})
    >>> batched(a=np.eye(2), x=np.zeros((5, 2)))
    array([2., 2., 2., 2., 2.])
    >>> len(batched.for_size(1000).operations) == len(batched.operations)
    True
"""

import threading
from collections import OrderedDict

from funsor import ops

from ..ir.editor import Editor, Ref
from ..ir.program import OpProgram, ValueType
from ..ir.structure import map_leaves
from ..ops.batching import batch_op
from ..ops.extra_ops import (
    RANDOM_OP_TYPES,
    LogsumexpScanEmittingOp,
    LogsumexpScanOp,
    QrProjectOp,
    TriangularSolveVectorsOp,
    TupleItemOp,
    VecdotOp,
)
from ..ops.op_rules import OpRules
from ..passes import vectorize
from ..passes.broadcasts import CORE_DIMS
from ..passes.matmuls import emit_matmul
from ..passes.pipeline import optimize
from .entry import prepared

# Ops whose result depends on an operand's dtype only (never batched).
_SHAPE_ONLY = (
    ops.NewArangeOp,
    ops.NewZerosOp,
    ops.NewFullOp,
    ops.NewEyeOp,
    ops.FinfoOp,
)
# Ops on the trailing axes of one operand, with no parameters to rewrite.
_TRAILING = (ops.QrOp, ops.CholeskyOp, ops.CholeskyInverseOp, ops.TriangularInvOp)
# Sizes a VmappedProgram keeps instantiated (least recently used dropped).
MAX_SIZES = 8


def batched_program(program, in_axes, size):
    """``program`` over a leading axis of ``size`` for every input whose
    ``in_axes`` entry is 0 (``None``: shared); outputs get the axis too.
    Raises ``NotImplementedError`` naming an operation with no batch rule."""
    _check_in_axes(program, in_axes)
    types = program.value_types
    inputs = OrderedDict()
    for name, spec in program.input_types.items():
        if in_axes.get(name) == 0:
            spec = map_leaves(lambda t: _batched_type(t, size), spec)
        inputs[name] = spec
    editor = Editor(inputs, program.backend, program.constants)
    batched = set()  # refs of batched values
    for i in range(len(program.constants)):
        editor.remap[i] = Ref("c", i)
    first_input = len(program.constants)
    for k, (name, _, _) in enumerate(program._input_leaves):
        ref = editor.input(k)
        editor.remap[first_input + k] = ref
        if in_axes.get(name) == 0:
            batched.add(ref)
    for k, operation in enumerate(program.operations):
        value = program.first_operation + k
        refs = [editor.remap[a] for a in operation.args]
        flags = [r in batched for r in refs]
        member = types[value]
        if not any(flags) or isinstance(operation.op, _SHAPE_ONLY):
            ref = editor.emit(operation.op, refs, operation.packed, member)
        else:
            arg_types = [types[a] for a in operation.args]
            ref = _batch(editor, operation, refs, flags, arg_types, member, size)
            batched.add(ref)
        editor.remap[value] = ref

    def output(value):
        ref = editor.remap[value]
        member = types[value]
        if ref in batched or member is None:
            return ref
        shape = (size,) + member.shape  # an output shared by every member
        return editor.emit(
            ops.ExpandOp(shape=shape), (ref,), False, ValueType(shape, member.kind)
        )

    return prepared(optimize(editor.finish(map_leaves(output, program.output))))


def _batch(editor, operation, refs, flags, arg_types, member, size):
    op = operation.op
    where = f"{op!r} (in vmap)"
    if isinstance(op, RANDOM_OP_TYPES):
        raise NotImplementedError(
            f"{where}: random draws are not batched (their numbers would "
            f"differ from a loop's); vmap programs without random ops"
        )
    if isinstance(op, TupleItemOp):
        return _batch_item(editor, operation, refs, member, size)
    if member is None and not isinstance(op, _TRAILING + (QrProjectOp,)):
        raise NotImplementedError(f"{where}: the result's shape is unknown")
    if None in arg_types:
        raise NotImplementedError(f"{where}: an argument's shape is unknown")
    own_rule = _OWN_RULES.rule(op)
    if own_rule is not None:
        return own_rule(editor, operation, refs, flags, arg_types, member, size)
    if vectorize._has_rule(operation):
        rule = vectorize._rule(operation, flags, arg_types, member, size)
        if rule is None and not all(flags) and not _elementwise(op):
            # every argument batched: the shared ones broadcast first
            refs = [
                r if f else _broadcast(editor, r, t, size)
                for r, f, t in zip(refs, flags, arg_types)
            ]
            flags = [True] * len(refs)
            rule = vectorize._rule(operation, flags, arg_types, member, size)
        if rule is not None:
            return rule(editor, refs)
    if isinstance(op, _TRAILING) and len(refs) == 1:
        value_type = None if member is None else _batched_type(member, size)
        return editor.emit(op, refs, operation.packed, value_type)
    rank = max(len(t.shape) for t in arg_types)
    new_op = batch_op(op, (size,), rank)
    if new_op is None or operation.packed:
        raise NotImplementedError(
            f"{where}: no batch rule for {type(op).__name__}; supported: "
            f"elementwise ops, reductions, layout ops, einsum, matmul, "
            f"gathers (take), cat, stack, triangular_solve, qr, cholesky and "
            f"ops on trailing axes"
        )
    aligned = [
        vectorize._align(editor, r, t, rank, size) if f else r
        for r, f, t in zip(refs, flags, arg_types)
    ]
    return editor.emit(new_op, aligned, operation.packed, _batched_type(member, size))


# Ops vmap batches by a rule of its own (the rest: the vectorize pass's
# batch rules, or the op on one more leading axis).
_OWN_RULES = OpRules("vmap")


@_OWN_RULES.register(QrProjectOp)
def _batch_qr_project(editor, operation, refs, flags, arg_types, member, size):
    if not flags[0]:  # R is M's, batched as the result: M per member
        refs = [_broadcast(editor, refs[0], arg_types[0], size), refs[1]]
        flags = [True, flags[1]]
    refs, _ = _lined_up(editor, refs, flags, arg_types, size)
    return editor.emit(operation.op, refs, operation.packed, None)


@_OWN_RULES.register(VecdotOp, TriangularSolveVectorsOp)
def _batch_on_core_dims(editor, operation, refs, flags, arg_types, member, size):
    cores = CORE_DIMS.rule(operation.op).ranks
    refs, _ = _lined_up(editor, refs, flags, arg_types, size, cores)
    value_type = _batched_type(member, size)
    return editor.emit(operation.op, refs, operation.packed, value_type)


@_OWN_RULES.register(ops.MatmulOp)
def _batch_matmul_operation(editor, operation, refs, flags, arg_types, member, size):
    return _batch_matmul(editor, refs, flags, arg_types, member, size)


@_OWN_RULES.register(LogsumexpScanOp, LogsumexpScanEmittingOp)
def _batch_scan(editor, operation, refs, flags, arg_types, member, size):
    # broadcasts leading axes itself
    value_type = _batched_type(member, size)
    return editor.emit(operation.op, refs, operation.packed, value_type)


def _batch_item(editor, operation, refs, member, size):
    """Item ``k`` of a batched op with several results; ``R`` of a
    ``qr_project`` whose ``M`` got unit axes to line up with ``u`` (its
    leading axes are ``M``'s) is reshaped without them."""
    op, value_type = operation.op, _batched_type(member, size)
    producer = editor.producer(refs[0])
    is_r = isinstance(getattr(producer, "op", None), QrProjectOp)
    m_type = editor.value_type(producer.args[0]) if is_r else None
    if is_r and not op.defaults["index"] and m_type is not None:
        cols = m_type.shape[-1]
        r_type = ValueType(m_type.shape[:-2] + (cols, cols), m_type.kind)
        if r_type.shape != value_type.shape:
            r = editor.emit(op, refs, operation.packed, r_type)
            reshape = ops.ReshapeOp(shape=value_type.shape)
            return editor.emit(reshape, [r], False, value_type)
    return editor.emit(op, refs, operation.packed, value_type)


def _batch_matmul(editor, refs, flags, arg_types, member, size):
    """``a @ b`` with batched operands: a batched vector is a batched row
    (left) or column (right) matrix (shared operands broadcast as matmul
    broadcasts)."""
    vectors = [f and len(t.shape) == 1 for f, t in zip(flags, arg_types)]
    refs, types = _lined_up(editor, refs, flags, arg_types, size)
    return emit_matmul(editor, refs, types, vectors, _batched_type(member, size))


def _elementwise(op):
    return isinstance(op, vectorize.UNARY_ELEMENTWISE + vectorize.BINARY_ELEMENTWISE)


def _lined_up(editor, refs, flags, arg_types, size, cores=(2, 2)):
    """``(refs, types)`` of the operands of an op on their last ``cores``
    axes (matmul, ``qr_project``: two each) whose leading axes broadcast
    from the right: a batched operand with fewer leading axes than another
    gets unit axes after the batch axis, so that the batch axis stays
    first."""
    leading = max(max(len(t.shape) - c, 0) for t, c in zip(arg_types, cores))
    aligned, types = [], []
    for ref, batched, value_type, core in zip(refs, flags, arg_types, cores):
        if batched:
            units = leading - max(len(value_type.shape) - core, 0)
            shape = (size,) + (1,) * units + value_type.shape
            batched_type = ValueType(shape, value_type.kind)
            if units:
                reshape = ops.ReshapeOp(shape=shape)
                ref = editor.emit(reshape, [ref], False, batched_type)
            value_type = batched_type
        aligned.append(ref)
        types.append(value_type)
    return aligned, types


def _broadcast(editor, ref, value_type, size):
    shape = (size,) + value_type.shape
    return editor.emit(
        ops.ExpandOp(shape=shape), (ref,), False, ValueType(shape, value_type.kind)
    )


def _batched_type(value_type, size):
    return ValueType((size,) + tuple(value_type.shape), value_type.kind)


def _check_in_axes(program, in_axes):
    unknown = [k for k in in_axes if k not in program.input_types]
    bad = {k: v for k, v in in_axes.items() if v not in (0, None)}
    if unknown or bad or 0 not in in_axes.values():
        raise ValueError(
            f"vmap(in_axes={in_axes!r}): expected a dict from input names of "
            f"this program ({', '.join(map(repr, program.inputs))}) to 0 (a new "
            f"leading batch axis) or None (shared), with at least one 0"
            + (f"; unknown inputs {unknown}" if unknown else "")
        )


class VmappedProgram(OpProgram):
    """A program mapped over a leading batch axis of any size. It is, as an
    :class:`OpProgram`, its instance for a batch of 2 (what ``print``,
    ``stats()`` and ``as_code()`` show); a call with another batch size runs
    the instance for that size, made on first use (same operations, other
    shapes)."""

    TEMPLATE_SIZE = 2

    def __init__(self, source, in_axes):
        self.source = source
        self.in_axes = dict(in_axes)
        template = batched_program(source, self.in_axes, self.TEMPLATE_SIZE)
        super().__init__(
            template.constants,
            template.input_types,
            template.operations,
            template.output,
            value_types=template._operation_types,
            backend=template.backend,
        )
        self._sizes = OrderedDict({self.TEMPLATE_SIZE: template})
        self._sizes_lock = threading.Lock()
        self._batched_leaves = [
            (name, path)
            for name, path, _ in source._input_leaves
            if self.in_axes.get(name) == 0
        ]

    def __reduce__(self):
        return (VmappedProgram, (self.source, self.in_axes))

    def batch_size(self, kwargs):
        """The leading size of the batched inputs of a call (they must agree)."""
        sizes = set()
        for name, path in self._batched_leaves:
            value = kwargs.get(name)
            for key in path:
                try:
                    value = value[key]
                except (TypeError, KeyError, IndexError):
                    return None  # the template's checks name the problem
            shape = getattr(value, "shape", None)
            if not shape:
                raise ValueError(
                    f"input {name!r}: expected a batch axis first (vmap over "
                    f"{name!r}), got {type(value).__name__} of shape {shape}"
                )
            sizes.add(shape[0])
        if len(sizes) > 1:
            raise ValueError(
                f"batched inputs have different leading sizes {sorted(sizes)} "
                f"(vmap over {', '.join(n for n, _ in self._batched_leaves)})"
            )
        return sizes.pop() if sizes else None

    def for_size(self, size):
        """The program for a batch of ``size``."""
        with self._sizes_lock:
            program = self._sizes.get(size)
            if program is not None:
                self._sizes.move_to_end(size)
                return program
        program = batched_program(self.source, self.in_axes, size)
        with self._sizes_lock:
            self._sizes[size] = program
            while len(self._sizes) > MAX_SIZES:
                self._sizes.popitem(last=False)
        return program

    def __call__(self, *args, **kwargs):
        size = None if args else self.batch_size(kwargs)
        if size is None or size == self.TEMPLATE_SIZE:
            return super().__call__(*args, **kwargs)
        return self.for_size(size)(**kwargs)

    def to(self, device):
        """This mapped program with its constants on ``device``, for any
        batch size (see :meth:`OpProgram.to`)."""
        return VmappedProgram(self.source.to(device), self.in_axes)

    def jit(self, compiler=None):
        sizes = {}

        def call(**kwargs):
            size = self.batch_size(kwargs)
            if size not in sizes:
                sizes[size] = self.for_size(size).jit(compiler)
            return sizes[size](**kwargs)

        return call


__all__ = ["VmappedProgram", "batched_program"]
