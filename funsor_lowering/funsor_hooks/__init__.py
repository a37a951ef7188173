"""Every hook funsor_lowering has into funsor, in one place (but for the
two that a backend installs for itself when it is loaded:
``jax.random.split`` and ``funsor.minipyro.apply_stack``).

Compiling blocks and tracing need funsor to behave differently while they
run (record op calls, refuse ``float()`` of symbolic terms, compute
Gaussians with ``funsor.ops`` only ...). Nothing is patched or unpatched when
a block opens or closes: each hook below is installed once, when this module
is imported (the package's first import does), and picks its behaviour from
the current context (:mod:`funsor_lowering.ops.hooks`, the mechanism, which
the layers below import: :func:`~funsor_lowering.ops.hooks.replaced`,
:func:`~funsor_lowering.ops.hooks.original`).

funsor 0.4.8 keeps its interpretation stack in one process-wide list, so a
``with`` block in one thread would change how every other thread's funsor
code is interpreted; :class:`ContextStack` makes it context-local.
"""

import contextvars

import funsor.adjoint
import funsor.cnf
import funsor.distribution
import funsor.interpreter
import funsor.optimizer
import funsor.recipes
import funsor.sum_product
import funsor.terms
from funsor.adjoint import AdjointTape
from funsor.delta import Delta
from funsor.distribution import Distribution
from funsor.gaussian import Gaussian, GaussianMeta
from funsor.interpretations import eager, reflect
from funsor.ops.op import Op
from funsor.tensor import Tensor
from funsor.terms import Binary, Funsor

from ..ops.hooks import (  # noqa: F401  (the mechanism, for callers of this module)
    hook_absent,
    hook_attribute,
    hook_function,
    hook_method,
    hook_pattern,
    hook_registered,
    installed,
    no_attribute,
    no_conversion,
    original,
    package_shape_rules,
    replaced,
    shape_rule_replacements,
    with_package_shape_rules,
)


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
        hook_absent(f"Funsor.{name}", Funsor, name, no_conversion)
    hook_absent("Funsor.data", Funsor, "data", no_attribute, is_property=True)
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
    hook_attribute(
        "terms.find_domain",
        funsor.terms,
        "find_domain",
        "funsor.domains",
        "find_domain",
    )
    add = _gaussian_add_pattern()
    hook_pattern(
        "eager Gaussian + Gaussian", eager, add, "funsor.gaussian", add.__name__
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
