"""Errors that name the term, op or input that could not be handled."""

import functools
import importlib.util
import os
import sys

from funsor.typing import get_origin

# What the lowering rules handle, for error messages.
SUPPORTED = (
    "real and Bint Variables, Numbers, Tensors, Slice, Unary, Binary, Finitary, "
    "Tuple, Reduce and Contraction over Bint inputs, Subs, Lambda, Independent, "
    "Stack, Cat, Align, MarkovProduct, Approximate (exact), funsor distributions"
)

# Where support for a funsor term type belongs, by term type name.
RULE_FILES = {
    "Variable": "atoms.py",
    "Number": "atoms.py",
    "Tensor": "atoms.py",
    "Slice": "atoms.py",
    "Unary": "elementwise.py",
    "Binary": "elementwise.py",
    "Finitary": "elementwise.py",
    "Tuple": "elementwise.py",
    "Contraction": "contraction.py",
    "Reduce": "reductions.py",
    "Subs": "substitution.py",
    "Lambda": "indexing.py",
    "MarkovProduct": "sum_product.py",
    "Independent": "indexing.py",
    "Stack": "indexing.py",
    "Cat": "indexing.py",
    "Align": "indexing.py",
    "Gaussian": "gaussian.py",
    "Distribution": "distributions.py",
    "Approximate": "approximate.py",
    "Delta": "delta.py",
}


def rule_file(term_type_name):
    """The file of ``funsor_lowering/lowering/rules/`` where a term type's rules go."""
    return "funsor_lowering/lowering/rules/" + RULE_FILES.get(
        term_type_name, term_type_name.lower() + ".py"
    )


def source_name(name):
    """A bound variable's name as the user wrote it (funsor appends
    ``__BOUND_<n>`` when it alpha-converts)."""
    return name.split("__BOUND_")[0]


@functools.cache
def library_prefixes(names):
    """Path prefixes of the source of packages ``names`` (a tuple), found
    without importing them; packages not installed are left out."""
    prefixes = []
    for name in names:
        spec = importlib.util.find_spec(name)
        locations = (spec.submodule_search_locations or []) if spec else []
        prefixes += [os.path.join(location, "") for location in locations]
    return tuple(prefixes)


def in_libraries(frame, names):
    """Whether ``frame`` runs code of packages ``names`` (or Python's own)."""
    filename = frame.f_code.co_filename
    return filename.startswith(library_prefixes(names) + ("<frozen",))


def location(frame):
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


def user_frame():
    """``file:line`` of the innermost caller outside funsor and
    funsor_lowering (the user's code), or ``None``."""
    frame = sys._getframe(1)
    while frame is not None and in_libraries(frame, ("funsor", "funsor_lowering")):
        frame = frame.f_back
    return None if frame is None else location(frame)


def short_repr(term, limit=160):
    text = repr(term)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class UnsupportedTermError(NotImplementedError):
    """A funsor term that no lowering rule handles.

    Example::

        >>> from funsor.domains import Reals
        >>> from funsor.terms import Variable
        >>> error = UnsupportedTermError(Variable("x", Reals[2]), "an example")
        >>> print(str(error)[:51])
        cannot lower Variable term Variable('x', Reals[2]):
    """

    def __init__(self, term, reason=None):
        self.term = term
        name = get_origin(type(term)).__name__
        signature = ", ".join(
            get_origin(type(arg)).__name__ for arg in getattr(term, "_ast_values", ())
        )
        message = f"cannot lower {name} term {short_repr(term)}"
        if reason:
            message += f": {reason}"
        else:
            message += f": no lowering rule matches {name}({signature})"
        family = next(
            (
                c.__name__
                for c in get_origin(type(term)).__mro__
                if c.__name__ in RULE_FILES
            ),
            name,
        )
        message += (
            f". Supported: {SUPPORTED}. Support for {name} would go in "
            f"{rule_file(family)}"
        )
        super().__init__(message)


class IntermediateTooLargeError(MemoryError):
    """Compiling a term would materialize an intermediate array larger than
    :data:`funsor_lowering.lowering.layout.MAX_INTERMEDIATE_ELEMENTS` elements.

    Example::

        >>> error = IntermediateTooLargeError((1000, 1000, 1000), 10**8)
        >>> print(str(error)[:59])
        compiling would materialize an intermediate of shape (1000,
    """

    def __init__(self, shape, limit, term=None):
        self.shape, self.limit, self.term = tuple(shape), limit, term
        super().__init__(self._message())

    def naming(self, term):
        """This error, naming ``term`` (the innermost term being lowered)."""
        if self.term is None:
            self.term = term
            self.args = (self._message(),)
        return self

    def _message(self):
        size = 1
        for n in self.shape:
            size *= n
        where = f" {short_repr(self.term)}" if self.term is not None else ""
        return (
            f"compiling{where} would materialize an intermediate of shape "
            f"{self.shape} ({size:,} elements, {size * 8 / 2**30:.1f} GiB in "
            f"float64), more than the limit of {self.limit:,} elements "
            f"(funsor_lowering.lowering.layout.MAX_INTERMEDIATE_ELEMENTS); build the "
            f"sum-product so it factorizes (funsor's sum_product with "
            f"apply_optimizer, or a Contraction over the factors)"
        )


class NeedsEagerValues(NotImplementedError):
    """Raised inside a compiling block by funsor code that only works on
    eager values and that a segment cannot hold symbolically: a Gaussian of
    symbolic arrays outside ``compile_function`` (whose eager region holds
    them), or a Gaussian result."""
