"""funsor_lowering: compile symbolic funsor computations into straight-line
programs of ``funsor.ops`` applications (:class:`OpProgram`).

Example::

    >>> import numpy as np
    >>> from funsor.domains import Reals
    >>> from funsor.terms import Variable
    >>> from funsor_lowering import compile_funsor
    >>> a = Variable("a", Reals[2, 2])
    >>> x, b = Variable("x", Reals[2]), Variable("b", Reals[2])
    >>> program = compile_funsor(a @ x + b)
    >>> print(program)
    OpProgram(a: real[2,2], x: real[2], b: real[2]) on numpy:
      matmul: real[2] = matmul(a, x)
      add: real[2] = add(matmul, b)
      return add

Importing the package installs its hooks into funsor (which change nothing
outside its own blocks) and loads the IR, runtime and backends (``ir``,
``runtime``, ``backends``): all a (pickled) program needs to run. The
public names below are imported on first use: the compiler and the tracer
load only when used.
"""

import importlib

__version__ = "0.1.0"


def _connect_layers():
    """Install the hooks into funsor (:mod:`.funsor_hooks`) and connect the
    IR to the layers above it: a program calls its runtime and its
    backend's array facts, which the IR does not import (layers import only
    the layers below them). Here, on the package's first import, so before
    any program exists, built or unpickled, and before any block runs."""
    from . import funsor_hooks  # noqa: F401  (installs the hooks)
    from .backends import array_backend, usable_array_backend
    from .ir import program
    from .runtime import codegen, entry

    def vmap(op_program, in_axes):  # imported on first use (it imports passes)
        from .runtime.vmap import VmappedProgram

        return VmappedProgram(op_program, in_axes)

    program.connect(
        vmap=vmap,
        array_backend=array_backend,
        usable_array_backend=usable_array_backend,
        Runtime=entry.Runtime,
        JitEntry=entry.JitEntry,
        check_nesting=entry.check_nesting,
        evaluate=codegen.evaluate,
        format_dot=codegen.format_dot,
        format_listing=codegen.format_listing,
        generate_module_source=codegen.generate_module_source,
    )


_connect_layers()

# Public name -> the module defining it (the front end, funsor_lowering.api,
# imports them all).
_EXPORTS = {
    "CompilingInterpretation": "funsor_lowering.lowering.interpretations",
    "OpProgram": "funsor_lowering.ir.program",
    "compile_function": "funsor_lowering.api",
    "compile_funsor": "funsor_lowering.lowering.compiler",
    "compiling": "funsor_lowering.lowering.interpretations",
    "jit": "funsor_lowering.tracing.decorator",
    "lower": "funsor_lowering.lowering.compiler",
    "trace_function": "funsor_lowering.tracing.tracer",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'funsor_lowering' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__ + ["__version__"]
