"""Pyro integration. Importing this package registers the compiled
AutoGaussian backend with Pyro::

    import funsor_lowering.pyro  # noqa: F401
    guide = AutoGaussian(model, backend="compiled")

and provides compiled drop-ins for ``pyro.contrib.funsor``'s enumeration
losses and ``infer_discrete`` (same names, same arguments)::

    from funsor_lowering.pyro import TraceEnum_ELBO, infer_discrete

Code written against pyroapi names the backend ``"funsor_lowering"``
(``pyro.contrib.funsor``'s, with these in its ``infer`` module)::

    with pyroapi.pyro_backend("funsor_lowering"):
        ...
"""

import pyroapi

from .autogaussian import AutoGaussianCompiled
from .discrete import infer_discrete
from .enum_elbo import (
    JitTraceEnum_ELBO,
    JitTraceMarkovEnum_ELBO,
    TraceEnum_ELBO,
    TraceMarkovEnum_ELBO,
)
from .infer import PYROAPI_BACKEND

pyroapi.register_backend("funsor_lowering", PYROAPI_BACKEND)

__all__ = [
    "AutoGaussianCompiled",
    "JitTraceEnum_ELBO",
    "JitTraceMarkovEnum_ELBO",
    "TraceEnum_ELBO",
    "TraceMarkovEnum_ELBO",
    "infer_discrete",
]
