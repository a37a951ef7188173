"""Interpretations pushed on funsor's interpreter stack."""

from .compiling import CompilingInterpretation, compiling

__all__ = ["CompilingInterpretation", "compiling"]
