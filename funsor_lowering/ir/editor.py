"""The one program editor: building, renumbering, inlining and substituting
``OpProgram`` operations.

An :class:`Editor` holds constants, input leaves and operations over
:class:`Ref` s (constant, input or operation number ``k``), so values can be
added, replaced or dropped without renumbering; :meth:`Editor.finish`
numbers everything once and builds the program. Passes, the compiler, the
tracer and the inlining of sub-programs all build programs through it.

Example::

    >>> from funsor import ops
    >>> from funsor.domains import Reals
    >>> editor = Editor({"x": Reals[2]})
    >>> two = editor.add_constant(2.0)
    >>> doubled = editor.emit(ops.mul, [editor.input(0), two])
    >>> square = OpProgram([], {"y": Reals[2]}, [Operation(ops.mul, (0, 0))], 1)
    >>> result = editor.inline(square, [doubled])  # (2x)^2
    >>> print(editor.finish(result))
    OpProgram(x: real[2]) on numpy:
      c0: real[] = 2.0
      mul = mul(x, c0)
      mul_1 = mul(mul, mul)
      return mul_1
"""

from typing import NamedTuple

from .program import Operation, OpProgram, ValueType, as_value_type, value_type_of
from .structure import iter_leaves, iter_paths, map_leaves


class PassResult(NamedTuple):
    """What a program pass returns (as torch.fx's ``PassResult``): the
    program, and whether the pass changed it."""

    program: OpProgram
    modified: bool


def pass_result(before, after):
    """The :class:`PassResult` of a pass that turned program ``before`` into
    ``after``: where nothing changed, ``before`` itself (so that
    :func:`~funsor_lowering.passes.pipeline.optimize` can tell that it has
    run on it)."""
    if (len(after.constants), after.operations, repr(after.output)) != (
        len(before.constants),
        before.operations,
        repr(before.output),
    ):
        return PassResult(after, True)
    same_types = after._operation_types == before._operation_types
    return PassResult(before if same_types else after, False)


def rewrite(program, rule):
    """The :class:`PassResult` of applying ``rule`` (see
    :meth:`Editor.copy_operations`) to every operation of ``program`` in
    order. Where the rule replaced and added nothing, ``program`` itself,
    without building a new one."""
    editor = Editor.of(program)
    output = editor.copy_operations(program, rule)
    if editor.copied_unchanged(program):
        return PassResult(program, False)
    return pass_result(program, editor.finish(output))


class Ref:
    """A value of a program being edited: constant (``"c"``), input leaf
    (``"i"``) or operation (``"o"``) number ``k``. Not a tuple, so output
    nestings keep their shape. Interned: equal refs are one object, so sets
    and dicts of refs hash and compare them by identity (passes look refs up
    hundreds of thousands of times)."""

    __slots__ = ("kind", "k")
    _interned = {}

    def __new__(cls, kind, k):
        ref = cls._interned.get((kind, k))
        if ref is None:
            ref = object.__new__(cls)
            ref.kind, ref.k = kind, k
            ref = cls._interned.setdefault((kind, k), ref)  # first one wins
        return ref

    def __reduce__(self):
        return Ref, (self.kind, self.k)

    def __repr__(self):
        return f"Ref({self.kind!r}, {self.k})"


class Editor:
    """A program under construction.

    :param dict input_types: input name -> domain or :class:`ValueType`
        (or a nesting of them), in order.
    :param str backend: the program's backend (default: funsor's active one).
    """

    def __init__(self, input_types, backend=None, constants=()):
        self.input_types = dict(input_types)
        self.backend = backend
        self.constants = list(constants)
        self.operations = []  # (Operation over refs, ValueType or None)
        self.input_leaves = [
            leaf
            for spec in self.input_types.values()
            for _, leaf in iter_paths(as_value_type(spec))
        ]
        self.remap = {}  # value number of a source program -> Ref
        self.replaced = 0  # operations a copy_operations rule replaced

    @classmethod
    def of(cls, program):
        """An editor holding ``program``'s constants and inputs (none of its
        operations), with :attr:`remap` mapping their value numbers."""
        editor = cls(program.input_types, program.backend, program.constants)
        for i in range(len(program.constants)):
            editor.remap[i] = Ref("c", i)
        first_input = len(program.constants)
        for i in range(first_input, program.first_operation):
            editor.remap[i] = Ref("i", i - first_input)
        return editor

    # ---------------------------------------------------------------- values
    def input(self, k):
        """The ref of input leaf ``k``."""
        return Ref("i", k)

    def add_constant(self, value):
        self.constants.append(value)
        return Ref("c", len(self.constants) - 1)

    def emit(self, op, args, packed=False, value_type=None):
        """Append ``op(*args)`` (``op(tuple(args))`` when ``packed``)."""
        self.operations.append((Operation(op, tuple(args), packed), value_type))
        return Ref("o", len(self.operations) - 1)

    def value_type(self, ref):
        """The :class:`ValueType` of a ref, or ``None`` if unknown."""
        if ref.kind == "c":
            return value_type_of(self.constants[ref.k])
        if ref.kind == "i":
            return self.input_leaves[ref.k]
        return self.operations[ref.k][1]

    def constant_value(self, ref):
        """The value of a constant ref, else ``None``."""
        return self.constants[ref.k] if ref.kind == "c" else None

    def producer(self, ref, *op_types):
        """The Operation (with ref args) that computes ``ref``, or ``None``;
        with ``op_types``, only an operation applying one of them."""
        if ref.kind != "o":
            return None
        operation = self.operations[ref.k][0]
        if op_types and not isinstance(operation.op, op_types):
            return None
        return operation

    # --------------------------------------------------------------- editing
    def copy_operations(self, program, rule=None):
        """Append ``program``'s operations (its constants and inputs already
        here, see :meth:`of`). ``rule(editor, operation, args, value_type)``
        may return the ref of a value replacing an operation (``args``: its
        arguments' refs here), or ``None`` to keep it. Returns the refs of
        ``program``'s output nesting."""
        types = program.value_types
        for k, operation in enumerate(program.operations):
            old = program.first_operation + k
            args = [self.remap[a] for a in operation.args]
            ref = rule(self, operation, args, types[old]) if rule else None
            if ref is None:
                ref = self.emit(operation.op, args, operation.packed, types[old])
            else:
                self.replaced += 1
            self.remap[old] = ref
        return map_leaves(lambda i: self.remap[i], program.output)

    def copied_unchanged(self, program):
        """Whether this editor (:meth:`of` ``program``, then
        :meth:`copy_operations` of it) holds exactly ``program``: no
        operation replaced, none and no constant added."""
        return (
            self.replaced == 0
            and len(self.operations) == len(program.operations)
            and len(self.constants) == len(program.constants)
        )

    def inline(self, program, args):
        """Append ``program`` applied to ``args`` (refs of its input leaves,
        in order): its constants and operations. Returns its output nesting
        as refs."""
        refs = [self.add_constant(value) for value in program.constants]
        refs += list(args)
        types = program.value_types
        for k, operation in enumerate(program.operations):
            value_type = types[program.first_operation + k]
            args_k = [refs[a] for a in operation.args]
            refs.append(self.emit(operation.op, args_k, operation.packed, value_type))
        return map_leaves(lambda i: refs[i], program.output)

    def live(self, output):
        """The refs ``output`` depends on (itself included)."""
        keep, stack = set(), list(iter_leaves(output))
        while stack:
            ref = stack.pop()
            if ref not in keep:
                keep.add(ref)
                if ref.kind == "o":
                    stack.extend(self.operations[ref.k][0].args)
        return keep

    def finish(self, output, keep=None, inputs=None):
        """The program computing ``output`` (a nesting of refs).

        :param set keep: only these constants and operations (dead code
            elimination); by default all.
        :param list inputs: only these input names (their leaves must be all
            the input refs used); by default all.
        """
        if keep is None:
            keep = {Ref("c", k) for k in range(len(self.constants))}
            keep |= {Ref("o", k) for k in range(len(self.operations))}
        number, constants = {}, []
        for k, value in enumerate(self.constants):
            if Ref("c", k) in keep:
                number[Ref("c", k)] = len(constants)
                constants.append(value)
        input_types = self.input_types
        leaf = 0
        kept_leaf = len(constants)
        for name, spec in input_types.items():
            for _ in iter_paths(spec):
                if inputs is None or name in inputs:
                    number[Ref("i", leaf)] = kept_leaf
                    kept_leaf += 1
                leaf += 1
        if inputs is not None:
            input_types = {n: s for n, s in input_types.items() if n in inputs}
        operations, types = [], []
        next_value = kept_leaf
        for k, (operation, value_type) in enumerate(self.operations):
            if Ref("o", k) in keep:
                number[Ref("o", k)] = next_value
                next_value += 1
                args = tuple(number[a] for a in operation.args)
                operations.append(operation.replace(args=args))
                types.append(value_type)
        return OpProgram(
            constants,
            input_types,
            operations,
            map_leaves(lambda ref: number[ref], output),
            value_types=types,
            backend=self.backend,
        )


__all__ = ["Editor", "PassResult", "Ref", "ValueType", "pass_result", "rewrite"]
