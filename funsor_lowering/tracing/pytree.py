"""Split a call's arguments (or a function's result) into a hashable
*structure* and a list of array *leaves*, and put them back together.

Tuples, lists and dicts are walked; so are funsor terms holding arrays (a
``Tensor``'s data, a ``Gaussian``'s white vector and square root, terms over
them): a term is rebuilt with funsor's ``reflect``, so the rebuilt term has
the same type, ``.inputs``, ``.output`` and layout as the original. Every
other value (numbers, strings, ops, domains, terms without arrays) is part
of the structure, so it must be hashable.

Example::

    >>> import numpy as np
    >>> from funsor.tensor import Tensor
    >>> from funsor.domains import Bint
    >>> t = Tensor(np.zeros((2, 3)), {"i": Bint[2]})
    >>> structure, leaves = flatten((t, 1.5), lambda x: isinstance(x, np.ndarray))
    >>> [leaf.shape for leaf in leaves]
    [(2, 3)]
    >>> rebuilt, number = unflatten(structure, [np.ones((2, 3))])
    >>> rebuilt.inputs == t.inputs, rebuilt.output == t.output, number
    (True, True, 1.5)
"""

from funsor.interpretations import reflect
from funsor.terms import Funsor

from ..ir.structure import path_suffix

ARRAY = ("array",)


class Static:
    """A value kept by the structure (compared by equality and hash)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        return type(other) is Static and _same(self.value, other.value)

    def __hash__(self):
        return hash((type(self.value), self.value))

    def __repr__(self):
        return f"Static({self.value!r})"


def _same(a, b):
    # 1 == 1.0 == True, but a call with 1.0 may compute a float where 1 an
    # int; funsor terms are cons-hashed (and their == builds a term)
    if a is b:
        return True
    return type(a) is type(b) and not isinstance(a, Funsor) and a == b


def flatten(
    value, is_array, paths=None, label=None, terms=None, known=None, known_leaves=None
):
    """``(structure, leaves)``: ``leaves`` are the arrays (``is_array``) of
    ``value`` in order; ``structure`` is hashable and equal for values that
    differ in their arrays only. Raises ``TypeError`` naming the path of an
    unhashable value that is neither an array nor a container (by
    ``label(path)``).

    :param list paths: receives each leaf's path (keys, indices, funsor
        field names).
    :param list terms: receives the funsor terms holding arrays, in order.
    :param dict known: ``id(term) -> k`` for terms that are given back as
        ``references[k]`` by :func:`unflatten` (a function's result that
        holds its argument terms, e.g. as dict keys).
    :param dict known_leaves: ``id(array) -> k`` for arrays given back as
        ``arguments[k]`` by :func:`unflatten` (a result's arrays that are
        the function's own arguments).
    """
    flattener = _Flattener(is_array, paths, label or _default_label, terms, known)
    flattener.known_leaves = known_leaves or {}
    structure = flattener(value, ())
    return structure, flattener.leaves


def _default_label(path):
    return f"value{path_suffix(path)}"


class _Flattener:
    def __init__(self, is_array, paths, label, terms, known):
        self.is_array = is_array
        self.leaves = []
        self.paths = paths
        self.label = label
        self.terms = [] if terms is None else terms
        self.term_index = {}  # id(term) -> its position in self.terms
        self.leaf_index = {}  # id(array) -> its position in self.leaves
        self.known = known or {}

    def __call__(self, value, path):
        if type(value) is Static:  # marked static by the caller
            return value
        if id(value) in self.known_leaves:
            return ("argument", self.known_leaves[id(value)])
        if self.is_array(value):
            if id(value) in self.leaf_index:
                # the same array again: one input, as funsor's cons hashing
                # makes terms over one array the same term
                return ("leaf", self.leaf_index[id(value)])
            self.leaf_index[id(value)] = len(self.leaves)
            self.leaves.append(value)
            if self.paths is not None:
                self.paths.append(path)
            return ARRAY
        if id(value) in self.known:
            return ("reference", self.known[id(value)])
        if isinstance(value, (tuple, list)) and not hasattr(value, "_fields"):
            items = tuple(self(item, path + (i,)) for i, item in enumerate(value))
            return (type(value).__name__, items)
        if isinstance(value, dict):
            return self.dict(value, path)
        if isinstance(value, set):  # a fresh set in each call's result
            self.check_hashable(tuple(value), path)
            return ("set", Static(frozenset(value)))
        if id(value) in self.term_index:  # the same term again: shared
            return ("shared", self.term_index[id(value)])
        if isinstance(value, Funsor) and _holds_array(value, self.is_array):
            self.term_index[id(value)] = len(self.terms)
            self.terms.append(value)
            children = tuple(
                self(item, path + (field,))
                for field, item in zip(value._ast_fields, value._ast_values)
            )
            return ("funsor", type(value), children)
        self.check_hashable(value, path)
        return Static(value)

    def dict(self, value, path):
        keys = [self(key, path) for key in value]
        values = tuple(self(value[key], path + (key,)) for key in value)
        factory = getattr(value, "default_factory", None)
        self.check_hashable(factory, path)
        return ("dict", type(value), factory, tuple(keys), values)

    def check_hashable(self, value, path):
        try:
            hash(value)
        except TypeError:
            raise TypeError(
                f"{self.label(path)} of type {type(value).__name__} is neither "
                f"an array nor hashable: a jitted function's non-array "
                f"arguments are static (part of the compiled signature), so "
                f"they must be hashable"
            ) from None


def _holds_array(term, is_array):
    stack = [term]
    while stack:
        value = stack.pop()
        if is_array(value):
            return True
        if isinstance(value, Funsor):
            stack.extend(value._ast_values)
        elif isinstance(value, (tuple, list)):
            stack.extend(value)
        elif isinstance(value, dict):
            stack.extend(value.values())
    return False


def unflatten(
    structure, leaves, terms=None, references=(), arguments=(), unmangle=False
):
    """The value :func:`flatten` split into ``structure``, with ``leaves``
    (an iterable, consumed in order) in place of its arrays, and
    ``references[k]`` / ``arguments[k]`` in place of the ``k``-th known
    term / array. A list ``terms`` receives the rebuilt funsor terms in the
    order :func:`flatten` lists them. With ``unmangle``, terms binding
    variables are rebuilt as the caller would have built them (a function's
    result: see :func:`_as_built_by_caller`)."""
    unflattener = _Unflattener(iter(leaves), terms, references, arguments)
    unflattener.unmangle = unmangle
    return unflattener(structure)


class _Unflattener:
    def __init__(self, leaves, terms, references, arguments):
        self.leaves = leaves
        self.terms = [] if terms is None else terms
        self.references = references
        self.arguments = arguments
        self.seen_leaves = []

    def __call__(self, structure):
        if structure is ARRAY:
            leaf = next(self.leaves)
            self.seen_leaves.append(leaf)
            return leaf
        if type(structure) is Static:
            return structure.value
        kind = structure[0]
        if kind == "reference":
            return self.references[structure[1]]
        if kind == "argument":
            return self.arguments[structure[1]]
        if kind == "shared":
            return self.terms[structure[1]]
        if kind == "leaf":
            return self.seen_leaves[structure[1]]
        if kind == "funsor":
            _, cls, children = structure
            slot = len(self.terms)  # in flatten's (pre-)order
            self.terms.append(None)
            term = reflect.interpret(cls, *map(self, children))
            if self.unmangle:
                term = _as_built_by_caller(term)
            self.terms[slot] = term
            return term
        if kind == "dict":
            _, cls, factory, keys, values = structure
            # keys, then values: the order flatten numbered their terms in
            items = list(zip([self(k) for k in keys], [self(v) for v in values]))
            if factory is not None:
                return cls(factory, items)
            return dict(items) if cls is dict else cls(items)
        if kind == "set":
            return set(structure[1].value)
        kind, items = structure
        items = [self(item) for item in items]
        return tuple(items) if kind == "tuple" else items


def _as_built_by_caller(term):
    """``term`` with its bound variables named as written (``j``, not
    ``j__BOUND_37``) and rebuilt: funsor renames bound variables afresh
    each time it builds a term from new parts, and cons-hashes the term
    built from the parts as written; so a term that the caller built from
    the same parts (e.g. ``x(j=k)``, a key of ``adjoint``'s result) comes
    back as the caller's own term."""
    renames = {name: name.split("__BOUND")[0] for name in term.bound}
    renames = {k: v for k, v in renames.items() if k != v}
    if not renames:
        return term
    return reflect.interpret(type(term), *term._alpha_convert(renames))


def describe(structure):
    """A short readable form of ``structure`` (for error messages)."""
    if structure is ARRAY:
        return "array"
    if type(structure) is Static:
        return repr(structure.value)
    kind = structure[0]
    if kind == "funsor":
        return structure[1].__name__ + "(...)"
    if kind == "dict":
        return "{" + ", ".join(map(describe, structure[3])) + "}"
    if kind in ("reference", "shared", "argument", "leaf"):
        return f"{kind} term {structure[1]}"
    if kind == "set":
        return repr(set(structure[1].value))
    return kind + "(" + ", ".join(map(describe, structure[1])) + ")"
