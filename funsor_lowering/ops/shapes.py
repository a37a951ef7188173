"""Shape rules (``funsor.domains.find_domain``) for ops our programs use,
where funsor 0.4.8 lacks or mis-infers them:

- reductions read ``dim`` while the ops take ``axis`` (so ``ops.sum(x, 0)``
  was inferred to reduce every axis);
- ``getitem`` ignored the shape of its index;
- ``permute``, ``transpose``, ``expand``, ``argmax``, ``argmin``,
  ``new_zeros`` and ``new_full`` fell back to the pointwise rule and kept
  the input shape.

:data:`SHAPE_RULES` maps each op type to its rule; :func:`find_domain`
is funsor's with these first. They are in effect only in the package's
own work (compiling blocks, tracing, lowering), where funsor's term
constructors call :func:`find_domain` (:mod:`..hooks`, one hook):
funsor code elsewhere in the process keeps funsor's rules.
:func:`permutation_dims` reads the axis order a ``permute`` or
``transpose`` applies.

Example::

    >>> from funsor.domains import Reals
    >>> SHAPE_RULES[ops.ReductionOp](ops.SumOp(axis=0), Reals[2, 3])
    Reals[3]
    >>> SHAPE_RULES[ops.PermuteOp](ops.PermuteOp(dims=(1, 0)), Reals[2, 3])
    Reals[3,2]
"""

from funsor import domains, ops
from funsor.domains import Array, ArrayType

SHAPE_RULES = {}  # op type -> find_domain rule, used in the package's own work


def package_rule(op_type):
    """The package's shape rule for ``op_type``, or ``None`` where funsor's
    applies: the nearest class in its MRO with a rule of either, the
    package's first (as ``functools.singledispatch`` would pick among both
    tables)."""
    for cls in op_type.__mro__:
        if cls in SHAPE_RULES:
            return SHAPE_RULES[cls]
        if cls in domains.find_domain.registry:
            return None
    return None


def find_domain(op, *arg_domains):
    """``funsor.domains.find_domain`` with the package's rules first: the
    domain the package's programs give ``op(*arg_domains)``.

    >>> from funsor.domains import Reals
    >>> find_domain(ops.SumOp(axis=0), Reals[2, 3])  # funsor's: Real
    Reals[3]
    >>> find_domain(ops.exp, Reals[2])  # funsor's rule
    Reals[2]
    """
    rule = package_rule(type(op))
    if rule is None:
        return domains.find_domain(op, *arg_domains)
    return rule(op, *arg_domains)


def _rule_for(*op_types):
    def register(rule):
        for op_type in op_types:
            SHAPE_RULES[op_type] = rule
        return rule

    return register


def _reduced_axes(op, ndims):
    axis = op.defaults.get("axis", op.defaults.get("dim"))
    if axis is None:
        return set(range(ndims))
    if isinstance(axis, int):
        axis = (axis,)
    for a in axis:
        if not -ndims <= a < ndims:
            raise ValueError(f"{op!r}: axis {a} is out of range for {ndims} dims")
    return {a % ndims for a in axis}


def _reduced_shape(op, domain):
    ndims = len(domain.shape)
    axes = _reduced_axes(op, ndims)
    if op.defaults.get("keepdims", False):
        return tuple(1 if i in axes else n for i, n in enumerate(domain.shape))
    return tuple(n for i, n in enumerate(domain.shape) if i not in axes)


@_rule_for(ops.ReductionOp)
def find_domain_reduction(op, domain):
    shape = _reduced_shape(op, domain)
    if op.name in ("all", "any"):
        return Array[2, shape]
    return Array[domain.dtype, shape]


@_rule_for(ops.ArgmaxOp, ops.ArgminOp)
def find_domain_argmax(op, domain):
    axis = op.defaults.get("axis")
    size = domain.num_elements if axis is None else domain.shape[axis]
    return Array[size, _reduced_shape(op, domain)]


@_rule_for(ops.PermuteOp)
def find_domain_permute(op, domain):
    dims = tuple(op.defaults["dims"])
    if sorted(d % max(len(dims), 1) for d in dims) != list(range(len(domain.shape))):
        raise ValueError(f"{op!r}: dims {dims} is not a permutation for {domain}")
    return Array[domain.dtype, tuple(domain.shape[d] for d in dims)]


@_rule_for(ops.TransposeOp)
def find_domain_transpose(op, domain):
    shape = list(domain.shape)
    axes = [op.defaults["axis1"], op.defaults["axis2"]]
    if not all(-len(shape) <= a < len(shape) for a in axes):
        raise ValueError(f"{op!r}: axes {axes} are out of range for {domain}")
    a, b = axes
    shape[a], shape[b] = shape[b], shape[a]
    return Array[domain.dtype, tuple(shape)]


@_rule_for(ops.ExpandOp)
def find_domain_expand(op, domain):
    shape = tuple(op.defaults["shape"])
    old = (1,) * (len(shape) - len(domain.shape)) + tuple(domain.shape)
    if len(old) != len(shape):
        raise ValueError(f"{op!r}: cannot expand {domain} to fewer dims")
    new = []
    for n_old, n_new in zip(old, shape):
        if n_new == -1:
            n_new = n_old
        elif n_old not in (1, n_new):
            raise ValueError(f"{op!r}: cannot expand {domain} to {shape}")
        new.append(n_new)
    return Array[domain.dtype, tuple(new)]


@_rule_for(ops.GetitemOp)
def find_domain_getitem(op, lhs, rhs):
    """``lhs[..., rhs, ...]`` at axis ``offset``: the index's shape replaces
    that axis (funsor 0.4.8 assumed a scalar index)."""
    offset = op.defaults["offset"]
    if not isinstance(lhs, ArrayType):
        raise NotImplementedError(f"cannot infer the domain of {lhs}[{rhs}]")
    shape = lhs.shape[:offset] + tuple(rhs.shape) + lhs.shape[offset + 1 :]
    return Array[lhs.dtype, shape]


@_rule_for(ops.EinsumOp)
def find_domain_einsum(op, domains):
    """numpy's einsum shape, ellipsis included (funsor 0.4.8's rule rejects
    ``...``): each operand's ellipsis dims broadcast together."""
    equation = op.defaults["equation"].replace(" ", "")
    inputs, output = equation.split("->")
    sizes, ellipses = {}, []
    for letters, domain in zip(inputs.split(","), domains):
        shape = tuple(domain.shape)
        named = letters.replace("...", "")
        if "..." in letters:
            start = letters.index("...")
            n_ellipsis = len(shape) - len(named)
            ellipses.append(shape[start : start + n_ellipsis])
            shape = shape[:start] + shape[start + n_ellipsis :]
        for letter, size in zip(named, shape):
            sizes[letter] = max(sizes.get(letter, 1), size)
    ellipsis = broadcast_shape(*ellipses, what="einsum operands' ellipsis dims")
    shape = []
    for part in output.split("..."):
        shape.append(tuple(sizes[c] for c in part))
    result = shape[0] + (ellipsis + shape[1] if len(shape) > 1 else ())
    dtype = domains[0].dtype
    return Array[dtype, result]


def broadcast_shape(*shapes, what="event shapes"):
    """numpy's broadcasting of ``shapes``, with a clear error naming
    ``what`` is broadcast."""
    rank = max((len(s) for s in shapes), default=0)
    result = []
    for i in range(rank):
        sizes = {s[i - rank + len(s)] for s in shapes if i - rank + len(s) >= 0}
        sizes.discard(1)
        if len(sizes) > 1:
            raise ValueError(f"{what} {shapes} do not broadcast")
        result.append(sizes.pop() if sizes else 1)
    return tuple(result)


@_rule_for(ops.TriangularSolveOp)
def find_domain_triangular_solve(op, x, y):
    """``y⁻¹ x``: the batch dims broadcast, then ``x``'s matrix shape."""
    batch = broadcast_shape(
        tuple(x.shape[:-2]), tuple(y.shape[:-2]), what="triangular_solve batch dims"
    )
    return Array[x.dtype, batch + tuple(x.shape[-2:])]


@_rule_for(ops.DiagonalOp)
def find_domain_diagonal(op, x):
    """The diagonal of axes ``dim1``, ``dim2``, as the last axis."""
    shape = tuple(x.shape)
    dims = [d % len(shape) for d in (op.defaults["dim1"], op.defaults["dim2"])]
    rest = tuple(s for i, s in enumerate(shape) if i not in dims)
    return Array[x.dtype, rest + (min(shape[dims[0]], shape[dims[1]]),)]


@_rule_for(ops.NewZerosOp, ops.NewFullOp)
def find_domain_new_array(op, prototype):
    """An array of the op's ``shape`` in the prototype's dtype (funsor's
    pointwise rule kept the prototype's shape)."""
    return Array[prototype.dtype, tuple(op.defaults["shape"])]


@_rule_for(ops.UnsqueezeOp)
def find_domain_unsqueeze(op, x):
    """A unit axis inserted at ``dim`` (negative: counted in the result)."""
    shape = list(x.shape)
    dim = op.defaults["dim"]
    dim = dim + len(shape) + 1 if dim < 0 else dim
    shape.insert(dim, 1)
    return Array[x.dtype, tuple(shape)]


def permutation_dims(op, shape):
    """The dims ``ops.permute`` takes for a permute or transpose ``op``
    giving an array of ``shape`` (any sequence of its length), or ``None``
    (a transpose of unknown rank)."""
    if isinstance(op, ops.PermuteOp):
        return tuple(op.defaults["dims"])
    if shape is None:
        return None
    rank = len(shape)
    dims = list(range(rank))
    a, b = op.defaults["axis1"] % rank, op.defaults["axis2"] % rank
    dims[a], dims[b] = dims[b], dims[a]
    return tuple(dims)
