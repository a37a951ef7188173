"""jit's flattening of arguments and results (tracing/pytree.py): round
trips, hashable structures, one leaf per array, shared terms, dict keys
before values, and the caller's own terms and arrays given back."""

from collections import OrderedDict, defaultdict

import numpy as np
import pytest
from funsor import ops
from funsor.domains import Bint, Reals
from funsor.interpretations import reflect
from funsor.tensor import Tensor
from funsor.terms import Variable
from funsor.testing import random_gaussian

from funsor_lowering.tracing.pytree import flatten, unflatten


def is_array(value):
    return isinstance(value, np.ndarray)


def tensor(*shape, **inputs):
    inputs = OrderedDict((k, Bint[v]) for k, v in inputs.items())
    sizes = tuple(d.size for d in inputs.values())
    return Tensor(np.random.randn(*sizes, *shape), inputs)


def test_round_trip_of_nestings_keeps_kinds_and_order():
    t = tensor(3, i=2)
    value = {
        "b": [t, (np.zeros(2), 1.5, "name")],
        "a": defaultdict(list, x={np.ones(1).tobytes(): ops.add}),
        "s": {1, 2},
    }
    structure, leaves = flatten(value, is_array)
    hash(structure)
    assert [leaf.shape for leaf in leaves] == [(2, 3), (2,)]
    new = [leaf + 1 for leaf in leaves]
    rebuilt = unflatten(structure, new)
    assert list(rebuilt) == ["b", "a", "s"]
    assert rebuilt["b"][0].inputs == t.inputs and rebuilt["b"][0].data is new[0]
    assert rebuilt["b"][1][0] is new[1] and rebuilt["b"][1][1:] == (1.5, "name")
    assert (
        isinstance(rebuilt["a"], defaultdict) and rebuilt["a"].default_factory is list
    )
    assert rebuilt["s"] == {1, 2}


def test_structures_differ_by_non_array_parts_only():
    first, _ = flatten((tensor(3, i=2), 2.0), is_array)
    second, _ = flatten((tensor(3, i=2), 2.0), is_array)
    other_inputs, _ = flatten((tensor(3, j=2), 2.0), is_array)
    other_number, _ = flatten((tensor(3, i=2), 3.0), is_array)
    assert first == second and hash(first) == hash(second)
    assert first != other_inputs and first != other_number


def test_an_array_held_twice_is_one_leaf():
    data = np.random.randn(2, 2)
    x = Tensor(data, OrderedDict(i=Bint[2]))
    structure, leaves = flatten((x, data, [data]), is_array)
    assert len(leaves) == 1
    new = np.zeros((2, 2))
    rebuilt = unflatten(structure, [new])
    assert rebuilt[0].data is new and rebuilt[1] is new and rebuilt[2][0] is new
    # two equal but distinct arrays stay two leaves (another signature)
    distinct, leaves = flatten((x, data.copy()), is_array)
    assert len(leaves) == 2 and distinct != structure


def test_a_term_held_twice_is_rebuilt_once():
    g = random_gaussian(OrderedDict(i=Bint[2], x=Reals[2]))
    structure, leaves = flatten({"a": g, "b": [g]}, is_array)
    terms = []
    rebuilt = unflatten(structure, leaves, terms)
    assert rebuilt["a"] is rebuilt["b"][0]
    assert rebuilt["a"].inputs == g.inputs


def test_dict_keys_are_rebuilt_before_values():
    # flatten numbers the terms of keys first: results keyed by terms (an
    # adjoint's) must get their own keys back, not their values'
    k, v = tensor(2, i=2), tensor(3, i=2)
    structure, leaves = flatten({k: v}, is_array)
    terms = []
    ((key, value),) = unflatten(structure, leaves, terms).items()
    assert key.output == k.output and value.output == v.output
    assert terms == [key, value]


def test_references_give_back_the_callers_terms_and_arrays():
    x = tensor(2, i=2)
    structure, leaves = flatten(
        {x: x.data, "other": np.ones(1)},
        is_array,
        known={id(x): 0},
        known_leaves={id(x.data): 0},
    )
    assert [leaf.shape for leaf in leaves] == [(1,)]
    rebuilt = unflatten(structure, leaves, references=[x], arguments=[x.data])
    assert rebuilt[x] is x.data


def test_results_binding_variables_come_back_as_the_callers_terms():
    x = tensor(i=2, j=2)
    k = Variable("k", Bint[2])
    with reflect:
        xjk = x(j=k)  # funsor renames the bound j: j__BOUND_n
    structure, leaves = flatten([xjk], is_array)
    (rebuilt,) = unflatten(structure, leaves, arguments=(), unmangle=True)
    assert rebuilt is xjk


def test_unhashable_static_values_are_named():
    with pytest.raises(TypeError, match=r"value\[1\]\['k'\] of type bytearray"):
        flatten((np.zeros(1), {"k": bytearray(b"x")}), is_array)
