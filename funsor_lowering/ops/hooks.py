"""How the package hooks into funsor: each hook is installed once (by
:mod:`funsor_lowering.funsor_hooks`, which lists them all, or by a backend
for its own) and picks its behaviour from a :class:`contextvars.ContextVar`.
:func:`replaced` selects replacements for the current context only, so
threads (and tasks) never see each other's, and an exception leaves nothing
behind. Outside any block every hook calls funsor's original.

Installing checks that each original is the function expected (by module
and qualified name) and fails with an ``ImportError`` naming it otherwise
(another funsor version than 0.4.8, or another library's patch).

The package's shape rules replace funsor's ``find_domain`` where funsor's
term constructors look it up (:func:`package_shape_rules`): lowering,
compiling blocks and tracing select them; other funsor code keeps funsor's.

Example::

    >>> import funsor_lowering  # installs funsor_lowering.funsor_hooks
    >>> from funsor.domains import Reals
    >>> from funsor.terms import Funsor, Variable
    >>> from funsor_lowering.ops import hooks
    >>> def refuse(self):
    ...     raise TypeError("no truth value while compiling")
    >>> total = Variable("x", Reals[2]).sum()
    >>> with hooks.replaced({"Funsor.__bool__": refuse}):  # this context only
    ...     bool(total)
    Traceback (most recent call last):
    ...
    TypeError: no truth value while compiling
    >>> Funsor.__bool__ is hooks.installed("Funsor.__bool__")  # never removed
    True
"""

import contextlib
import contextvars
import functools
import inspect
import types

from . import shapes
from .shapes import SHAPE_RULES

# key -> replacement in this context (a new dict each time one is selected)
_REPLACEMENTS = contextvars.ContextVar("funsor_lowering.ops.hooks", default=None)
_ORIGINALS = {}  # key -> funsor's original (None: the attribute was absent)
_INSTALLED = {}  # key -> the hook installed in its place


@contextlib.contextmanager
def replaced(replacements):
    """In this context, the hooks named by ``replacements`` (key -> function
    taking the original's arguments) run the given functions; inner blocks
    override outer ones."""
    unknown = set(replacements) - set(_INSTALLED)
    if unknown:
        raise KeyError(f"no hook named {sorted(unknown)}; hooks: {sorted(_INSTALLED)}")
    token = _REPLACEMENTS.set({**(_REPLACEMENTS.get() or {}), **replacements})
    try:
        yield
    finally:
        _REPLACEMENTS.reset(token)


def original(key):
    """funsor's original for hook ``key``."""
    return _ORIGINALS[key]


def installed(key):
    """The hook installed for ``key``."""
    return _INSTALLED[key]


def _hook(key, fallback):
    """A function running this context's replacement for ``key``, else
    ``fallback``."""

    @functools.wraps(fallback)
    def hook(*args, **kwargs):
        replacements = _REPLACEMENTS.get()
        if replacements is not None:
            replacement = replacements.get(key)
            if replacement is not None:
                return replacement(*args, **kwargs)
        return fallback(*args, **kwargs)

    return hook


def _subclass_tree(cls):
    seen, stack = [], [cls]
    while stack:
        c = stack.pop()
        if c not in seen:
            seen.append(c)
            stack.extend(type.__subclasses__(c))
    return seen


def _check(key, value, module, qualname):
    found = (getattr(value, "__module__", None), getattr(value, "__qualname__", None))
    if found != (module, qualname):
        raise ImportError(
            f"funsor_lowering hooks {key}: expected funsor's {module}.{qualname}, "
            f"found {found[0]}.{found[1]} (another funsor version than 0.4.8, or "
            f"another library's patch)"
        )


def hook_method(key, owner, name, module, qualname):
    """Hook ``owner.name`` (a function in ``owner.__dict__``) in ``owner`` and
    every subclass holding the same function (funsor's typed subclasses copy
    their base's methods)."""
    original_fn = owner.__dict__[name]
    _check(key, original_fn, module, qualname)
    hook = _hook(key, original_fn)
    for cls in _subclass_tree(owner):
        if cls.__dict__.get(name) is original_fn:
            setattr(cls, name, hook)
    _ORIGINALS[key], _INSTALLED[key] = original_fn, hook


def hook_attribute(key, owner, name, module, qualname):
    """Hook a module function or an instance's attribute ``owner.name``."""
    original_fn = getattr(owner, name)
    _check(key, original_fn, module, qualname)
    hook = _hook(key, original_fn)
    setattr(owner, name, hook)
    _ORIGINALS[key], _INSTALLED[key] = original_fn, hook


def hook_function(key, function, module, qualname):
    """Hook the function object ``function`` itself (a public entry point
    users import by name: ``from funsor.recipes import ...`` binds it
    before any hook is installed). Its code becomes a call of the hook,
    which falls back to a copy of the original; its signature is kept."""
    _check(key, function, module, qualname)
    original_fn = types.FunctionType(
        function.__code__,
        function.__globals__,
        function.__name__,
        function.__defaults__,
        function.__closure__,
    )
    original_fn.__kwdefaults__ = function.__kwdefaults__
    original_fn.__qualname__, original_fn.__module__ = qualname, module
    original_fn.__doc__ = function.__doc__
    hook = _hook(key, original_fn)
    signature = inspect.signature(function)
    function.__code__ = _call_hook.__code__
    function.__defaults__ = None
    function.__kwdefaults__ = {"_funsor_lowering_hook": hook}
    function.__signature__ = signature
    _ORIGINALS[key], _INSTALLED[key] = original_fn, function


def shape_rule_replacements():
    """The replacements selecting the package's shape rules
    (:func:`~funsor_lowering.ops.shapes.find_domain`) over funsor's, and the
    cons-hash keys that keep the terms they build apart
    (:func:`_hash_key_with_package_rules`)."""
    return {
        # where funsor's Unary, Binary and Finitary find their domains
        "terms.find_domain": shapes.find_domain,
        "reflect.make_hash_key": _hash_key_with_package_rules,
    }


_RULED_OPS = tuple(SHAPE_RULES)


def _hash_key_with_package_rules(cls, *args):
    """funsor's cons-hash key, marked for a term applying an op whose domain
    the package's shape rules infer: funsor shares one term per key, and
    the term keeps the domain of the context that built it first, so the
    same expression built here and outside the package's work must be two
    terms (each with its context's domain)."""
    key = original("reflect.make_hash_key")(cls, *args)
    if args and isinstance(args[0], _RULED_OPS):
        return key + (_hash_key_with_package_rules,)
    return key


def package_shape_rules():
    """A context in which funsor infers domains with the package's shape
    rules (lowering, compiling blocks and tracing run in one); elsewhere
    funsor keeps its own, so that importing the package changes no domain
    funsor code infers."""
    return replaced(shape_rule_replacements())


def with_package_shape_rules(fn):
    """Decorate ``fn`` to run in :func:`package_shape_rules`."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        with package_shape_rules():
            return fn(*args, **kwargs)

    return run


def _call_hook(*args, _funsor_lowering_hook, **kwargs):
    # the code hook_function gives a hooked function
    return _funsor_lowering_hook(*args, **kwargs)


def hook_pattern(key, interpretation, function, module, qualname):
    """Hook every signature under which ``interpretation`` registers
    ``function`` (funsor code dispatching to eager patterns directly)."""
    registry = interpretation._subinterpretations[0].registry
    hook_registered(key, registry, function, module, qualname)


def hook_registered(key, keyed_registry, function, module, qualname):
    """Hook every signature under which funsor's ``KeyedRegistry``
    registers ``function``."""
    _check(key, function, module, qualname)
    hook = _hook(key, function)
    for dispatcher in keyed_registry.registry.values():
        for signature, fn in list(dispatcher.funcs.items()):
            if fn is function:
                dispatcher.add(signature, hook)
    _ORIGINALS[key], _INSTALLED[key] = function, hook


class _AbsentAttribute:
    """A hook for an attribute funsor does not define on ``owner``: behaves
    as absent (``AttributeError``, or ``TypeError`` for a conversion) unless
    this context replaces it: by a method, or for a ``data``-like attribute
    (``is_property``) by a getter. A subclass defining it keeps its own."""

    def __init__(self, key, name, absent, is_property):
        self.key, self.name, self.absent = key, name, absent
        self.is_property = is_property

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        replacement = (_REPLACEMENTS.get() or {}).get(self.key)
        if replacement is None:
            return self.absent(instance, self.name)
        if self.is_property:
            return replacement(instance)
        return replacement.__get__(instance, owner)


def no_attribute(instance, name):
    kind = type(instance).__name__
    raise AttributeError(f"{kind!r} object has no attribute {name!r}")


def no_conversion(instance, name):
    target = {"__float__": "float", "__int__": "int"}[name]

    def convert():
        raise TypeError(
            f"{target}() argument must be a string or a real number, not "
            f"{type(instance).__name__!r}"
        )

    return convert


def hook_absent(key, owner, name, absent, is_property=False):
    """Hook an attribute ``owner`` does not define (see :class:`_AbsentAttribute`)."""
    if name in owner.__dict__:
        raise ImportError(f"funsor_lowering hooks {key}: funsor defines it already")
    setattr(owner, name, _AbsentAttribute(key, name, absent, is_property))
    _ORIGINALS[key], _INSTALLED[key] = None, owner.__dict__[name]


def install_jax_hooks():
    """Hook ``jax.random.split`` (funsor's ``MonteCarlo`` splits keys with it,
    outside ``funsor.ops``); installed by the jax adapter, once."""
    import jax.random

    if "jax.random.split" not in _INSTALLED:
        hook_attribute(
            "jax.random.split", jax.random, "split", "jax._src.random.core", "split"
        )


def install_minipyro_hooks():
    """Hook ``funsor.minipyro.apply_stack`` (it converts observed values to
    funsors only if they are ``torch.Tensor``s); installed by the torch
    adapter, once."""
    import funsor.minipyro

    if "minipyro.apply_stack" not in _INSTALLED:
        hook_attribute(
            "minipyro.apply_stack",
            funsor.minipyro,
            "apply_stack",
            "funsor.minipyro",
            "apply_stack",
        )
