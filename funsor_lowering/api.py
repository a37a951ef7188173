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

from .ir.program import OpProgram
from .lowering.compiler import compile_funsor, lower
from .lowering.interpretations import CompilingInterpretation, compiling
from .lowering.interpretations.recording import block_state
from .lowering.interpretations.segments import Segment
from .ops.concretization import backend_errors_named
from .tracing.tracer import trace_function


def compile_function(fn=None, **domains):
    """Compile ``fn`` to an :class:`OpProgram`: ``fn`` receives one funsor
    ``Variable`` per keyword and returns a funsor or a nesting of tuples,
    lists and dicts of funsors; the program takes the real-valued keywords
    as arrays and returns the same nesting of arrays. Also a decorator.

    Sampling and ``funsor.adjoint``'s tape, which funsor runs on concrete
    values only, run once as segments traced on symbolic arrays (see
    :mod:`funsor_lowering.lowering.interpretations.eager_steps`); random
    draws stay live.
    A ``Gaussian`` built from the keyword funsors holds their shadows
    (symbolic arrays), and terms over it are evaluated as eager funsor
    evaluates them, every op recorded: ``fn`` still runs once.

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
    real = {name for name, domain in domains.items() if domain.dtype == "real"}
    interp = CompilingInterpretation()
    with interp:
        state = block_state(interp)
        state.region = region = Segment(real, state.recording)
        try:
            # code between the region's evaluations may compute on its arrays
            with region.world.recorder.symbolic_only(), backend_errors_named():
                result = fn(**variables)
            if region.world.arrays:  # Gaussians were built from the keywords
                result = region.embed(result)
        finally:
            state.region = None
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
