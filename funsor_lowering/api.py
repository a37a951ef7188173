"""The public entry points, one per route to an :class:`OpProgram`:

- lower, then compile: :func:`lower` and :func:`compile_funsor` (a funsor),
  :func:`compile_function` (a function of funsors, run once in a
  :class:`CompilingInterpretation` block);
- trace: :func:`trace_function` (a function of arrays, run on them while
  every ``funsor.ops`` call is recorded).

Example::

    >>> import numpy as np
    >>> from funsor.domains import Reals
    >>> program = compile_function(lambda x: (x * x).sum(), x=Reals[3])
    >>> program(x=np.array([1.0, 2.0, 3.0]))
    array(14.)
"""

import functools

from funsor.terms import Variable

from .compiler import compile_funsor, lower
from .errors import NeedsEagerValues
from .interpretations import CompilingInterpretation, compiling
from .program import OpProgram
from .tracing.tracer import trace_function, trace_symbolic


def compile_function(fn=None, **domains):
    """Compile ``fn`` to an :class:`OpProgram`: ``fn`` receives one funsor
    ``Variable`` per keyword and returns a funsor or a nesting of tuples,
    lists and dicts of funsors; the program takes the real-valued keywords
    as arrays and returns the same nesting of arrays. Also a decorator.

    Sampling and ``funsor.adjoint``'s tape, which funsor runs on concrete
    values only, run once as segments traced on symbolic arrays (see
    :mod:`funsor_lowering.interpretations.eager_steps`); random draws stay live.
    A function that builds a ``Gaussian`` from its keyword funsors is traced
    whole: ``fn`` runs on ``Tensor`` s of symbolic arrays while every
    op is recorded (:func:`funsor_lowering.tracing.tracer.trace_symbolic`).

    Example::

        >>> import numpy as np
        >>> from funsor.domains import Reals
        >>> @compile_function(x=Reals[2])
        ... def program(x):
        ...     return {"double": x * 2, "pair": (x.exp(), -x)}
        >>> program(x=np.zeros(2))["pair"][0]
        array([1., 1.])
    """
    if fn is None:
        return functools.partial(compile_function, **domains)
    variables = {name: Variable(name, domain) for name, domain in domains.items()}
    interp = CompilingInterpretation()
    try:
        with interp:
            result = fn(**variables)
    except NeedsEagerValues:
        return trace_symbolic(fn, domains)
    return interp.compile(result, inputs=domains)


__all__ = [
    "CompilingInterpretation",
    "OpProgram",
    "compile_function",
    "compile_funsor",
    "compiling",
    "lower",
    "trace_function",
]
