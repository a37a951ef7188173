"""Fast implementations of funsor ops for jax outside ``jax.jit``.

Called eagerly, ``jax.numpy`` handles its arguments in Python on every call:
``x[3]`` takes ~60 us, ``jnp.concatenate`` ~100 us, ``jax.scipy``'s
``logsumexp`` ~250 us, where a ``jax.lax`` primitive takes ~10 us. A
program's shapes are fixed, so its layout ops are specialized once, at
resolution, into the one or two ``jax.lax`` primitives they are
(:func:`specialize`); ops that are compositions of primitives run as a
kernel ``jax.jit`` compiles once per op, parameters and shapes
(``logsumexp``, funsor's triangular solves and the like, which it writes
as several ``jax.numpy`` calls, and the key splits and normal draws of a
keyed program, which are functions of their key).

Example::

    >>> import numpy as np
    >>> from funsor import ops
    >>> x = np.arange(24.0).reshape(2, 3, 4)
    >>> take = specialize(ops.GetsliceOp, (x,), ((1, slice(None, None, 2), None),))
    >>> take(x).shape
    (2, 1, 4)
"""

import math

import funsor

if funsor.get_backend() != "jax":  # as jax_backend: funsor breaks otherwise
    funsor.set_backend("jax")

import jax  # noqa: E402
from funsor import ops  # noqa: E402
from jax import lax  # noqa: E402

from ..ops.extra_ops import (  # noqa: E402
    LogsumexpScanEmittingOp,
    LogsumexpScanOp,
    QrProjectOp,
    RandnWithKeyOp,
    SplitKeyOp,
    TriangularSolveVectorsOp,
    VecdotOp,
)
from . import jax_threefry  # noqa: E402


def specialize(op_type, operands, params):
    """A function of the operands computing ``op_type(*params)`` with
    ``jax.lax`` primitives for operands of these shapes, or ``None``."""
    make = _SPECIALIZERS.get(op_type)
    return None if make is None else make(operands, *params)


def _getslice(operands, index):
    (x,) = operands
    shape = tuple(x.shape)
    index = index if isinstance(index, tuple) else (index,)
    if sum(i is Ellipsis for i in index) > 1:
        return None
    if Ellipsis in index:
        at = index.index(Ellipsis)
        named = sum(i is not None for i in index) - 1
        index = index[:at] + (slice(None),) * (len(shape) - named) + index[at + 1 :]
    bounds, result = [], []  # per axis of x: (start, limit, stride)
    axis = 0
    for item in index:
        if item is None:
            result.append(1)
            continue
        if axis >= len(shape):
            return None
        size = shape[axis]
        if isinstance(item, bool) or not isinstance(item, (int, slice)):
            return None
        if isinstance(item, int):
            if not -size <= item < size:
                return None
            bounds.append((item % size, item % size + 1, 1))
        else:
            start, stop, step = item.indices(size)
            if step <= 0:
                return None
            count = len(range(start, stop, step))
            bounds.append(
                (start, start + (count - 1) * step + 1 if count else start, step)
            )
            result.append(count)
        axis += 1
    bounds += [(0, size, 1) for size in shape[axis:]]
    result += shape[axis:]
    result = tuple(result)
    starts, limits, strides = (tuple(b) for b in zip(*bounds)) if bounds else ((),) * 3
    whole = all(b == (0, n, 1) for b, n in zip(bounds, shape))
    strides = None if set(strides) <= {1} else strides

    def getslice(x):
        if not whole:
            x = lax.slice(x, starts, limits, strides)
        return x if x.shape == result else lax.reshape(x, result)

    return getslice


def _reshape(operands, shape):
    (x,) = operands
    shape = tuple(shape)
    if -1 in shape:
        known = math.prod(n for n in shape if n != -1)
        shape = tuple(math.prod(x.shape) // known if n == -1 else n for n in shape)

    def reshape(x):
        return lax.reshape(x, shape)

    return reshape


def _expand(operands, shape):
    (x,) = operands
    prepend = len(shape) - x.ndim
    if prepend < 0:
        return None
    target = tuple(shape[:prepend]) + tuple(
        n if size == -1 else size for n, size in zip(x.shape, shape[prepend:])
    )
    dims = tuple(range(prepend, len(target)))

    def expand(x):
        return lax.broadcast_in_dim(x, target, dims)

    return expand


def _permute(operands, dims):
    (x,) = operands
    dims = tuple(d % x.ndim for d in dims)

    def permute(x):
        return lax.transpose(x, dims)

    return permute


def _transpose(operands, axis1, axis2):
    (x,) = operands
    dims = list(range(x.ndim))
    dims[axis1], dims[axis2] = dims[axis2], dims[axis1]
    return _permute(operands, dims)


def _unsqueeze(operands, dim):
    (x,) = operands
    dim = dim % (x.ndim + 1)

    def unsqueeze(x):
        return lax.expand_dims(x, (dim,))

    return unsqueeze


def _cat(operands, axis=0):
    (parts,) = operands
    dtypes = {getattr(p, "dtype", None) for p in parts}
    if len(dtypes) != 1 or None in dtypes or not parts:
        return None  # jnp.concatenate promotes mixed dtypes
    axis = axis % parts[0].ndim

    def cat(parts):
        return lax.concatenate(parts, axis)

    return cat


_KERNELS = {}


def logsumexp(x, axis=None, keepdims=False):
    """``jax.scipy.special.logsumexp`` whose gradient into a reduction over
    ``-inf`` entries only is 0, not NaN, as eager funsor's (its log-space
    einsum): an HMM with impossible transitions has finite gradients.

    >>> import jax.numpy as jnp
    >>> x = jnp.array([[-jnp.inf, -jnp.inf], [0.0, 1.0]])
    >>> jax.grad(lambda x: logsumexp(logsumexp(x, -1), 0))(x).round(4)
    Array([[0.    , 0.    ],
           [0.2689, 0.7311]], dtype=float32)
    """
    from jax.scipy.special import logsumexp as jax_logsumexp

    dead = lax.stop_gradient(x.max(axis, keepdims=True)) == -math.inf
    result = jax_logsumexp(jax.numpy.where(dead, 0.0, x), axis, keepdims=True)
    result = jax.numpy.where(dead, -math.inf, result)
    return result if keepdims else jax.numpy.squeeze(result, axis)


def _logsumexp(operands, axis=None, keepdims=False):
    return _compiled(
        ("logsumexp", repr(axis), keepdims),
        lambda x: logsumexp(x, axis, keepdims=keepdims),
    )


def _logsumexp_scan(operands):
    """``extra_ops.logsumexp_scan`` of operands ``(alpha, steps)`` (with
    ``emissions`` after them, ``logsumexp_scan_emitting``'s parts) as one
    jitted ``lax.scan``."""
    alpha, steps, *emissions = operands
    batch = tuple(
        jax.numpy.broadcast_shapes(
            alpha.shape[:-1],
            tuple(steps.shape[:-3]),
            *(e.shape[:-2] for e in emissions),
        )
    )

    def step(carry, xs):
        matrix, *emission = xs
        carry = logsumexp(carry[..., :, None] + matrix, -2)
        return (carry + emission[0] if emission else carry), None

    def scan(alpha, steps, *emissions):
        alpha = jax.numpy.broadcast_to(alpha, batch + alpha.shape[-1:])
        xs = [jax.numpy.moveaxis(steps, -3, 0)]
        xs += [jax.numpy.moveaxis(e, -2, 0) for e in emissions]
        return lax.scan(step, alpha, xs)[0]

    return _compiled(("logsumexp_scan", batch, len(emissions)), scan)


def _logsumexp_scan_emitting(operands):
    (parts,) = operands  # finitary: one tuple (alpha, steps, emissions)
    scan = _logsumexp_scan(parts)
    return lambda parts: scan(*parts)


def _split_key(operands, index=0, num=2):
    return _compiled(
        ("split_key", index, num), lambda key: jax_threefry.split(key, num)[index]
    )


def _randn_with_key(operands, shape=()):
    prototype, _ = operands
    shape, dtype = tuple(shape), prototype.dtype
    draw = _compiled(
        ("randn", shape, str(dtype)),
        lambda key: jax_threefry.normal(key, shape, dtype=dtype),
    )

    def randn_with_key(prototype, key):
        return draw(key)

    return randn_with_key


# funsor's jax implementations that are several jax.numpy calls (each with
# its eager argument handling; a triangular solve takes ~190 us so, a
# jitted kernel ~14 us), and our qr_project, vecdot and vector solves: run
# as one kernel jax.jit compiles once per op, parameters and shapes.
COMPOSED = (
    QrProjectOp,
    VecdotOp,
    TriangularSolveVectorsOp,
    ops.TriangularSolveOp,
    ops.TriangularInvOp,
    ops.CholeskySolveOp,
    ops.CholeskyInverseOp,
)


def composed_kernel(op_type, params, dispatched):
    """funsor's implementation ``dispatched`` of ``op_type(*params)`` as one
    jitted kernel of its operands (what it computes, in one call), or
    ``None`` for other ops or unhashable parameters."""
    if not issubclass(op_type, COMPOSED):
        return None
    try:
        hash(params)
    except TypeError:
        return None
    return _compiled(
        (op_type.__name__, dispatched, params),
        lambda *operands: dispatched(*operands, *params),
    )


def _compiled(key, function):
    kernel = _KERNELS.get(key)
    if kernel is None:
        kernel = _KERNELS.setdefault(key, jax.jit(function))
    return kernel


_SPECIALIZERS = {
    SplitKeyOp: _split_key,
    RandnWithKeyOp: _randn_with_key,
    ops.GetsliceOp: _getslice,
    ops.ReshapeOp: _reshape,
    ops.ExpandOp: _expand,
    ops.PermuteOp: _permute,
    ops.TransposeOp: _transpose,
    ops.UnsqueezeOp: _unsqueeze,
    ops.CatOp: _cat,
    ops.LogsumexpOp: _logsumexp,
    LogsumexpScanOp: _logsumexp_scan,
    LogsumexpScanEmittingOp: _logsumexp_scan_emitting,
}
