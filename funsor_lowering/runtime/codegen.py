"""``OpProgram`` -> Python: the fast callable, ``as_code()`` source and the
``print(program)`` listing.

The fast callable is generated source with one statement per operation; ops
and constants are passed in a globals dict (never written into the source), and
the source is registered with ``linecache`` so tracebacks show the failing line.

Example::

    >>> from funsor import ops
    >>> from funsor.domains import Reals
    >>> from funsor_lowering.ir.program import OpProgram, Operation
    >>> p = OpProgram([2.0], {"x": Reals[2]}, [Operation(ops.mul, (1, 0))], 2)
    >>> print(generate_function_source(p, "program", standalone=False)[0])
    def program(x):
        mul = _mul(x, c0)
        return np.asarray(mul)
"""

import collections
import itertools
import linecache
import numbers
import operator
import re
import sys
import threading
import weakref

import numpy
from funsor import ops
from funsor.registry import PartialDefault

from ..ir.naming import ENTRY_NAMES, RESERVED, Namespace, is_plain_identifier
from ..ir.structure import iter_leaves, map_leaves
from ..ops import extra_ops
from .literals import python_literal

_COUNTER = itertools.count()

# funsor's default implementations of layout ops, written inline (the same
# expression the default evaluates).
INLINE_DEFAULTS = {
    ops.getslice.default: "{}[{}]",
    ops.ReshapeOp.dispatcher.default.default: "{}.reshape({})",
}

# funsor's default ``detach`` (backends without autodiff): the argument
# itself, which generated code uses directly.
IDENTITY_DEFAULTS = frozenset({type(ops.detach).dispatcher.default.default})

# Implementations generated code writes as Python operators.
PYTHON_OPERATORS = {
    operator.add: "+",
    operator.sub: "-",
    operator.mul: "*",
    operator.truediv: "/",
    operator.floordiv: "//",
    operator.mod: "%",
    operator.pow: "**",
    operator.matmul: "@",
    operator.lt: "<",
    operator.le: "<=",
    operator.gt: ">",
    operator.ge: ">=",
    operator.eq: "==",
    operator.ne: "!=",
    operator.and_: "&",
    operator.or_: "|",
    operator.xor: "^",
    operator.neg: "-",
    operator.pos: "+",
    operator.invert: "~",
}


def key_literal(key):
    """Python source for a dict key or input name, equal to it (``str`` and
    ``int`` subclasses such as ``numpy.str_`` or ``IntEnum`` members are
    written as the plain value), or ``None`` where there is no literal."""
    if type(key) in (str, int, bool) or key is None:
        return repr(key)
    if isinstance(key, str):
        return repr(str(key))
    if isinstance(key, int):
        return repr(int(key))
    return None


def structure_source(structure, names, key_source=None):
    """Source building the output nesting from value names; ``key_source``
    gives the source of each dict key (by default its literal)."""
    if key_source is None:
        key_source = _required_literal

    def source(item):
        return structure_source(item, names, key_source)

    if isinstance(structure, tuple):
        items = [source(s) for s in structure]
        return f"({items[0]},)" if len(items) == 1 else "({})".format(", ".join(items))
    if isinstance(structure, list):
        return "[{}]".format(", ".join(source(s) for s in structure))
    if isinstance(structure, dict):
        items = [f"{key_source(k)}: {source(v)}" for k, v in structure.items()]
        return "{{{}}}".format(", ".join(items))
    return names[structure]


def _required_literal(key):
    literal = key_literal(key)
    if literal is None:
        raise TypeError(
            f"cannot write the dict key {key!r} ({type(key).__name__}) as "
            f"Python source; keys of str, int or their subclasses can be"
        )
    return literal


class KeyNames:
    """Dict keys and input names in generated code: literals where they are
    exactly ``str`` / ``int``, else globals holding the very key object."""

    def __init__(self, namespace, globals_):
        self.namespace, self.globals = namespace, globals_
        self.names = {}

    def __call__(self, key):
        if type(key) in (str, int, bool) or key is None:
            return repr(key)
        marker = (type(key), key)
        if marker not in self.names:
            self.names[marker] = self.namespace.create("_key")
            self.globals[self.names[marker]] = key
        return self.names[marker]


# Ops whose result may share memory with their first argument (views and
# no-op conversions): an output computed by them from a constant is copied.
VIEW_OP_NAMES = frozenset(
    {
        "getitem",
        "getslice",
        "reshape",
        "permute",
        "transpose",
        "expand",
        "unsqueeze",
        "squeeze",
        "diagonal",
        "detach",
        "astype",
        "contiguous",
        "einsum",  # numpy's einsum returns a view for a pure transposition
    }
)


def constant_aliases(program):
    """Value numbers that may share memory with an array constant: the
    constants themselves and values derived from them by ops that may
    return views (:data:`VIEW_OP_NAMES`; other ops allocate their results)."""
    aliases = {
        i
        for i, c in enumerate(program.constants)
        if hasattr(c, "shape") and not isinstance(c, numpy.generic)
    }
    first = program.first_operation
    for k, operation in enumerate(program.operations):
        if operation.op.name in VIEW_OP_NAMES:
            if any(a in aliases for a in operation.args):
                aliases.add(first + k)
    return aliases


def output_conversions(program):
    """Output value number -> how the program hands it out: ``"copy"``
    (it may share memory with a constant: never hand out the program's own)
    or ``"asarray"`` (numpy ops return numpy scalars for 0-d results; the
    program's contract, funsor's Tensor data, is a 0-d array)."""
    types = program.value_types
    backend = program._array_backend
    aliases = constant_aliases(program) if backend.copy_function else ()
    conversions = {}
    for i in iter_leaves(program.output):
        if i in aliases:
            conversions[i] = "copy"
        elif backend.returns_scalars and i >= program.first_operation:
            if types[i] is None or not types[i].shape:
                conversions[i] = "asarray"
    return conversions


# Modules whose ops generated code can name: (module, name in the source).
OP_MODULES = ((ops, "ops"), (extra_ops, "extra_ops"))


def module_op_source(op):
    """``ops.<name>`` (or ``extra_ops.<name>``) when ``op`` is that module's
    default instance of its op, else ``None``."""
    for module, alias in OP_MODULES:
        if getattr(module, op.name, None) is op:
            return f"{alias}.{op.name}"
    return None


def op_source(op):
    """A Python expression, in terms of ``funsor.ops`` as ``ops`` (or
    :mod:`funsor_lowering.ops.extra_ops` as ``extra_ops``), that evaluates to
    ``op`` itself (parameters included)."""
    source = module_op_source(op)
    if source is not None:
        return source
    cls = type(op)
    found = [(m, a) for m, a in OP_MODULES if getattr(m, cls.__name__, None) is cls]
    if not found:
        raise NotImplementedError(
            f"cannot write op {op!r} ({cls.__module__}.{cls.__qualname__}) as code: "
            f"it is not defined in funsor.ops"
        )
    ((module, alias),) = found
    try:
        params = ", ".join(f"{k}={python_literal(v)}" for k, v in op.defaults.items())
    except TypeError as e:
        raise NotImplementedError(f"cannot write op {op!r} as code: {e}") from None
    source = f"{alias}.{cls.__name__}({params})"
    if eval(source, {alias: module}) is not op:
        raise NotImplementedError(
            f"cannot write op {op!r} as code: {source} builds a different op"
        )
    return source


def generate_function_source(
    program, name, *, standalone, resolved=None, context=None, typed_numbers=None
):
    """Source of ``def name(...)`` and the globals it needs.

    With ``standalone=False`` the function takes the inputs positionally and
    reads ops and constants from the returned globals dict. With
    ``standalone=True`` it takes the inputs as keywords and refers to ops as
    ``ops.<name>`` and to module-level names the caller defines (constants and
    parametrized ops, listed in the returned dict as name -> object). With
    ``context`` (a callable), the statements run inside ``with context():``.
    ``typed_numbers`` (``{(operation, position): (constant, value)}``, see
    :func:`typed_number_operands`) passes ``value`` in place of a number
    constant.
    """
    source = _FunctionSource(program, name, standalone, typed_numbers)
    lines = source.signature(name)
    output_sources = source.output_sources()
    indent = "    "
    if context is not None:
        lines.append(f"    with {source.add_global('_context', context)}():")
        indent = "        "
    for k, operation in enumerate(program.operations):
        target = source.names[program.first_operation + k]
        lines.append(f"{indent}{target} = {source.call(k, operation, resolved)}")
    key_source = None if standalone else KeyNames(source.namespace, source.globals)
    output = structure_source(program.output, output_sources, key_source)
    lines.append(f"{indent}return {output}")
    return "\n".join(lines), source.globals


class _FunctionSource:
    """What one generated function's lines refer to: the names of its
    values, ops and parameters (one namespace) and the globals bound to
    them."""

    def __init__(self, program, name, standalone, typed_numbers):
        self.program, self.standalone = program, standalone
        self.names = program.value_names
        self.namespace = Namespace(reserved=list(self.names) + [name])
        self.globals = dict(zip(self.names, program.constants))
        self.typed_numbers = typed_numbers or {}
        self._op_names = {}
        self._typed_names = {}  # (constant, dtype) -> the name of its typed form
        self._impl_names = {}

    def add_global(self, hint, value):
        """A fresh name like ``hint`` bound to ``value``."""
        name = self.namespace.create(hint)
        self.globals[name] = value
        return name

    def signature(self, name):
        """The ``def`` line, and where inputs come nested, the lines taking
        them out of ``**inputs``."""
        input_names = _input_names(self.program)
        leaves = self.program._input_leaves
        if not self.standalone:
            return [f"def {name}({', '.join(input_names)}):"]
        if all(
            is_plain_identifier(raw) and raw == local and not path
            for (raw, path, _), local in zip(leaves, input_names)
        ):
            params = f"*, {', '.join(input_names)}" if input_names else ""
            return [f"def {name}({params}):"]
        lines = [f"def {name}(**inputs):"]
        for (raw, path, _), local in zip(leaves, input_names):
            keys = "".join(f"[{_required_literal(k)}]" for k in path)
            lines.append(f"    {local} = inputs[{_required_literal(raw)}]{keys}")
        return lines

    def output_sources(self):
        """Each value's source as an output: its name, converted where the
        output must not alias an input or constant."""
        sources = list(self.names)
        conversions = output_conversions(self.program)
        if "copy" in conversions.values():
            backend = self.program._array_backend
            if self.standalone:
                copy_name = backend.copy_source
            else:
                copy_name = self.add_global("_copy", backend.copy_function)
        if "asarray" in conversions.values():
            self.globals.setdefault("np", numpy)
        for i, conversion in conversions.items():
            convert = copy_name if conversion == "copy" else "np.asarray"
            sources[i] = f"{convert}({self.names[i]})"
        return sources

    def call(self, k, operation, resolved):
        """The source of operation ``k``'s call: its op by name, or with
        ``resolved`` its backend implementation (or operator) inline."""
        operands = self._arg_names(k, operation)
        args = ", ".join(operands)
        if operation.packed:
            args = f"({args},)" if len(operation.args) == 1 else f"({args})"
        if resolved is None:
            return f"{self._op_name(operation.op)}({args})"
        return self._impl_call(operation, operands, *resolved[k], args)

    def _op_name(self, op):
        if op not in self._op_names:
            source = module_op_source(op) if self.standalone else None
            if source is not None:
                self._op_names[op] = source
            else:
                hint = f"{op.name}_op" if self.standalone else f"_{op.name}"
                self._op_names[op] = self.add_global(hint, op)
        return self._op_names[op]

    def _arg_names(self, k, operation):
        result = [self.names[a] for a in operation.args]
        for position, a in enumerate(operation.args):
            typed = self.typed_numbers.get((k, position))
            if typed is not None:
                key = (a, str(getattr(typed[1], "dtype", None)))
                if key not in self._typed_names:
                    hint = f"{self.names[a]}_typed"
                    self._typed_names[key] = self.add_global(hint, typed[1])
                result[position] = self._typed_names[key]
        return result

    def _impl_call(self, operation, operands, impl, extra, kwargs, args):
        if impl in IDENTITY_DEFAULTS and not (extra or kwargs):
            return args
        symbol = PYTHON_OPERATORS.get(impl) if not (extra or kwargs) else None
        if symbol is not None:  # the operator itself, as hand-written code has it
            if len(operands) == 1:
                return f"{symbol}{operands[0]}"
            return f" {symbol} ".join(operands)
        template = INLINE_DEFAULTS.get(impl) if len(extra) == 1 and not kwargs else None
        if template is not None:  # x[index], x.reshape(shape)
            var = self.add_global(f"_{operation.op.name}_p", extra[0])
            return template.format(args, var)
        key = (id(impl), tuple(map(id, extra)), tuple(kwargs.items()))
        if key not in self._impl_names:
            base = self.add_global(f"_{operation.op.name}_impl", impl)
            params = [
                self.add_global(f"{base}_p{i}", value) for i, value in enumerate(extra)
            ]
            for name, value in kwargs.items():
                params.append(f"{name}={self.add_global(f'{base}_{name}', value)}")
            self._impl_names[key] = (base, params)
        base, params = self._impl_names[key]
        return f"{base}({', '.join([args] + params)})"


def bind_call(op, args, kwargs=None):
    """``op(*args, **kwargs)``'s arguments bound as funsor's ``Op.__call__``
    binds them: an ``inspect.BoundArguments`` with the op's parameters
    (``op.defaults``) filled in."""
    bound = type(op).signature.bind_partial(*args, **(kwargs or {}))
    for key, value in op.defaults.items():
        bound.arguments.setdefault(key, value)
    return bound


def resolve(op, args, backend):
    """``(implementation, extra_args, kwargs)`` such that
    ``implementation(*args, *extra_args, **kwargs)`` is what ``op(*args)``
    computes: funsor's op dispatch and parameter binding, done once. The
    backend may supply a faster implementation for arrays of its own."""
    cls = type(op)
    bound = bind_call(op, args)
    call_args, call_kwargs = bound.args, bound.kwargs
    operands, params = call_args[: cls.arity], call_args[cls.arity :]
    impl = cls.dispatcher.partial_call(*operands)
    if isinstance(impl, PartialDefault):  # funsor's wrapper of the op's default
        impl = impl.default
    if _arrays_and_numbers(operands, backend):
        fast = backend.fast_call(cls, operands, params, impl)
        if fast is not None:
            impl, extra, kwargs = fast
            return impl, extra, {**kwargs, **call_kwargs}
    return impl, tuple(params), dict(call_kwargs)


def _arrays_and_numbers(operands, backend):
    """Operands a backend's fast implementation takes: its arrays, and
    Python numbers beside at least one array (as its ufuncs do)."""
    if len(operands) == 1 and isinstance(operands[0], tuple):  # packed parts
        operands = operands[0]
    arrays = [backend.is_array(a) for a in operands]
    numbers_ = [
        isinstance(a, numbers.Number) and not isinstance(a, bool) for a in operands
    ]
    return any(arrays) and all(a or n for a, n in zip(arrays, numbers_))


def evaluate(program, values):
    """Reference evaluation (like jax's ``eval_jaxpr``): run the program on
    input ``values`` through funsor's op dispatch. Returns every value and
    the resolved implementation of every operation."""
    env = list(program.constants) + list(values)
    resolved = []
    for operation, declared in zip(program.operations, program._operation_types):
        args = [env[a] for a in operation.args]
        if operation.packed:
            args = [tuple(args)]
        impl, extra, kwargs = resolve(operation.op, args, program._array_backend)
        resolved.append((impl, extra, kwargs))
        env.append(impl(*args, *extra, **kwargs))
        _check_shape(program, len(env) - 1, env[-1], declared)
    return env, resolved


def _check_shape(program, number, value, declared):
    """Value ``number`` of a reference evaluation has the shape the program
    records for it (``declared``: a ``ValueType``, or ``None``). Else a
    pass emitted an operation computing another shape than it recorded, a
    bug of ours: stop at that operation, not at a later op it feeds (or,
    where shapes broadcast, at a wrong result)."""
    shape, recorded = getattr(value, "shape", None), getattr(declared, "shape", None)
    if shape is not None and recorded is not None and tuple(shape) != recorded:
        name = program.value_names[number]
        operation = program.operations[number - program.first_operation]
        raise RuntimeError(
            f"internal error in {program!r}: {name} = {operation} computes "
            f"shape {tuple(shape)}, the program records {recorded} "
            f"(a bug of funsor_lowering's passes; please report it)"
        )


def build_body(program, values):
    """``(body, outputs)``: the generated body for the types of input
    ``values`` (each op calling the implementation funsor's dispatch picks
    for the argument types they produce), and the outputs of the reference
    evaluation that resolved them."""
    env, resolved = evaluate(program, values)
    context, resolved = program._array_backend.body_context(
        program.operations, resolved
    )
    source, globals_ = generate_function_source(
        program,
        "program",
        standalone=False,
        resolved=resolved,
        context=context,
        typed_numbers=typed_number_operands(program, env, resolved),
    )
    return _define(source, globals_, "program"), outputs_of(program, env)


def typed_number_operands(program, env, resolved):
    """``{(operation, position): (constant, value)}``: the number constants
    that the backend passes to binary operations as ``value`` instead, typed
    like the other operand (torch wraps a Python number in a tensor on
    every call, ~2-5 us, and numpy converts it, ~0.3 us; see
    ``ArrayBackend.typed_number``). ``env`` holds
    every value of a reference evaluation, ``resolved`` the operations'
    implementations."""
    backend, found = program._array_backend, {}
    for k, operation in enumerate(program.operations):
        impl, extra, kwargs = resolved[k]
        if operation.packed or len(operation.args) != 2 or extra or kwargs:
            continue
        for position, a in enumerate(operation.args):
            other = env[operation.args[1 - position]]
            if a >= len(program.constants) or not _is_number(env[a]):
                continue
            if backend.is_array(other):
                value = backend.typed_number(env[a], other, impl)
                if value is not None:
                    found[k, position] = (a, value)
    return found


def _is_number(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def build_unresolved(program):
    """A body calling every op through funsor's dispatch (slow; its
    traceback shows the failing operation's line)."""
    source, globals_ = generate_function_source(program, "program", standalone=False)
    return _define(source, globals_, "program")


def outputs_of(program, env):
    """The program's output nesting from all its values ``env``, as the
    generated body returns it (constants copied; 0-d numpy results as 0-d
    arrays)."""
    conversions = output_conversions(program)
    convert = {"copy": program._array_backend.copy_function, "asarray": numpy.asarray}

    def leaf(i):
        conversion = conversions.get(i)
        return env[i] if conversion is None else convert[conversion](env[i])

    return map_leaves(leaf, program.output)


def signature_source(program, keys, locals_, containers):
    """Statements reading a call's input arrays from ``kwargs`` into the
    names ``locals_`` (one per input leaf; nested containers into the names
    ``containers`` hands out), and the expression of the call's signature:
    each array's type, dtype and shape, and each nested container's length
    (equal lengths and found keys mean no key is extra). Also returns the
    containers' names by path (``(input name, *keys)``)."""
    lines, parts, names = [], [], {}
    for (name, path, _), local in zip(program._input_leaves, locals_):
        source = f"kwargs[{keys(name)}]"
        for depth, key in enumerate(path):
            prefix = (name,) + path[:depth]
            if prefix not in names:
                names[prefix] = containers()
                lines.append(f"{names[prefix]} = {source}")
            source = f"{names[prefix]}[{keys(key)}]"
        lines.append(f"{local} = {source}")
        parts += [f"type({local})", f"{local}.dtype", f"{local}.shape"]
    parts += [f"len({var})" for var in names.values()]
    signature = "({},)".format(", ".join(parts)) if parts else "()"
    return lines, signature, names


def build_entry(program, table, slow, first=None, method=False):
    """``(signature, entry)``: generated functions. ``signature(kwargs)``
    gives a validated call's signature; ``entry(*args, **kwargs)`` runs the
    body ``table`` (signature -> body) holds for its call's signature, or
    calls ``slow(*args, **kwargs)``. With ``first = (values, body)``, the
    entry also holds ``body``'s statements inline, for calls with the types,
    dtypes and shapes of ``values`` (checked by identity and equality first,
    as hand-written code would run). With ``method``, the entry takes the
    program first, positionally (``entry(program, *args, **kwargs)``: a
    ``__call__``), and ignores it. Input names appear only as string
    literals or globals, so no name can collide with the entry's own."""
    names = program.value_names
    locals_ = _input_names(program)
    globals_ = {}
    statements = []
    if first is not None:
        values, body = first
        globals_.update(
            (k, v) for k, v in body.__globals__.items() if k != "__builtins__"
        )
        statements = body.__source__.splitlines()[1:]
    namespace = Namespace(reserved=list(names) + list(globals_) + list(ENTRY_NAMES))
    globals_.update(table=table, slow=slow)
    keys = KeyNames(namespace, globals_)
    receiver = f"{namespace.create('_self')}, /, " if method else ""
    reads, signature, containers = signature_source(
        program, keys, locals_, lambda: namespace.create("n")
    )
    lines = ["def signature(kwargs):"]
    lines += [f"    {line}" for line in reads]
    lines += [f"    return {signature}", "", ""]
    fast = len(lines) + 2  # the lines under ``def program``'s first ``if``
    head, slow_call = _entry_head(
        program, locals_, reads, receiver, namespace, globals_
    )
    lines += head
    if first is not None:
        checks = _guards(program, locals_, values, containers, namespace, globals_)
        lines.append(f"        if {' and '.join(checks) or 'True'}:")
        lines += ["        " + line for line in statements]
    lines += _table_lookup(signature, locals_)
    # Any error of the fast path goes to ``slow``, which validates the call
    # first: an input that passes the signature but not validation (a torch
    # tensor on another device) gets the error naming it, not the backend's;
    # an error of the operations themselves is raised again by ``slow``'s
    # run. (A try costs nothing until something raises.)
    lines[fast:] = [
        "        try:",
        *("    " + line for line in lines[fast:]),
        "        except Exception:",
        "            pass",
    ]
    lines += slow_call
    entry = _define("\n".join(lines), globals_, "program")
    return globals_["signature"], entry


def _table_lookup(signature, locals_):
    """The lines running the body ``table`` holds for the call's signature."""
    return [
        "        try:",
        f"            body = table[{signature}]",
        "        except (LookupError, TypeError, AttributeError):",
        "            pass",
        "        else:",
        f"            return body({', '.join(locals_)})",
    ]


def _entry_head(program, locals_, reads, receiver, namespace, globals_):
    """The entry's ``def`` and its first ``if`` (a call that can take the
    fast path), and the lines calling ``slow`` otherwise."""
    if _keyword_parameters(program, locals_) and len(locals_) <= KEYWORD_PARAMETERS_MAX:
        # inputs as keyword parameters: Python binds a call's keywords to
        # them, with no dict to read (an input not given is ``absent``,
        # which fails the checks below, as does any other argument)
        absent = namespace.create("_absent")
        globals_[absent] = _ABSENT
        params = "".join(f"{local}={absent}, " for local in locals_)
        given = ", ".join(f"({local!r}, {local})" for local in locals_)
        head = [
            f"def program({receiver}*args, {params}**kwargs):",
            "    if not args and not kwargs:",
        ]
        slow_call = [
            f"    kwargs.update((k, v) for k, v in ({given},) if v is not {absent})",
            "    return slow(*args, **kwargs)",
        ]
        return head, slow_call
    head = [
        f"def program({receiver}*args, **kwargs):",
        f"    if not args and len(kwargs) == {len(program.inputs)}:",
        "        try:",
    ]
    head += [f"            {line}" for line in reads or ["pass"]]
    head += [
        "        except (LookupError, TypeError):",
        "            return slow(*args, **kwargs)",
    ]
    return head, ["    return slow(*args, **kwargs)"]


def _guards(program, locals_, values, containers, namespace, globals_):
    """Checks that a call's inputs have the types, dtypes and shapes of
    ``values`` and its containers their lengths (the inline body's)."""
    checks = []
    for local, value in zip(locals_, values):
        for test, expected in (
            ("type({}) is {}", type(value)),
            ("{}.dtype is {}", value.dtype),
            ("{}.shape == {}", value.shape),
        ):
            var = namespace.create("_guard")
            globals_[var] = expected
            checks.append(test.format(local, var))
    for (name, *path), var in containers.items():
        spec = program.input_types[name]
        for key in path:
            spec = spec[key]
        checks.append(f"len({var}) == {len(spec)}")
    return checks


def build_direct_entry(program, function, slow, validate):
    """``entry(*args, **kwargs)``, generated, calling ``function`` (which
    checks each new input signature itself: :class:`SelfCheckingJit`) on the
    inputs given as keywords, with no checks of its own; or ``None`` where
    the inputs are not plain keyword parameters (nested inputs). Any other
    call goes to ``slow``; where ``function`` rejects an argument's type
    before tracing (``TypeError``), ``validate(kwargs)`` names the input."""
    locals_ = _input_names(program)
    if not _keyword_parameters(program, locals_):
        return None
    namespace = Namespace(reserved=list(locals_) + list(ENTRY_NAMES))
    names = {k: namespace.create(k) for k in ("_compiled", "_absent", "_validate")}
    globals_ = {
        names["_compiled"]: function,
        names["_absent"]: _ABSENT,
        names["_validate"]: validate,
        "slow": slow,
    }
    absent = names["_absent"]
    params = "".join(f"{local}={absent}, " for local in locals_)
    given = ", ".join(f"({local!r}, {local})" for local in locals_)
    present = " and ".join(f"{local} is not {absent}" for local in locals_)
    arguments = ", ".join(locals_)
    keywords = ", ".join(f"{local!r}: {local}" for local in locals_)
    source = "\n".join(
        [
            f"def program(*args, {params}**kwargs):",
            f"    if not args and not kwargs and {present}:",
            "        try:",
            f"            return {names['_compiled']}({arguments})",
            "        except TypeError:",
            f"            {names['_validate']}({{{keywords}}})",
            "            raise",
            f"    kwargs.update((k, v) for k, v in ({given},) if v is not {absent})",
            "    return slow(*args, **kwargs)",
        ]
    )
    return _define(source, globals_, "program")


def build_call(program, function):
    """A generated ``def program(<inputs>): return function(<inputs>)``:
    the body :func:`build_entry` inlines to call a compiled ``function`` of
    the input arrays."""
    inputs = ", ".join(_input_names(program))
    global_ = Namespace(reserved=program.value_names).create("_compiled")
    source = f"def program({inputs}):\n    return {global_}({inputs})\n"
    return _define(source, {global_: function}, "program")


def _input_names(program):
    """The value names of the program's input leaves, in order (generated
    functions take them as parameters)."""
    return program.value_names[len(program.constants) : program.first_operation]


_ABSENT = type("Absent", (), {"__repr__": lambda self: "<no input given>"})()


# Up to this many inputs, the entry takes them as keyword parameters. CPython
# binds a call's ``**kwargs`` to parameters by comparing names, each key
# against the parameters before it: quadratic where keys are built strings
# (not interned), 80 us for 127 inputs, where reading them from the kwargs
# dict takes 4 us.
KEYWORD_PARAMETERS_MAX = 16


def _keyword_parameters(program, locals_):
    """Whether the entry can take the inputs as keyword parameters: each
    input is one array (no nesting) whose name is its local name."""
    leaves = program._input_leaves
    return (
        bool(leaves)
        and len(leaves) == len(program.inputs)
        and all(
            not path and name == local and is_plain_identifier(name)
            for (name, path, _), local in zip(leaves, locals_)
        )
    )


# Reentrant: a finalizer (below) may run while this thread holds it.
_LINECACHE_LOCK = threading.RLock()
# Sources of collected functions not yet dropped from linecache.
_STALE_SOURCES = collections.deque()


def _define(source, globals_, name):
    """Execute generated source and return the function ``name`` it defines.
    The source is registered with ``linecache`` (tracebacks show its lines)
    for as long as the function lives."""
    filename = f"<funsor_lowering program {next(_COUNTER)}>"
    lines = source.splitlines(True)
    with _LINECACHE_LOCK:
        _drop_stale_sources()
        linecache.cache[filename] = (len(source), None, lines, filename)
    exec(compile(source, filename, "exec"), globals_)
    fn = globals_[name]
    fn.__source__ = source
    weakref.finalize(fn, _forget_source, filename)
    return fn


def _forget_source(filename):
    """Drop a collected function's source from linecache. A finalizer runs
    at any allocation, also inside linecache's own loops over its cache
    (``checkcache`` lists it, then reads each entry): there the source is
    dropped later, at the next definition."""
    _STALE_SOURCES.append(filename)
    if not _inside_linecache():
        with _LINECACHE_LOCK:
            _drop_stale_sources()


def _drop_stale_sources():
    while _STALE_SOURCES:
        linecache.cache.pop(_STALE_SOURCES.popleft(), None)


def _inside_linecache():
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__") == "linecache":
            return True
        frame = frame.f_back
    return False


def generate_module_source(program, name="program"):
    """Self-contained source defining ``name(**inputs)``. Everything the
    function uses is local to a builder function, so the source runs under
    ``exec(code, env)`` and ``exec(code, None, env)`` alike."""
    valid = isinstance(name, str) and name.isascii() and is_plain_identifier(name)
    if not valid or name in RESERVED:
        raise ValueError(
            f"as_code(name={name!r}): the name must be an ASCII Python "
            f"identifier, not a keyword nor a name the generated code uses "
            f"(builtins, np, ops, funsor, torch, jnp, extra_ops, inputs)"
        )
    source, objects = generate_function_source(program, name, standalone=True)
    backend = program._array_backend
    imports = {"import funsor", "from funsor import ops"}
    definitions = []
    for var, obj in objects.items():
        if obj is numpy:
            imports.add("import numpy as np")
        elif isinstance(obj, ops.Op):
            definitions.append(f"{var} = {op_source(obj)}")
        elif backend.is_array(obj):
            literal, needs = backend.array_literal(obj)
            imports.update(needs)
            definitions.append(f"{var} = {literal}")
        else:
            definitions.append(f"{var} = {python_literal(obj)}")
    for module, alias in (("numpy", "np"), ("torch", "torch"), ("jax.numpy", "jnp")):
        if re.search(rf"\b{alias}\.", source):
            imports.add(
                f"import {module}" + (f" as {alias}" if alias != module else "")
            )
    if "extra_ops." in source or any("extra_ops." in d for d in definitions):
        imports.add("from funsor_lowering.ops import extra_ops")
    body = sorted(imports, key=lambda line: (line.startswith("from"), line))
    if not program._array_backend.is_funsor_default:
        body.append(f"funsor.set_backend({program.backend!r})")
    body += definitions + ["", *source.splitlines(), f"return {name}"]
    builder = f"_build_{name}"
    lines = [
        f"# Generated by OpProgram.as_code() ({program.backend} backend).",
        f"def {builder}():",
        *(f"    {line}" if line else "" for line in body),
        "",
        "",
        f"{name} = {builder}()",
        f"del {builder}",
    ]
    return "\n".join(lines) + "\n"


def _format_constant(value, value_type):
    if isinstance(value, (bool, int, float)):
        return repr(value)
    if value_type is not None and value_type.shape == () and hasattr(value, "item"):
        return repr(value.item())
    return "array"


def _format_op(operation, names):
    op = operation.op
    args = [names[a] for a in operation.args]
    if operation.packed:
        args = ["(" + ", ".join(args) + ")"]
    default = type(op)().defaults if _has_default_instance(op) else None
    params = [
        f"{k}={v!r}"
        for k, v in op.defaults.items()
        if default is None or default.get(k, object()) != v
    ]
    return f"{op.name}({', '.join(args + params)})"


def _has_default_instance(op):
    try:
        type(op)()
    except TypeError:
        return False
    return True


def format_listing(program):
    """A readable listing, one line per value, like a jaxpr."""
    names = program.value_names
    types = program.value_types

    def typed(i):
        return f"{names[i]}: {types[i]}" if types[i] is not None else names[i]

    first_input = len(program.constants)
    inputs = ", ".join(typed(i) for i in range(first_input, program.first_operation))
    lines = [f"OpProgram({inputs}) on {program.backend}:"]
    for i, value in enumerate(program.constants):
        lines.append(f"  {typed(i)} = {_format_constant(value, types[i])}")
    for k, operation in enumerate(program.operations):
        i = program.first_operation + k
        lines.append(f"  {typed(i)} = {_format_op(operation, names)}")
    lines.append(f"  return {structure_source(program.output, names)}")
    return "\n".join(lines)


def format_dot(program):
    """Graphviz source of the program's dataflow graph."""
    names = program.value_names
    types = program.value_types

    def label(i, text):
        kind = f"\\n{types[i]}" if types[i] is not None else ""
        return f"{text}{kind}".replace('"', "'")

    lines = ["digraph OpProgram {", "  rankdir=TB;", '  node [fontname="monospace"];']
    first_input = len(program.constants)
    for i in range(program.num_values):
        if i < first_input:
            text, shape = (
                f"{names[i]} = {_format_constant(program.constants[i], types[i])}",
                "box",
            )
        elif i < program.first_operation:
            text, shape = names[i], "ellipse"
        else:
            operation = program.operations[i - program.first_operation]
            text, shape = _format_op(operation, names), "box, style=rounded"
        lines.append(f'  v{i} [label="{label(i, text)}", shape={shape}];')
    for k, operation in enumerate(program.operations):
        for a in operation.args:
            lines.append(f"  v{a} -> v{program.first_operation + k};")
    for n, i in enumerate(iter_leaves(program.output)):
        lines.append(f'  out{n} [label="output {n}", shape=doubleoctagon];')
        lines.append(f"  v{i} -> out{n};")
    lines.append("}")
    return "\n".join(lines)
