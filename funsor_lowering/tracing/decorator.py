"""``jit``: run existing funsor code compiled, in the style of ``jax.jit``.

``jit(fn)`` takes the same arguments as ``fn``: funsor ``Tensor`` s (and
other terms holding arrays, e.g. ``Gaussian`` s), backend arrays, numbers,
or nestings of tuples, lists and dicts of them. The first call with a new
*signature* traces ``fn`` once on symbolic arrays (:func:`trace_function`)
into an :class:`~funsor_lowering.OpProgram`; later calls with that
signature run the cached program, with no funsor work but rebuilding the
returned terms. A signature is the arguments' nesting, each array's type,
shape, dtype and device, each funsor term's type and non-array parts
(``.inputs``, domains), and the values of all other arguments, which are
*static*: they must be hashable.

Under funsor's ``MonteCarlo()`` over ``eager`` (as Pyro's and minipyro's
training loops run: without an ``rng_key``, which would be data), the
call compiles with ``MonteCarlo`` in effect, its ``sample_inputs`` part of
the signature; a signature whose tracing fails there (a sampler computing
outside ``funsor.ops``) runs as written from then on. Under another
interpretation (``lazy``, ``moment_matching``, ``reflect``, or while
tracing), ``jit(fn)`` calls
``fn`` as written: there is nothing to compile, or the surrounding trace
records ``fn``'s operations itself.

Example::

    >>> import numpy as np
    >>> from collections import OrderedDict
    >>> from funsor import ops
    >>> from funsor.domains import Bint
    >>> from funsor.tensor import Tensor
    >>> from funsor.sum_product import sum_product
    >>> @jit
    ... def marginal(factors, eliminate):
    ...     return sum_product(ops.logaddexp, ops.add, factors, eliminate)
    >>> f = Tensor(np.zeros((2, 3)), OrderedDict(i=Bint[2], j=Bint[3]))
    >>> g = Tensor(np.zeros(3), OrderedDict(j=Bint[3]))
    >>> result = marginal([f, g], frozenset({"j"}))
    >>> result.inputs, result.data.round(4)
    (OrderedDict([('i', Bint[2])]), array([1.0986, 1.0986]))
    >>> marginal.cache_info()["signatures"]
    1
"""

import contextlib
import contextvars
import functools
import inspect
import re
import threading
import types
from collections import Counter, OrderedDict

import funsor.interpreter
from funsor.interpretations import eager
from funsor.montecarlo import MonteCarlo
from funsor.util import get_backend

from ..backends import array_backend
from ..ir.structure import path_suffix
from ..ops.symbolic import SymbolicArray
from .pytree import Static, describe, flatten, unflatten
from .tracer import trace_function

DEFAULT_MAX_SIGNATURES = 64
# set while a jitted function is traced: calls of jitted functions inside
# it are recorded as part of its program
_TRACING = contextvars.ContextVar("funsor_lowering.jit.tracing", default=False)


def jit(
    fn=None,
    *,
    static_argnums=(),
    static_argnames=(),
    max_signatures=DEFAULT_MAX_SIGNATURES,
):
    """Compile ``fn`` once per call signature and replay the program.

    :param fn: a function of funsor terms, arrays, numbers and nestings of
        them (see the module docstring); returns the same kinds.
    :param static_argnums: positions of arguments that are static even if
        they are arrays (as in ``jax.jit``): compared by value and hash.
    :param static_argnames: names of keyword arguments that are static.
    :param int max_signatures: programs kept (least recently used dropped).
    :returns: a :class:`Jitted` function; also usable as ``@jit(...)``.
    """
    if fn is None:
        return functools.partial(
            jit,
            static_argnums=static_argnums,
            static_argnames=static_argnames,
            max_signatures=max_signatures,
        )
    return Jitted(fn, static_argnums, static_argnames, max_signatures)


class Jitted:
    """``fn`` compiled per call signature (see :func:`jit`)."""

    def __init__(self, fn, static_argnums, static_argnames, max_signatures):
        functools.update_wrapper(self, fn)
        if isinstance(static_argnums, int):
            static_argnums = (static_argnums,)
        if isinstance(static_argnames, str):
            static_argnames = (static_argnames,)
        self.static_argnums = frozenset(static_argnums)
        self.static_argnames = frozenset(static_argnames)
        self.max_signatures = max_signatures
        self._entries = OrderedDict()  # signature -> _Entry, least recent first
        self._lock = threading.Lock()
        self._counts = Counter()
        self._inlined = set()  # signatures under MonteCarlo that do not trace

    def __get__(self, instance, owner=None):
        return self if instance is None else types.MethodType(self, instance)

    def __repr__(self):
        return f"jit({self.__wrapped__!r})"

    def __call__(self, *args, **kwargs):
        layers = compiling_layers()
        if layers is None:
            self._count("inlined")
            return self.__wrapped__(*args, **kwargs)
        backend = array_backend(get_backend())
        key, leaves, terms = self._signature(backend, args, kwargs, layers)
        if layers:
            # under MonteCarlo, code that does not trace (a sampler outside
            # funsor.ops) runs as written, as it did before MonteCarlo
            # compiled: eager raises any error of its own
            with self._lock:
                inlined = key in self._inlined
            if not inlined:
                try:
                    entry = self._entry(key, backend, args, kwargs, layers)
                except Exception:  # noqa: BLE001 - retried as written
                    with self._lock:
                        self._inlined.add(key)
                else:
                    return entry(leaves, terms)
            self._count("inlined")
            return self.__wrapped__(*args, **kwargs)
        entry = self._entry(key, backend, args, kwargs, layers)
        return entry(leaves, terms)

    def program(self, *args, **kwargs):
        """The :class:`~funsor_lowering.OpProgram` this function runs for
        the signature of ``args`` and ``kwargs`` (compiled if new)."""
        layers = compiling_layers() or ()
        backend = array_backend(get_backend())
        key = self._signature(backend, args, kwargs, layers)[0]
        return self._entry(key, backend, args, kwargs, layers).program

    def cache_info(self):
        """``{"signatures": programs cached, "compiled": calls that
        compiled, "cached": calls that ran a cached program, "inlined":
        calls under another interpretation, run as written}``."""
        with self._lock:
            return {"signatures": len(self._entries), **self._counts}

    def cache_clear(self):
        with self._lock:
            self._entries.clear()
            self._inlined.clear()
            self._counts.clear()

    def _count(self, what):
        with self._lock:
            self._counts[what] += 1

    def _marked(self, args, kwargs, backend):
        """``(args, kwargs)`` with the static arguments wrapped as
        :class:`Static`, after checking they are hashable non-arrays."""
        args = tuple(
            _static(value, f"static argument {i} of {self.__name__}", backend)
            if i in self.static_argnums
            else value
            for i, value in enumerate(args)
        )
        kwargs = {
            name: _static(
                value, f"static argument {name!r} of {self.__name__}", backend
            )
            if name in self.static_argnames
            else value
            for name, value in kwargs.items()
        }
        return args, kwargs

    def _label(self, path):
        """``argument 0['k']`` of ``fn``, for the path of a value in ``(args,
        kwargs)``."""
        where = path[1] if path[0] == 0 else repr(path[1])
        return f"argument {where}{path_suffix(path[2:])} of {self.__name__}"

    def _signature(self, backend, args, kwargs, layers):
        """``(key, leaves, terms)``: the call's signature (with the
        interpretation ``layers`` it compiles under), its arrays, and its
        funsor terms holding arrays (the result may hold them)."""
        terms = []
        structure, leaves = flatten(
            self._marked(args, kwargs, backend),
            backend.is_array,
            label=self._label,
            terms=terms,
        )
        leaf_types = tuple(
            (type(v), tuple(v.shape), str(v.dtype), _device(v)) for v in leaves
        )
        layer_keys = tuple(
            (type(layer), tuple(layer.sample_inputs.items())) for layer in layers
        )
        return (backend.name, structure, leaf_types, layer_keys), leaves, terms

    def _entry(self, key, backend, args, kwargs, layers):
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                self._counts["cached"] += 1
                return entry
        entry = self._compile(backend, args, kwargs, layers)  # outside the lock
        with self._lock:
            self._counts["compiled"] += 1
            self._entries[key] = entry
            while len(self._entries) > self.max_signatures:
                self._entries.popitem(last=False)
        return entry

    def _compile(self, backend, args, kwargs, layers):
        paths = []
        marked = self._marked(args, kwargs, backend)
        structure, leaves = flatten(
            marked, backend.is_array, paths=paths, label=self._label
        )
        names = _leaf_names(paths, self.__wrapped__)
        fn = self.__wrapped__
        results = {}

        def traced(**arrays):
            terms, inputs = [], [arrays[n] for n in names]
            args, kwargs = unflatten(structure, inputs, terms)
            with contextlib.ExitStack() as stack:
                for layer in reversed(layers):  # as the caller has them
                    stack.enter_context(layer)
                result = fn(*args, **kwargs)
            # the result's argument terms and arrays are given back as the
            # caller's own (adjoint's dict keys are terms it was given)
            results["structure"], leaves = flatten(
                result,
                _is_traced_or(backend),
                known={id(term): k for k, term in enumerate(terms)},
                known_leaves={id(array): k for k, array in enumerate(inputs)},
            )
            return leaves

        traced.__name__ = getattr(fn, "__name__", "traced")
        token = _TRACING.set(True)
        try:
            program = trace_function(
                traced, dict(zip(names, leaves)), allow_constants=True
            )
        finally:
            _TRACING.reset(token)
        return _Entry(program, names, results["structure"])


class _Entry:
    """One signature's program and how to call it and rebuild its result."""

    __slots__ = ("program", "names", "result_structure")

    def __init__(self, program, names, result_structure):
        self.program = program
        self.names = names
        self.result_structure = result_structure

    def __call__(self, leaves, terms):
        outputs = self.program(**dict(zip(self.names, leaves)))
        return unflatten(
            self.result_structure,
            outputs,
            references=terms,
            arguments=leaves,
            unmangle=True,
        )

    def __repr__(self):
        return f"_Entry({describe(self.result_structure)})"


def compiling_layers():
    """The interpretations a jitted call compiles under, innermost first:
    ``()`` under funsor's default ``eager``, ``MonteCarlo`` instances
    without an ``rng_key`` entered over it; ``None`` (the call runs as
    written) under any other interpretation or inside the trace of
    another jitted call."""
    if _TRACING.get():
        return None
    interpretation = funsor.interpreter.get_interpretation()
    if interpretation is eager:
        return ()
    layers = interpretation.subinterpretations
    base = eager.subinterpretations
    if layers[len(layers) - len(base) :] != base:
        return None
    layers = layers[: len(layers) - len(base)]
    if all(type(s) is MonteCarlo and s.rng_key is None for s in layers):
        return layers
    return None


def _static(value, label, backend):
    if backend.is_array(value):
        raise TypeError(
            f"{label} is an array: static arguments are part of the compiled "
            f"signature, compared by value; pass arrays as non-static arguments"
        )
    try:
        hash(value)
    except TypeError:
        raise TypeError(
            f"{label} is of unhashable type {type(value).__name__}: static "
            f"arguments are part of the compiled signature, so they must be "
            f"hashable (pass arrays as non-static arguments)"
        ) from None
    return Static(value)


def _device(array):
    try:
        device = array.device
    except Exception:  # noqa: BLE001 - jax tracers have none
        return None
    return None if callable(device) else str(device)


def _is_traced_or(backend):
    def is_array(value):
        return isinstance(value, SymbolicArray) or backend.is_array(value)

    return is_array


def _leaf_names(paths, fn):
    """Program input names from the leaves' paths: the parameter's name,
    then keys, indices and funsor fields (``factors_0_data``)."""
    try:
        params = [
            p.name
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        params = []
    names, seen = [], set()
    for path in paths:
        # path: (0 for args / 1 for kwargs, position or name, ...)
        head = path[1]
        if path[0] == 0:
            head = params[head] if head < len(params) else f"arg{head}"
        parts = [str(head), *map(str, path[2:])]
        name = re.sub(r"\W", "_", "_".join(parts)) or "x"
        if not name.isidentifier():
            name = "x_" + name
        unique, n = name, 1
        while unique in seen:
            unique, n = f"{name}_{n}", n + 1
        seen.add(unique)
        names.append(unique)
    return names
