"""Shape rules (``funsor.domains.find_domain``) for ops our programs use,
where funsor 0.4.8 lacks or mis-infers them:

- reductions read ``dim`` while the ops take ``axis`` (so ``ops.sum(x, 0)``
  was inferred to reduce every axis);
- ``getitem`` ignored the shape of its index;
- ``permute``, ``expand``, ``argmax`` and ``argmin`` fell back to the
  pointwise rule and kept the input shape.

Importing this module registers the corrected rules.

Example::

    >>> from funsor import ops
    >>> from funsor.domains import Reals, find_domain
    >>> find_domain(ops.SumOp(axis=0), Reals[2, 3])
    Reals[3]
    >>> find_domain(ops.PermuteOp(dims=(1, 0)), Reals[2, 3])
    Reals[3,2]
"""

from funsor import ops
from funsor.domains import Array, ArrayType, find_domain


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


@find_domain.register(ops.ReductionOp)
def find_domain_reduction(op, domain):
    shape = _reduced_shape(op, domain)
    if op.name in ("all", "any"):
        return Array[2, shape]
    return Array[domain.dtype, shape]


@find_domain.register(ops.ArgmaxOp)
@find_domain.register(ops.ArgminOp)
def find_domain_argmax(op, domain):
    axis = op.defaults.get("axis")
    size = domain.num_elements if axis is None else domain.shape[axis]
    return Array[size, _reduced_shape(op, domain)]


@find_domain.register(ops.PermuteOp)
def find_domain_permute(op, domain):
    dims = tuple(op.defaults["dims"])
    if sorted(d % max(len(dims), 1) for d in dims) != list(range(len(domain.shape))):
        raise ValueError(f"{op!r}: dims {dims} is not a permutation for {domain}")
    return Array[domain.dtype, tuple(domain.shape[d] for d in dims)]


@find_domain.register(ops.ExpandOp)
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


@find_domain.register(ops.GetitemOp)
def find_domain_getitem(op, lhs, rhs):
    """``lhs[..., rhs, ...]`` at axis ``offset``: the index's shape replaces
    that axis (funsor 0.4.8 assumed a scalar index)."""
    offset = op.defaults["offset"]
    if not isinstance(lhs, ArrayType):
        raise NotImplementedError(f"cannot infer the domain of {lhs}[{rhs}]")
    shape = lhs.shape[:offset] + tuple(rhs.shape) + lhs.shape[offset + 1 :]
    return Array[lhs.dtype, shape]
