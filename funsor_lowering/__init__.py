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

Names are imported on first use, so running a (pickled) program loads only
the IR, runtime and backends (``ir``, ``runtime``, ``backends``), not the
compiler.
"""

import importlib

__version__ = "0.1.0"

# Public name -> the module defining it (the front end, funsor_lowering.api,
# imports them all; unpickling a program needs only funsor_lowering.ir).
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
    # from the first public name on, funsor's interpretation stack is local
    # to each thread and task (hooks installs it), before any block runs
    importlib.import_module("funsor_lowering.funsor_hooks")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__ + ["__version__"]
