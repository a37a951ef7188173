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
"""

from . import shapes  # noqa: F401  (registers corrected shape rules)
from .compiler import compile_function, compile_funsor, lower
from .interpretations import CompilingInterpretation, compiling
from .program import OpProgram
from .tracer import trace_function

__all__ = [
    "CompilingInterpretation",
    "OpProgram",
    "compile_function",
    "compile_funsor",
    "compiling",
    "lower",
    "trace_function",
]
