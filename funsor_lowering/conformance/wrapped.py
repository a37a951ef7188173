"""The funsor functions under test that the conformance plugin compiles.

Each entry names a module attribute (a function, or a class such as
``MarkovProduct`` whose call evaluates a product) or a method of a funsor
class. The plugin replaces it with ``jit(original)`` before funsor's test
files import it, so the tests, and funsor's own code calling it, run the
compiled program wherever funsor's default eager interpretation is active.
"""

import importlib

WRAPPED = {
    # the sum-product family
    "funsor.sum_product": (
        "sum_product",
        "partial_sum_product",
        "modified_partial_sum_product",
        "dynamic_partial_sum_product",
        "sequential_sum_product",
        "mixed_sequential_sum_product",
        "sarkka_bilmes_product",
        "MarkovProduct",
    ),
    # the einsum family
    "funsor.einsum": (
        "einsum",
        "naive_einsum",
        "naive_plated_einsum",
        "naive_contract_einsum",
    ),
    # Gaussian and distribution operations
    "funsor.gaussian": ("Gaussian.eager_reduce", "Gaussian.eager_subs"),
    "funsor.distribution": ("Distribution.eager_reduce",),
    # forward-backward, adjoint, samplers and sampling recipes
    "funsor.adjoint": ("forward_backward", "adjoint"),
    "funsor.terms": ("Funsor.sample",),
    "funsor.recipes": (
        "forward_filter_backward_rsample",
        "forward_filter_backward_precondition",
    ),
}


def targets():
    """``(owner, attribute name, dotted name)`` of every wrapped entry."""
    for module_name, names in WRAPPED.items():
        module = importlib.import_module(module_name)
        for name in names:
            owner, _, attr = name.rpartition(".")
            target = getattr(module, owner) if owner else module
            yield target, attr, f"{module_name}.{name}"
