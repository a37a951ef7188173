"""``OpProgram`` -> Python: the fast callable, ``as_code()`` source and the
``print(program)`` listing.

The fast callable is generated source with one statement per operation; ops
and constants are passed in a globals dict (never written into the source), and
the source is registered with ``linecache`` so tracebacks show the failing line.

Example::

    >>> from funsor import ops
    >>> from funsor.domains import Reals
    >>> from funsor_lowering.program import OpProgram, Operation
    >>> p = OpProgram([2.0], {"x": Reals[2]}, [Operation(ops.mul, (1, 0))], 2)
    >>> print(generate_function_source(p, "program", standalone=False)[0])
    def program(x):
        mul = _mul(x, c0)
        return np.asarray(mul)
"""

import itertools
import linecache
import operator

import numpy
from funsor import ops
from funsor.registry import PartialDefault

from . import extra_ops
from .backends.base import python_literal
from .naming import Namespace, is_plain_identifier
from .program import iter_leaves, map_leaves, path_suffix

_COUNTER = itertools.count()

# funsor's default implementations of layout ops, written inline (the same
# expression the default evaluates).
INLINE_DEFAULTS = {
    ops.getslice.default: "{}[{}]",
    ops.ReshapeOp.dispatcher.default.default: "{}.reshape({})",
}

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


def structure_source(structure, names):
    """Source building the output nesting from value names."""
    if isinstance(structure, tuple):
        items = [structure_source(s, names) for s in structure]
        return f"({items[0]},)" if len(items) == 1 else "({})".format(", ".join(items))
    if isinstance(structure, list):
        return "[{}]".format(", ".join(structure_source(s, names) for s in structure))
    if isinstance(structure, dict):
        items = []
        for key, value in structure.items():
            if not isinstance(key, (str, int)):
                raise TypeError(f"output dict keys must be str or int, got {key!r}")
            items.append(f"{key!r}: {structure_source(value, names)}")
        return "{{{}}}".format(", ".join(items))
    return names[structure]


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
    :mod:`funsor_lowering.extra_ops` as ``extra_ops``), that evaluates to
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


def generate_function_source(program, name, *, standalone, resolved=None):
    """Source of ``def name(...)`` and the globals it needs.

    With ``standalone=False`` the function takes the inputs positionally and
    reads ops and constants from the returned globals dict. With
    ``standalone=True`` it takes the inputs as keywords and refers to ops as
    ``ops.<name>`` and to module-level names the caller defines (constants and
    parametrized ops, listed in the returned dict as name -> object).
    """
    names = program.value_names
    namespace = Namespace(reserved=list(names) + [name])
    globals_ = {}
    op_names = {}

    def op_name(op):
        if op not in op_names:
            source = module_op_source(op) if standalone else None
            if source is not None:
                op_names[op] = source
            else:
                hint = f"{op.name}_op" if standalone else f"_{op.name}"
                op_names[op] = namespace.create(hint)
                globals_[op_names[op]] = op
        return op_names[op]

    for i, value in enumerate(program.constants):
        globals_[names[i]] = value

    first_input = len(program.constants)
    input_names = names[first_input : program.first_operation]
    leaves = program._input_leaves
    lines = []
    if not standalone:
        lines.append(f"def {name}({', '.join(input_names)}):")
    elif all(
        is_plain_identifier(raw) and raw == local and not path
        for (raw, path, _), local in zip(leaves, input_names)
    ):
        params = f"*, {', '.join(input_names)}" if input_names else ""
        lines.append(f"def {name}({params}):")
    else:
        lines.append(f"def {name}(**inputs):")
        for (raw, path, _), local in zip(leaves, input_names):
            lines.append(f"    {local} = inputs[{raw!r}]{path_suffix(path)}")

    output_sources = list(names)
    if program.backend == "numpy":
        # numpy ops return numpy scalars for 0-d results; funsor's Tensor data
        # (and so the program's contract) is a 0-d array.
        types = program.value_types
        for i in iter_leaves(program.output):
            if i >= program.first_operation and (
                types[i] is None or not types[i].shape
            ):
                globals_.setdefault("np", numpy)
                output_sources[i] = f"np.asarray({names[i]})"
    impl_names = {}

    def impl_call(operation, impl, extra, kwargs, args):
        symbol = PYTHON_OPERATORS.get(impl) if not (extra or kwargs) else None
        if symbol is not None:  # the operator itself, as hand-written code has it
            operands = [names[a] for a in operation.args]
            if len(operands) == 1:
                return f"{symbol}{operands[0]}"
            return f" {symbol} ".join(operands)
        template = INLINE_DEFAULTS.get(impl) if len(extra) == 1 and not kwargs else None
        if template is not None:  # x[index], x.reshape(shape)
            var = namespace.create(f"_{operation.op.name}_p")
            globals_[var] = extra[0]
            return template.format(args, var)
        key = (id(impl), tuple(map(id, extra)), tuple(kwargs.items()))
        if key not in impl_names:
            base = namespace.create(f"_{operation.op.name}_impl")
            globals_[base] = impl
            params = []
            for i, value in enumerate(extra):
                var = namespace.create(f"{base}_p{i}")
                globals_[var] = value
                params.append(var)
            for k, value in kwargs.items():
                var = namespace.create(f"{base}_{k}")
                globals_[var] = value
                params.append(f"{k}={var}")
            impl_names[key] = (base, params)
        base, params = impl_names[key]
        return f"{base}({', '.join([args] + params)})"

    for k, operation in enumerate(program.operations):
        args = ", ".join(names[a] for a in operation.args)
        if operation.packed:
            args = f"({args},)" if len(operation.args) == 1 else f"({args})"
        target = names[program.first_operation + k]
        if resolved is None:
            call = f"{op_name(operation.op)}({args})"
        else:
            call = impl_call(operation, *resolved[k], args)
        lines.append(f"    {target} = {call}")
    lines.append(f"    return {structure_source(program.output, output_sources)}")
    return "\n".join(lines), globals_


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
    impl = backend.fast_implementation(cls, call_args[cls.arity :])
    if impl is None or not all(backend.is_array(a) for a in call_args[: cls.arity]):
        impl = cls.dispatcher.partial_call(*call_args[: cls.arity])
    if isinstance(impl, PartialDefault):  # funsor's wrapper of the op's default
        impl = impl.default
    return impl, tuple(call_args[cls.arity :]), dict(call_kwargs)


def evaluate(program, values):
    """Reference evaluation (like jax's ``eval_jaxpr``): run the program on
    input ``values`` through funsor's op dispatch. Returns every value and
    the resolved implementation of every operation."""
    env = list(program.constants) + list(values)
    resolved = []
    for operation in program.operations:
        args = [env[a] for a in operation.args]
        if operation.packed:
            args = [tuple(args)]
        impl, extra, kwargs = resolve(operation.op, args, program._array_backend)
        resolved.append((impl, extra, kwargs))
        env.append(impl(*args, *extra, **kwargs))
    return env, resolved


def build_callable(program, sample_inputs=None):
    """The fast callable: generated Python taking the inputs positionally.
    Given ``sample_inputs``, each op calls the implementation funsor's
    dispatcher picks for the argument types those inputs produce (kept as
    the callable's ``__resolved__``)."""
    resolved = first_outputs = None
    if sample_inputs is not None:
        env, resolved = evaluate(program, sample_inputs)
        first_outputs = outputs_of(program, env)
    source, globals_ = generate_function_source(
        program, "program", standalone=False, resolved=resolved
    )
    fn = _define(source, globals_)
    fn.__resolved__ = resolved
    # The outputs for sample_inputs, so the call that specializes returns
    # them instead of running the program twice (random ops draw once).
    fn.__first_outputs__ = first_outputs
    return fn


def outputs_of(program, env):
    """The program's output nesting from all its values ``env``, as the
    generated code returns it (0-d numpy results as 0-d arrays)."""
    types = program.value_types

    def leaf(i):
        value = env[i]
        if program.backend == "numpy" and i >= program.first_operation:
            if types[i] is None or not types[i].shape:
                value = numpy.asarray(value)
        return value

    return map_leaves(leaf, program.output)


def build_guarded_callable(program, values, resolved, slow):
    """The entry point for calls with the types, dtypes and shapes of
    ``values``: generated code taking the keywords, checking those with
    identity and equality tests (the guard), then running the operations with
    the ``resolved`` implementations (see :func:`build_callable`). Any other
    call goes to ``slow(*args, **kwargs)``, which validates and dispatches."""
    body, globals_ = generate_function_source(
        program, "program", standalone=False, resolved=resolved
    )
    header, *statements = body.splitlines()
    names = program.value_names[len(program.constants) : program.first_operation]
    lines = [
        "def program(*args, **kwargs):",
        f"    if not args and len(kwargs) == {len(program.inputs)}:",
        "        try:",
    ]
    if not names:
        lines.append("            pass")
    for (raw, path, _), local in zip(program._input_leaves, names):
        lines.append(f"            {local} = kwargs[{raw!r}]{path_suffix(path)}")
    lines.append("        except (LookupError, TypeError):")
    lines.append("            return _slow(*args, **kwargs)")
    checks = []
    for k, (local, value) in enumerate(zip(names, values)):
        for attr, expected, test in (
            ("type", type(value), "type({}) is {}"),
            ("dtype", value.dtype, "{}.dtype is {}"),
            ("shape", value.shape, "{}.shape == {}"),
        ):
            var = f"_guard_{attr}{k}"
            globals_[var] = expected
            checks.append(test.format(local, var))
    lines.append(f"        if {' and '.join(checks) or 'True'}:")
    lines += ["        " + line for line in statements]
    lines.append("    return _slow(*args, **kwargs)")
    globals_["_slow"] = slow
    return _define("\n".join(lines), globals_)


def _define(source, globals_):
    """Execute generated ``def program`` source (registered with linecache,
    so tracebacks show its lines) and return the function."""
    filename = f"<funsor_lowering program {next(_COUNTER)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), globals_)
    fn = globals_["program"]
    fn.__source__ = source
    return fn


def generate_module_source(program, name="program"):
    """Self-contained module source defining ``name(**inputs)``."""
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
    if "extra_ops." in source or any("extra_ops." in d for d in definitions):
        imports.add("from funsor_lowering import extra_ops")
    header = [
        f"# Generated by OpProgram.as_code() ({program.backend} backend).",
        *sorted(imports),
    ]
    if program.backend != "numpy":
        header.append(f"funsor.set_backend({program.backend!r})")
    parts = ["\n".join(header)]
    if definitions:
        parts.append("\n".join(definitions))
    parts.append(source)
    return "\n\n".join(parts) + "\n"


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
