"""How an :class:`~funsor_lowering.OpProgram` runs: generated code, cached
per call signature, thread-safe.

A program's ``__call__`` calls a generated *entry* function (once built, the
entry is the program's ``__call__`` itself: no call in between). It reads the input
arrays from the keywords, forms the call's signature (each array's type,
dtype and shape, and the length of each nested container) and looks it up
in a bounded table of *bodies*: generated functions with one statement per
operation, each calling the backend implementation that funsor's op
dispatch picks for the input types. A signature seen before runs its body
directly: no validation, no dispatch, no code generation. Any other call
takes the checked path: inputs are validated (errors name the input), the
body for the input types is generated if needed, and the signature is added
to the table.

Generated functions hold no per-call state, so calls from several threads
never see each other's values. The table and the bodies are bounded
(oldest dropped first). While a backend compiler traces a call
(``torch.compile``), the call runs a body generated before instead
(:meth:`~funsor_lowering.OpProgram.prepare`).

Example::

    >>> import numpy as np
    >>> from funsor import ops
    >>> from funsor.domains import Reals
    >>> from funsor_lowering.ir.program import OpProgram, Operation
    >>> program = OpProgram([], {"x": Reals[2]}, [Operation(ops.exp, (0,))], 1)
    >>> program(x=np.zeros(2))  # checked: validates, generates the body
    array([1., 1.])
    >>> program(x=np.ones(2))  # same signature: straight to the body
    array([2.71828183, 2.71828183])
    >>> program.cache_info()
    {'signatures': 1, 'bodies': 1}
"""

import threading
import types
from collections import OrderedDict

from ..ir.structure import path_suffix
from .codegen import (
    build_body,
    build_call,
    build_direct_entry,
    build_entry,
    build_unresolved,
)

# Bounds of the caches: signatures seen (per program) and generated bodies
# (one per tuple of input types: numpy arrays, tensors, jax tracers ...;
# on numpy and torch also dtypes, see ``ArrayBackend.body_key``).
MAX_SIGNATURES = 64
MAX_BODIES = 8


class Runtime:
    """The caches and entry point of one program (see the module docstring)."""

    def __init__(self, program):
        self.program = program
        self.bodies = OrderedDict()  # input types (body_key) -> body
        self.signatures = {}  # call signature -> body (read by the entry)
        self.lock = threading.Lock()
        self.signature = None  # generated: kwargs -> signature
        self.entry = self.call_checked  # the generated entry once built

    def call_checked(self, *args, **kwargs):
        """A call the entry could not serve: validate, run, remember."""
        if self.program._array_backend.is_compiling():
            return self.call_traced(kwargs)
        if args:
            raise _positional_error(self.program, args)
        values = self.program.validate(kwargs)
        body, outputs = self.body(values)
        self.remember(kwargs, values, body)
        return body(*values) if outputs is None else outputs

    def call_traced(self, kwargs):
        """A call while a backend compiler traces the program (``torch.compile``
        runs Python through its own tracer, which cannot generate code or
        take locks): validate and run the body generated before for the
        inputs' types (see :meth:`OpProgram.prepare`)."""
        values = self.program.validate(kwargs)
        body = self.bodies.get(self.type_key(values))
        if body is None:
            raise RuntimeError(
                f"{self.program!r} has no generated code for inputs of types "
                f"({', '.join(type(v).__name__ for v in values)}) yet, and "
                f"cannot generate it while a compiler traces it: call "
                f"program.prepare() (or the program once) before compiling"
            )
        return body(*values)

    def type_key(self, values):
        """The key of the body serving input arrays ``values``."""
        return tuple(map(self.program._array_backend.body_key, values))

    def body(self, values):
        """``(body, outputs)``: the generated body for the types of
        ``values``; where it was generated now, the outputs computed while
        resolving the implementations (so random ops draw once per call),
        else ``None``."""
        key = self.type_key(values)
        body = self.bodies.get(key)
        if body is not None:
            return body, None
        try:
            body, outputs = build_body(self.program, values)
        except Exception:
            # Let the error surface from generated code, whose traceback
            # shows the failing operation's line.
            build_unresolved(self.program)(*values)
            raise
        with self.lock:
            self.bodies[key] = body
            while len(self.bodies) > MAX_BODIES:
                self.bodies.popitem(last=False)
        return body, outputs

    def remember(self, kwargs, values, body):
        """Add the signature of ``kwargs`` (validated, with input arrays
        ``values``) to the entry's table; the first builds the entry, with
        ``body`` inline for that signature."""
        with self.lock:
            if self.signature is None:
                self.signature, entry = build_entry(
                    self.program,
                    self.signatures,
                    self.call_checked,
                    (values, body),
                    method=True,
                )
            else:
                entry = None
            table = self.signatures
            table[self.signature(kwargs)] = body
            while len(table) > MAX_SIGNATURES:
                del table[next(iter(table))]
            if entry is not None:
                self.entry = types.MethodType(entry, self.program)
                self.program._install_entry(entry)

    def cache_info(self):
        return {"signatures": len(self.signatures), "bodies": len(self.bodies)}


class SelfCheckingJit:
    """The compiler :meth:`ArrayBackend.jit` returns where one compiled
    ``function`` serves every input signature, tracing each new one and
    checking its operands while tracing (``jax.jit`` of a function that
    calls :meth:`~funsor_lowering.OpProgram.validate_leaves`): a call
    needs no checks of its own, so the program's jit entry calls
    ``function`` directly. ``signatures()`` counts the signatures traced."""

    def __init__(self, function, signatures):
        self.function = function
        self.signatures = signatures

    def __call__(self, leaves):
        return self.function


class JitEntry:
    """A backend compiler's functions (``jax.jit``, ``torch.jit.trace`` ...)
    behind a generated entry, as :class:`Runtime` serves bodies.

    ``compiler(values)`` gives, for validated input arrays ``values``, a
    function of the input arrays (positionally) returning the program's
    outputs; it is asked once per call signature. The first signature's
    checks and call are inline in the entry (as hand-written code would
    call the compiled function); other signatures seen before are one table
    lookup; any other call is validated first (errors name the input).
    A compiler that checks each signature as it traces it
    (:class:`SelfCheckingJit`: ``jax.jit``)
    is called directly, with no checks in the entry, where the inputs are
    plain arrays.
    """

    def __init__(self, program, compiler):
        self.program = program
        self.compiler = compiler
        self.functions = {}  # call signature -> function (read by the entry)
        self.lock = threading.Lock()
        self.signature = None  # generated: kwargs -> signature
        self.entry = self.call_checked
        self.direct = None
        if isinstance(compiler, SelfCheckingJit):
            self.direct = build_direct_entry(
                program, compiler.function, self.call_checked, program.validate
            )
        if self.direct is not None:
            # what program.jit() returns: the generated function itself (no
            # call in between), with this entry's attributes
            self.entry = self.direct
            self.direct.cache_info = self.cache_info
            self.direct.compiler = compiler

    def __call__(self, *args, **kwargs):
        return self.entry(*args, **kwargs)

    def cache_info(self):
        """``signatures``: the input signatures compiled for."""
        if isinstance(self.compiler, SelfCheckingJit):
            return {"signatures": self.compiler.signatures()}
        return {"signatures": len(self.functions)}

    def call_checked(self, *args, **kwargs):
        if args:
            raise _positional_error(self.program, args)
        values = self.program.validate(kwargs)
        # compiling under the lock: concurrent first calls compile once
        with self.lock:
            if self.signature is None:
                function = self.compiler(values)
                self.signature, entry = build_entry(
                    self.program,
                    self.functions,
                    self.call_checked,
                    (values, build_call(self.program, function)),
                )
                self.functions[self.signature(kwargs)] = function
                self.entry = entry
            else:
                key = self.signature(kwargs)
                function = self.functions.get(key)
                if function is None:
                    function = self.functions[key] = self.compiler(values)
        return function(*values)


def _positional_error(program, args):
    return TypeError(
        f"OpProgram takes keyword arguments only "
        f"({', '.join(map(repr, program.inputs))}), got "
        f"{len(args)} positional argument(s)"
    )


def prepared(program, inputs=None):
    """``program``, its code generated now where a backend compiler may
    trace it (torch: :meth:`OpProgram.prepare`). Preparing runs the
    program on ``inputs`` (by default stand-ins); where that fails (values
    a stand-in does not satisfy), the first call generates the code
    instead."""
    if program._array_backend.prepares_programs:
        try:
            program.prepare(inputs)
        except Exception:  # noqa: BLE001 - only a missed optimization
            pass
    return program


def check_nesting(name, spec, value, path=()):
    """Check that input ``name``'s ``value`` has exactly the nesting of
    ``spec`` (the same dict keys, tuple and list lengths); ``TypeError``
    naming the input and the extra or missing keys otherwise."""
    label = f"input {name!r}{path_suffix(path)}"
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            raise TypeError(
                f"{label}: expected a dict with keys {list(spec)}, got "
                f"{type(value).__name__}"
            )
        extra = [k for k in value if k not in spec]
        missing = [k for k in spec if k not in value]
        if extra or missing:
            parts = [f"unexpected key(s) {extra}"] if extra else []
            parts += [f"missing key(s) {missing}"] if missing else []
            raise TypeError(f"{label}: {'; '.join(parts)}; expected keys {list(spec)}")
        for key, item in spec.items():
            check_nesting(name, item, value[key], path + (key,))
    elif isinstance(spec, (tuple, list)):
        if not isinstance(value, (tuple, list)) or len(value) != len(spec):
            got = (
                f"{type(value).__name__} of length {len(value)}"
                if isinstance(value, (tuple, list))
                else type(value).__name__
            )
            raise TypeError(
                f"{label}: expected a tuple or list of length {len(spec)}, got {got}"
            )
        for k, item in enumerate(spec):
            check_nesting(name, item, value[k], path + (k,))
