"""Vectorization: a group of isomorphic operations becomes one batched
operation, as SLP vectorization does in compilers, or ``jax.vmap`` applied
after the fact.

funsor sometimes unrolls a computation before it reaches us: a
``sequential_sum_product`` built under ``lazy`` is a tree of per-step
contractions, one op per step and level. Such programs hold many operations
that apply the same op, with the same parameters and types, to values that
differ only in constants or in which member of an earlier group they read.

A **group** is operations that

- stand at the same depth (longest path from the program's inputs), so no
  member reads another;
- apply the same op with the same argument and result types;
- read, at each argument position, one shared value, or constants, or
  members of one batched group.

The batched operation stacks the members along a new leading axis. It reads
the stacked constants, the earlier group's batched value (whole, a strided
slice, or gathered by an index constant), or the shared value, broadcast.
Slices ``x[i, ...]`` of one array at several integers ``i`` (a chain's
factors, planned in rounds by ``rules/contraction.py``) form a group too:
one strided slice of ``x``, or a gather.
Members that unbatched operations or the output read are taken back out
with ``getitem``. Random operations are never batched and keep their order.

Example::

    >>> import numpy as np
    >>> from funsor import ops
    >>> from funsor.domains import Reals
    >>> from funsor_lowering.ir.program import OpProgram, Operation, ValueType
    >>> t = ValueType((3,), "real")
    >>> leaves = [Operation(ops.mul, (8, k)) for k in range(8)]  # x * c_k
    >>> pairs = [Operation(ops.add, (9 + k, 10 + k)) for k in (0, 2, 4, 6)]
    >>> quads = [Operation(ops.add, (17, 18)), Operation(ops.add, (19, 20))]
    >>> p = OpProgram(
    ...     [np.full(3, float(k)) for k in range(8)],
    ...     {"x": Reals[3]},
    ...     leaves + pairs + quads + [Operation(ops.mul, (21, 22))],
    ...     23,
    ...     value_types=[t] * 15,
    ... )
    >>> q = vectorize(p, min_group=2).program
    >>> print(q)
    OpProgram(x: real[3]) on numpy:
      c0: real[8,3] = array
      c1: int[] = 0
      c2: int[] = 1
      mul: real[8,3] = mul(x, c0)
      getslice: real[4,3] = getslice(mul, index=slice(0, 7, 2))
      getslice_1: real[4,3] = getslice(mul, index=slice(1, 8, 2))
      add: real[4,3] = add(getslice, getslice_1)
      getslice_2: real[2,3] = getslice(add, index=slice(0, 3, 2))
      getslice_3: real[2,3] = getslice(add, index=slice(1, 4, 2))
      add_1: real[2,3] = add(getslice_2, getslice_3)
      getitem: real[3] = getitem(add_1, c1)
      getitem_1: real[3] = getitem(add_1, c2)
      mul_1: real[3] = mul(getitem, getitem_1)
      return mul_1
    >>> x = np.array([1.0, 2.0, 3.0])
    >>> bool(np.allclose(q(x=x), p(x=x)))
    True
"""

import numbers
import string
import typing

import numpy as np
from funsor import ops

from ..ir.editor import Editor, PassResult
from ..ir.program import ValueType, array_backend
from ..ir.structure import map_leaves
from ..ops.extra_ops import (
    RANDOM_OP_TYPES,
    LogspaceEinsumOp,
    TakeOp,
    getslice_op,
    take,
)
from ..ops.op_rules import OpRules
from .cat_slices import as_slice

# Smallest group worth batching: below it, the gathers and the members
# taken back out cost about as much as the operations saved.
MIN_GROUP = 4

UNARY_ELEMENTWISE = (
    ops.AbsOp,
    ops.AtanhOp,
    ops.ExpOp,
    ops.InvertOp,
    ops.IsnanOp,
    ops.LgammaOp,
    ops.Log1pOp,
    ops.LogOp,
    ops.NegOp,
    ops.ReciprocalOp,
    ops.SigmoidOp,
    ops.SoftplusOp,
    ops.SqrtOp,
    ops.TanhOp,
)
BINARY_ELEMENTWISE = (
    ops.AddOp,
    ops.AndOp,
    ops.ComparisonOp,
    ops.LogaddexpOp,
    ops.MaxOp,
    ops.MinOp,
    ops.MulOp,
    ops.OrOp,
    ops.PowOp,
    ops.SubOp,
    ops.TruedivOp,
    ops.XorOp,
)
REDUCTIONS = (
    ops.AllOp,
    ops.AmaxOp,
    ops.AminOp,
    ops.AnyOp,
    ops.LogsumexpOp,
    ops.MeanOp,
    ops.ProdOp,
    ops.SumOp,
)


class _Group:
    """Members (value numbers) computed by one batched value ``ref``."""

    __slots__ = ("members", "ref", "member_type")

    def __init__(self, members, ref, member_type):
        self.members = members
        self.ref = ref
        self.member_type = member_type


def vectorize(program, min_group=MIN_GROUP):
    """Batch each group of at least ``min_group`` isomorphic operations into
    one operation (see the module docstring). Returns a
    :class:`~funsor_lowering.passes.pipeline.PassResult`; the program is
    unchanged if batching would not make it shorter."""
    types = program.value_types
    first = program.first_operation
    depth = _depths(program)
    backend = array_backend(program.backend)

    keys, buckets = _buckets(program, types, depth)
    editor = Editor.of(program)
    refs = _Refs(editor)
    ref_of = refs.ref_of

    done = set()
    order = sorted(range(len(program.operations)), key=lambda k: depth[first + k])
    for k in order:
        value = first + k
        if value in done:
            continue
        key = keys[k]
        if key is not None and len(buckets[key]) >= min_group:
            batched = _batch_bucket(
                editor, program, types, buckets[key], refs, backend, min_group
            )
            done.update(buckets[key])
            unbatched = [v for v in buckets[key] if v not in batched]
        else:
            unbatched = [value]
        for v in unbatched:
            done.add(v)
            op = program.operations[v - first]
            editor.remap[v] = editor.emit(
                op.op, [ref_of(a) for a in op.args], op.packed, types[v]
            )
    output = map_leaves(ref_of, program.output)
    result = editor.finish(output, editor.live(output))
    if len(result.operations) >= len(program.operations):
        return PassResult(program, False)
    return PassResult(result, True)


def _buckets(program, types, depth):
    """Each operation's bucket key (``None``: never batched) and the
    operations of each key, in program order."""
    first = program.first_operation
    keys = [
        _bucket_key(operation, first + k, types, depth[first + k])
        for k, operation in enumerate(program.operations)
    ]
    buckets = {}
    for k, key in enumerate(keys):
        if key is not None:
            buckets.setdefault(key, []).append(first + k)
    return keys, buckets


class _Refs:
    """Where the vectorized program has each value of the original: a
    member of a batched group is taken out of it (``group[j]``) where it
    is read outside its group."""

    def __init__(self, editor):
        self.editor = editor
        self.group_of = {}  # value number -> (group, index in group)
        self.taken_out = {}  # value number -> ref of the member taken out
        self.numbers = {}  # Python int -> constant ref

    def number(self, j):
        if j not in self.numbers:
            self.numbers[j] = self.editor.add_constant(j)
        return self.numbers[j]

    def ref_of(self, value):
        if value not in self.group_of:
            return self.editor.remap[value]
        if value not in self.taken_out:
            group, j = self.group_of[value]
            self.taken_out[value] = self.editor.emit(
                ops.GetitemOp(offset=0),
                (group.ref, self.number(j)),
                False,
                group.member_type,
            )
        return self.taken_out[value]


def _batch_bucket(editor, program, types, bucket, refs, backend, min_group):
    """Batch the groups of one bucket's operations that can be (of at least
    ``min_group``); returns the operations batched."""
    group_of, number = refs.group_of, refs.number
    batched = set()
    for members in _split(program, bucket, group_of):
        members = _layout_order(program, types, members, group_of)
        if len(members) >= min_group and _batch(
            editor, program, types, members, group_of, backend, number
        ):
            batched.update(members)
    return batched


def _depths(program):
    """Each value's longest path from the inputs; random operations are
    chained so that batching, which emits by depth, keeps their order."""
    depth = [0] * program.first_operation
    last_random = 0
    for operation in program.operations:
        d = 1 + max((depth[a] for a in operation.args), default=0)
        if isinstance(operation.op, RANDOM_OP_TYPES):
            d = max(d, last_random + 1)
            last_random = d
        depth.append(d)
    return depth


def _bucket_key(operation, value, types, depth):
    if isinstance(operation.op, RANDOM_OP_TYPES) or not _has_rule(operation):
        return None
    arg_types = tuple(types[a] for a in operation.args)
    if types[value] is None or None in arg_types:
        return None
    op = operation.op
    if _leading_index(operation) is not None:  # x[i, ...] for several i
        op = ("getslice", repr(_index_tuple(op)[1:]))
    return (depth, op, operation.packed, arg_types, types[value])


def _index_tuple(op):
    index = op.defaults["index"]
    return index if isinstance(index, tuple) else (index,)


def _leading_index(operation):
    """``i`` where ``operation`` is ``getslice(x, (i, ...))`` with an integer
    ``i``, else ``None``."""
    if not isinstance(operation.op, ops.GetsliceOp):
        return None
    index = _index_tuple(operation.op)
    first = index[0] if index else None
    if isinstance(first, numbers.Integral) and not isinstance(first, bool):
        return int(first)
    return None


def _leading_position(operation, types):
    """:func:`_leading_index` counted from the front of the sliced axis."""
    i = _leading_index(operation)
    return None if i is None else i % types[operation.args[0]].shape[0]


def _split(program, members, group_of):
    """Split a bucket by what each argument position reads: one shared
    value, constants to stack, or members of one batched group."""
    subgroups = {}
    for value in members:
        operation = program.operations[value - program.first_operation]
        key = tuple(_source(program, a, group_of) for a in operation.args)
        subgroups.setdefault(key, []).append(value)
    return [
        m
        for key, m in subgroups.items()
        if any(s[0] != "shared" for s in key)
        or _leading_index(program.operations[m[0] - program.first_operation])
        is not None
    ]


def _layout_order(program, types, members, group_of):
    """Members in the order their batched value lays them out: slices
    ``x[i]`` by ``i``, other operations by the positions of what they read
    in earlier groups (program order breaks ties). Members are independent,
    so any order is correct; this one lets a chain's next round read its
    neighbours as strided slices rather than gathers."""
    first = program.first_operation

    def key(value):
        operation = program.operations[value - first]
        position = _leading_position(operation, types)
        if position is not None:
            return (position,)
        return tuple(group_of[a][1] if a in group_of else -1 for a in operation.args)

    return sorted(members, key=key)


def _source(program, arg, group_of):
    if arg in group_of:
        return ("group", id(group_of[arg][0]))
    if arg < len(program.constants):
        constant = program.constants[arg]
        if isinstance(constant, bool) or not isinstance(constant, numbers.Number):
            if hasattr(constant, "shape"):  # arrays stack if of one dtype
                return ("stack", str(constant.dtype))
            return ("shared", arg)
        if isinstance(constant, numbers.Integral):
            return ("stack",)
        return ("shared", type(constant), constant)  # equal floats share
    return ("shared", arg)


def _batch(editor, program, types, members, group_of, backend, number):
    """Emit the batched operation of ``members``; False where no rule applies."""
    first = program.first_operation
    operation = program.operations[members[0] - first]
    n = len(members)
    args = [program.operations[v - first].args for v in members]
    # a position reads a shared value unless its members differ or are
    # members of a batched group
    flags = [
        any(a[pos] != args[0][pos] for a in args) or args[0][pos] in group_of
        for pos in range(len(args[0]))
    ]
    arg_types = [types[a] for a in args[0]]
    if _leading_index(operation) is not None and not any(flags):
        ref = _batch_leading_index(editor, program, members, types, backend)
        group = _Group(members, ref, types[members[0]])
        for j, v in enumerate(members):
            group_of[v] = (group, j)
        return True
    if not any(flags):
        return False
    rule = _rule(operation, flags, arg_types, types[members[0]], n)
    if rule is None or _stacks_unstackable(program, args, flags, group_of, backend):
        return False
    refs = []
    for pos, batched in enumerate(flags):
        column = [a[pos] for a in args]
        if not batched:
            refs.append(editor.remap[column[0]])
        elif column[0] in group_of:
            refs.append(_gather(editor, column, group_of, arg_types[pos], backend))
        else:
            values = [program.constants[a] for a in column]
            refs.append(editor.add_constant(_stack(values, backend)))
    member_type = types[members[0]]
    ref = rule(editor, refs)
    group = _Group(members, ref, member_type)
    for j, v in enumerate(members):
        group_of[v] = (group, j)
    return True


def _batch_leading_index(editor, program, members, types, backend):
    """``x[i_k, rest]`` for members ``k`` (one shared ``x``): a strided slice
    ``x[start:stop:step, rest]`` where the ``i_k`` increase evenly, else a
    gather ``x[index][:, rest]``."""
    first = program.first_operation
    operations = [program.operations[v - first] for v in members]
    (source,) = operations[0].args
    index = [_leading_position(o, types) for o in operations]
    rest = _index_tuple(operations[0].op)[1:]
    member = types[members[0]]
    value_type = ValueType((len(members),) + member.shape, member.kind)
    strided = as_slice(np.array(index))
    if strided is not None:
        op = getslice_op((strided,) + rest)
        return editor.emit(op, (editor.remap[source],), False, value_type)
    positions = editor.add_constant(backend.from_numpy(np.array(index, np.int64)))
    gathered_type = ValueType((len(members),) + types[source].shape[1:], member.kind)
    gathered = editor.emit(
        ops.GetitemOp(offset=0),
        (editor.remap[source], positions),
        False,
        gathered_type,
    )
    if not rest:
        return gathered
    op = getslice_op((slice(None),) + rest)
    return editor.emit(op, (gathered,), False, value_type)


def _gather(editor, column, group_of, member_type, backend):
    """The batched value holding ``column`` (members of one group) in order."""
    group = group_of[column[0]][0]
    index = [group_of[a][1] for a in column]
    n = len(index)
    value_type = ValueType((n,) + member_type.shape, member_type.kind)
    if index == list(range(len(group.members))):
        return group.ref
    strided = as_slice(np.array(index))
    if strided is not None:
        op = getslice_op((strided,))
        return editor.emit(op, (group.ref,), False, value_type)
    positions = editor.add_constant(backend.from_numpy(np.array(index, np.int64)))
    return editor.emit(
        ops.GetitemOp(offset=0), (group.ref, positions), False, value_type
    )


def _stacks_unstackable(program, args, flags, group_of, backend):
    """Whether a batched argument would stack constants that must stay as
    they are: Python floats (their array would have a dtype of its own,
    float64, where each number takes the dtype of the array it meets), or
    arrays that require grad (a stacked copy would freeze them)."""
    for pos, batched in enumerate(flags):
        column = [a[pos] for a in args]
        if batched and column[0] not in group_of:
            values = [program.constants[a] for a in column]
            if any(isinstance(v, float) or backend.requires_grad(v) for v in values):
                return True
    return False


def _stack(values, backend):
    if isinstance(values[0], numbers.Integral):
        return backend.from_numpy(np.array(values, np.int64))
    return ops.stack(tuple(values), 0)


# ------------------------------------------------------------------ rules
# Batch rules, per op type: ``applies(op)`` says whether the rule batches an
# op of these parameters; ``emitter(batching)`` gives a function
# ``(editor, refs) -> ref`` emitting the batched operation, or ``None``
# where these arguments cannot be batched so.
BATCH_RULES = OpRules("batch rules")


class BatchRule(typing.NamedTuple):
    """A batch rule: whether it applies to an op (by its parameters), and
    its emitter (a :class:`_Batching` -> a ref, or ``None``)."""

    applies: typing.Callable
    emitter: typing.Callable


def batch_rule(*op_types, applies=lambda op: True):
    """Register a batch rule for ``op_types`` (see ``BATCH_RULES``)."""

    def register(emitter):
        BATCH_RULES.register(*op_types)(BatchRule(applies, emitter))
        return emitter

    return register


def _has_rule(operation):
    rule = BATCH_RULES.rule(operation.op)
    return rule is not None and rule.applies(operation.op)


def _rule(operation, flags, arg_types, member_type, n):
    """A function ``(editor, refs) -> ref`` emitting the batched operation
    (``refs``: batched values where ``flags``, shared values elsewhere), or
    ``None`` where the op cannot be batched so."""
    rule = BATCH_RULES.rule(operation.op)
    if rule is None:
        return None
    return rule.emitter(_Batching(operation, flags, arg_types, member_type, n))


class _Batching:
    """What a batch rule reads: the operation, which of its arguments are
    batched (``flags``), the arguments' and the result's member types, and
    the batch size ``n``."""

    def __init__(self, operation, flags, arg_types, member_type, n):
        self.op, self.packed = operation.op, operation.packed
        self.flags, self.arg_types, self.n = flags, arg_types, n
        self.member_type = member_type
        self.batched_type = ValueType((n,) + member_type.shape, member_type.kind)
        self.rank = len(member_type.shape)

    def emit(self, new_op, align=False):
        """The emitter of ``new_op`` on the batched arguments (``align``:
        lower-rank batched arguments get unit axes after the batch axis)."""

        def run(editor, refs):
            if align:
                refs = [
                    _align(editor, r, t, self.rank, self.n) if f else r
                    for r, f, t in zip(refs, self.flags, self.arg_types)
                ]
            return editor.emit(new_op, refs, self.packed, self.batched_type)

        return run


@batch_rule(*UNARY_ELEMENTWISE, *BINARY_ELEMENTWISE, applies=lambda op: not op.defaults)
def _elementwise(b):
    return b.emit(b.op, align=True)


@batch_rule(
    ops.ClampOp,
    applies=lambda op: all(
        v is None or isinstance(v, numbers.Number) for v in op.defaults.values()
    ),
)
def _clamp(b):
    return b.emit(b.op, align=True)


@batch_rule(ops.MatmulOp)
def _matmul(b):
    if any(f and len(t.shape) < 2 for f, t in zip(b.flags, b.arg_types)):
        return None
    return b.emit(b.op, align=True)


@batch_rule(*REDUCTIONS, applies=lambda op: set(op.defaults) == {"axis", "keepdims"})
def _reduction(b):
    arg_rank = len(b.arg_types[0].shape)
    if arg_rank == 0:
        return None
    axis = b.op.defaults["axis"]
    if axis is None:
        axis = tuple(range(arg_rank))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(a % arg_rank + 1 for a in axes)
    return b.emit(type(b.op)(axis=axes, keepdims=b.op.defaults["keepdims"]))


@batch_rule(ops.PermuteOp)
def _permute(b):
    dims = (0,) + tuple(d % b.rank + 1 for d in b.op.defaults["dims"])
    return b.emit(ops.PermuteOp(dims=dims))


@batch_rule(ops.ReshapeOp)
def _reshape(b):
    return b.emit(ops.ReshapeOp(shape=(b.n,) + tuple(b.member_type.shape)))


@batch_rule(ops.ExpandOp)
def _expand(b):
    shape = (b.n,) + tuple(b.member_type.shape)
    return b.emit(ops.ExpandOp(shape=shape), align=True)


@batch_rule(ops.GetsliceOp)
def _getslice(b):
    index = b.op.defaults["index"]
    index = index if isinstance(index, tuple) else (index,)
    return b.emit(getslice_op((slice(None),) + index))


@batch_rule(ops.GetitemOp)
def _getitem(b):
    offset = b.op.defaults["offset"]
    if b.flags == [True, False]:
        return b.emit(ops.GetitemOp(offset=offset + 1))
    if b.flags == [False, True] and offset == 0:
        return b.emit(b.op)
    return None


@batch_rule(ops.CatOp)
def _batched_cat(b):
    return _joined_one_axis_on(b, "axis", len(b.arg_types[0].shape))


@batch_rule(ops.StackOp)
def _batched_stack(b):
    return _joined_one_axis_on(b, "dim", len(b.arg_types[0].shape) + 1)


def _joined_one_axis_on(b, name, rank):
    """A cat or stack of parts all batched: along its axis ``name`` (of a
    result of rank ``rank``) moved one to the right."""
    if not (b.packed and all(b.flags)):
        return None
    return b.emit(type(b.op)(**{name: b.op.defaults[name] % rank + 1}))


def _align(editor, ref, member_type, rank, n):
    """A batched argument of lower rank than the result gets unit axes after
    its batch axis, so that it broadcasts as each member did."""
    missing = rank - len(member_type.shape)
    if missing <= 0:
        return ref
    shape = (n,) + (1,) * missing + tuple(member_type.shape)
    return editor.emit(
        ops.ReshapeOp(shape=shape), (ref,), False, ValueType(shape, member_type.kind)
    )


@batch_rule(ops.EinsumOp, LogspaceEinsumOp)
def _einsum(b):
    op, flags, batched_type = b.op, b.flags, b.batched_type
    inputs, output = op.defaults["equation"].split("->")
    letters = set(op.defaults["equation"])
    free = [c for c in string.ascii_letters if c not in letters]
    if not free:
        return None
    b = free[0]
    subscripts = [b + s if f else s for s, f in zip(inputs.split(","), flags)]
    new_op = type(op)(equation=",".join(subscripts) + "->" + b + output)

    def run(editor, refs):
        return editor.emit(new_op, refs, True, batched_type)

    return run


@batch_rule(TakeOp)
def _take(b):
    """``take(x, index)`` (``x[index]``) batched: a batched ``x`` is indexed
    on its second axis; a batched ``index`` gathers as it is; where both are,
    member ``b`` gathers from rows ``b * len(x)`` on of ``x`` flattened (an
    index taken modulo ``len(x)`` first, so negative ones count from the
    end as they did)."""
    flags, arg_types, batched_type = b.flags, b.arg_types, b.batched_type
    if not all(flags):
        op = ops.GetitemOp(offset=1) if flags[0] else take
        return lambda editor, refs: editor.emit(op, refs, False, batched_type)
    (rows, *rest), index_shape = arg_types[0].shape, arg_types[1].shape
    n = batched_type.shape[0]

    def run(editor, refs):
        x, index = refs
        flat_shape = (n * rows, *rest)
        flat = editor.emit(
            ops.ReshapeOp(shape=flat_shape),
            (x,),
            False,
            ValueType(flat_shape, arg_types[0].kind),
        )
        starts = np.arange(n).reshape((n,) + (1,) * len(index_shape)) * rows
        starts = editor.add_constant(array_backend(editor.backend).from_numpy(starts))
        index_type = ValueType((n, *index_shape), "int")
        wrapped = editor.emit(
            ops.mod, (index, editor.add_constant(rows)), False, index_type
        )
        shifted = editor.emit(ops.add, (wrapped, starts), False, index_type)
        return editor.emit(take, (flat, shifted), False, batched_type)

    return run


__all__ = ["MIN_GROUP", "vectorize"]
