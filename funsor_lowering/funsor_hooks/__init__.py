"""Every hook funsor_lowering has into funsor, in one place.

Compiling blocks and tracing need funsor to behave differently while they
run (record op calls, refuse ``float()`` of symbolic terms, compute
Gaussians with ``funsor.ops`` only ...). Nothing is patched or unpatched when
a block opens or closes: each hook below is installed once, when this module
is imported, and picks its behaviour from a :class:`contextvars.ContextVar`.
:func:`replaced` selects replacements for the current context only, so
threads (and tasks) never see each other's, and an exception leaves nothing
behind. Outside any block every hook calls funsor's original.

Installing checks that each original is the funsor function this module
expects (by module and qualified name) and fails with an ``ImportError``
naming it otherwise (another funsor version, or another library's patch).

funsor 0.4.8 keeps its interpretation stack in one process-wide list, so a
``with`` block in one thread would change how every other thread's funsor
code is interpreted; :class:`ContextStack` makes it context-local.

Example::

    >>> from funsor.domains import Reals
    >>> from funsor.terms import Funsor, Variable
    >>> from funsor_lowering import funsor_hooks as hooks
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

import funsor.adjoint
import funsor.cnf
import funsor.distribution
import funsor.interpreter
import funsor.optimizer
import funsor.recipes
import funsor.sum_product
from funsor.adjoint import AdjointTape
from funsor.delta import Delta
from funsor.distribution import Distribution
from funsor.domains import find_domain
from funsor.gaussian import Gaussian, GaussianMeta
from funsor.interpretations import eager, reflect
from funsor.ops.op import Op
from funsor.tensor import Tensor
from funsor.terms import Binary, Funsor

from ..ops.shapes import SHAPE_RULES

# key -> replacement in this context (a new dict each time one is selected)
_REPLACEMENTS = contextvars.ContextVar("funsor_lowering.funsor_hooks", default=None)
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


def hook_shape_rule(op_type):
    """Hook ``find_domain`` for ``op_type`` (and subclasses without a rule of
    their own): funsor's rule, unless this context selects the package's
    (:func:`package_shape_rules`)."""
    key = f"find_domain.{op_type.__name__}"
    original_fn = find_domain.dispatch(op_type)
    hook = _hook(key, original_fn)
    find_domain.register(op_type)(hook)
    _ORIGINALS[key], _INSTALLED[key] = original_fn, hook


def shape_rule_replacements():
    """The replacements selecting the package's shape rules
    (:data:`~funsor_lowering.ops.shapes.SHAPE_RULES`) over funsor's, and the
    cons-hash keys that keep the terms they build apart
    (:func:`_hash_key_with_package_rules`)."""
    replacements = {
        f"find_domain.{t.__name__}": rule for t, rule in SHAPE_RULES.items()
    }
    replacements["reflect.make_hash_key"] = _hash_key_with_package_rules
    return replacements


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


def _no_attribute(instance, name):
    kind = type(instance).__name__
    raise AttributeError(f"{kind!r} object has no attribute {name!r}")


def _no_conversion(instance, name):
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


class ContextStack:
    """funsor's interpretation stack, local to each context (thread, task):
    the list operations funsor's interpreter uses, on a tuple held by a
    :class:`~contextvars.ContextVar`. A new thread starts from the stack
    funsor had when this was installed."""

    def __init__(self, items):
        self._base = tuple(items)
        self._var = contextvars.ContextVar("funsor interpretation stack")
        self._var.set(self._base)

    def _items(self):
        return self._var.get(self._base)

    def __getitem__(self, index):
        return self._items()[index]

    def __len__(self):
        return len(self._items())

    def __iter__(self):
        return iter(self._items())

    def append(self, interpretation):
        self._var.set(self._items() + (interpretation,))

    def pop(self):
        items = self._items()
        self._var.set(items[:-1])
        return items[-1]

    def __repr__(self):
        return f"ContextStack({list(self._items())!r})"


# Methods hooked, by owner: (owner, funsor module, method names); the key
# of each is "Owner.name".
_METHODS = (
    (Op, "funsor.ops.op", ("__call__",)),
    (Funsor, "funsor.terms", ("__bool__", "item", "sample", "reduce")),
    (GaussianMeta, "funsor.gaussian", ("__call__",)),
    (Gaussian, "funsor.gaussian", ("eager_subs", "eager_reduce", "_sample")),
    (Tensor, "funsor.tensor", ("_sample", "eager_subs")),
    (Delta, "funsor.delta", ("eager_subs",)),
    (Distribution, "funsor.distribution", ("_sample",)),
    (AdjointTape, "funsor.adjoint", ("__enter__",)),
)
# Module functions and instances' attributes hooked where funsor looks them
# up: (key, owner, attribute, funsor's module and qualified name).
_ATTRIBUTES = (
    ("reflect.interpret", reflect, "interpret", "funsor.terms", "reflect"),
    (
        "reflect.make_hash_key",
        reflect,
        "make_hash_key",
        "funsor.interpretations",
        "Interpretation.make_hash_key",
    ),
    (
        "optimize_base.interpret",
        funsor.optimizer.optimize_base,
        "interpret",
        "funsor.interpretations",
        "DispatchedInterpretation.interpret",
    ),
    (
        "adjoint.stack_reinterpret",
        funsor.adjoint,
        "stack_reinterpret",
        "funsor.interpreter",
        "stack_reinterpret",
    ),
    (
        "cnf._eager_contract_tensors",
        funsor.cnf,
        "_eager_contract_tensors",
        "funsor.cnf",
        "_eager_contract_tensors",
    ),
    (
        "sum_product._partition",
        funsor.sum_product,
        "_partition",
        "funsor.sum_product",
        "_partition",
    ),
)
# Function objects hooked themselves (bound by name elsewhere, or registered
# as patterns after this module is imported): (key, function, funsor's
# module and qualified name).
_FUNCTIONS = (
    (
        "Distribution.eager_log_prob",
        Distribution.__dict__["eager_log_prob"].__func__,
        "funsor.distribution",
        "Distribution.eager_log_prob",
    ),
    (
        "recipes.forward_filter_backward_rsample",
        funsor.recipes.forward_filter_backward_rsample,
        "funsor.recipes",
        "forward_filter_backward_rsample",
    ),
    # each backend's distributions module registers these when the backend
    # is first set, maybe after this module is imported
    *(
        (f"distribution.{name}", getattr(funsor.distribution, name))
        + ("funsor.distribution", name)
        for name in ("eager_normal", "eager_mvn")
    ),
)


def _install():
    if not isinstance(funsor.interpreter._STACK, ContextStack):
        funsor.interpreter._STACK = ContextStack(funsor.interpreter._STACK)
    for owner, module, names in _METHODS:
        for name in names:
            key = f"{owner.__name__}.{name}"
            hook_method(key, owner, name, module, key)
    for name in ("__float__", "__int__"):
        hook_absent(f"Funsor.{name}", Funsor, name, _no_conversion)
    hook_absent("Funsor.data", Funsor, "data", _no_attribute, is_property=True)
    for key, owner, name, module, qualname in _ATTRIBUTES:
        hook_attribute(key, owner, name, module, qualname)
    for key, function, module, qualname in _FUNCTIONS:
        hook_function(key, function, module, qualname)
    hook_registered(
        "adjoint_contract_generic",
        funsor.adjoint.adjoint_ops,
        funsor.adjoint.adjoint_contract_generic,
        "funsor.adjoint",
        "adjoint_contract_generic",
    )
    for op_type in SHAPE_RULES:
        hook_shape_rule(op_type)
    add = _gaussian_add_pattern()
    hook_pattern(
        "eager Gaussian + Gaussian", eager, add, "funsor.gaussian", add.__name__
    )


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


def _gaussian_add_pattern():
    """funsor's eager pattern for ``Binary(AddOp, Gaussian, Gaussian)``."""
    from funsor import ops

    dispatcher = eager._subinterpretations[0].registry[Binary]
    matches = [
        fn
        for signature, fn in dispatcher.funcs.items()
        if len(signature) == 3
        and getattr(signature[0], "__args__", None) == (ops.AddOp,)
        and signature[1] is Gaussian
        and signature[2] is Gaussian
    ]
    if len(matches) != 1:
        raise ImportError("funsor_lowering hooks: no single eager Gaussian + Gaussian")
    return matches[0]


_install()
