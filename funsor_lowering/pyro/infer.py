"""``pyro.contrib.funsor.infer`` with this package's compiled losses and
``infer_discrete`` in place of contrib's: the ``infer`` module of the
pyroapi backend ``"funsor_lowering"``, so that code written against
pyroapi runs compiled by naming that backend::

    import funsor_lowering.pyro  # registers the backend
    from pyroapi import infer, pyro_backend

    with pyro_backend("funsor_lowering"):
        elbo = infer.TraceEnum_ELBO(max_plate_nesting=1)  # ours

Everything else (``Trace_ELBO``, ``TraceTMC_ELBO``, ``SVI`` ...) is
contrib's.
"""

from pyro.contrib.funsor.infer import (  # noqa: F401
    ELBO,
    SVI,
    JitTrace_ELBO,
    JitTraceTMC_ELBO,
    Trace_ELBO,
    TraceTMC_ELBO,
    config_enumerate,
)

from .discrete import infer_discrete  # noqa: F401
from .enum_elbo import (  # noqa: F401
    JitTraceEnum_ELBO,
    JitTraceMarkovEnum_ELBO,
    TraceEnum_ELBO,
    TraceMarkovEnum_ELBO,
)

#: pyroapi's module names -> backend modules: ``pyro.contrib.funsor``'s
#: backend with this module as ``infer``.
PYROAPI_BACKEND = {
    "distributions": "pyro.distributions",
    "handlers": "pyro.contrib.funsor.handlers",
    "infer": __name__,
    "ops": "torch",
    "optim": "pyro.optim",
    "pyro": "pyro.contrib.funsor",
}
