"""Pyro integration. Importing this package registers the compiled
AutoGaussian backend with Pyro::

    import funsor_lowering.pyro  # noqa: F401
    guide = AutoGaussian(model, backend="compiled")
"""

from .autogaussian import AutoGaussianCompiled

__all__ = ["AutoGaussianCompiled"]
