"""Ops our lowering emits that ``funsor.ops`` lacks, written with backend-
neutral array syntax, with shape rules. Funsor evaluates them like any op.

- ``logsumexp_scan(alpha, steps)``: a chain's forward pass in log space
  (an HMM's), which backends that run loops fast (jax: ``lax.scan``) get
  in place of a log-depth parallel scan; ``logsumexp_scan_emitting((alpha,
  steps, emissions))`` adds an emission after each step.
- ``logspace_einsum(operands, equation)``: a log-space contraction as
  max-shifted matrix products (:mod:`.logspace_einsum`).
- ``take(x, index)``: ``x[index]``, rows of ``x`` picked by an integer array
  (the one gather a lowered program needs; funsor's ``GetitemOp`` means a
  scalar index whose batch dims are named, so it cannot express this).
- ``distribution_log_prob`` / ``distribution_sample``: a backend
  distribution's density and draws, as funsor's distribution terms compute
  them from their parameters.
- ``qr_project(m, u)``: a QR's ``R`` and ``u @ Q`` (jax computes them
  without forming ``Q``).
- ``vecdot(x, y)``: ``sum(x * y, -1)`` in one backend call.
- ``triangular_solve_vectors(x, y)``: ``ops.triangular_solve`` of a batch
  of vectors, without their unit axis (torch: one solve from the right).
- ``categorical_sample``, ``randn_with_key``, ``split_key``: random draws
  and jax keys as operands, so the tracer records them as live operations.

Example::

    >>> import numpy as np
    >>> take(np.array([[1, 2], [3, 4], [5, 6]]), np.array([2, 0]))
    array([[5, 6],
           [1, 2]])
"""

import numpy as np
from funsor import ops
from funsor.domains import Array, find_domain

from .logspace_einsum import LogspaceEinsumOp, logspace_einsum


@ops.BinaryOp.make(module_name="funsor_lowering.ops.extra_ops")
def take(x, index):
    return x[index]


TakeOp = type(take)  # module-level, so programs holding the op pickle


@find_domain.register(TakeOp)
def find_domain_take(op, x, index):
    return Array[x.dtype, tuple(index.shape) + tuple(x.shape[1:])]


@ops.BinaryOp.make(module_name="funsor_lowering.ops.extra_ops")
def logsumexp_scan(alpha, steps):
    """A chain's forward pass in log space: ``alpha`` (``[..., S]``) carried
    through ``steps`` (``[..., N, S, S]``, ``step[i, j]`` scoring a move
    from state ``i`` to ``j``) in order, ``alpha = logsumexp(alpha[..., :,
    None] + step, -2)`` per step: an HMM's forward filter. Leading batch
    axes broadcast. Backends register loops (jax: one ``lax.scan``)."""
    for n in range(steps.shape[-3]):
        alpha = ops.logsumexp(ops.unsqueeze(alpha, -1) + steps[..., n, :, :], -2)
    return alpha


LogsumexpScanOp = type(logsumexp_scan)


@find_domain.register(LogsumexpScanOp)
def find_domain_logsumexp_scan(op, alpha, steps):
    batch = np.broadcast_shapes(alpha.shape[:-1], steps.shape[:-3])
    return Array[alpha.dtype, tuple(batch) + tuple(alpha.shape[-1:])]


@ops.FinitaryOp.make(module_name="funsor_lowering.ops.extra_ops")
def logsumexp_scan_emitting(parts):
    """:func:`logsumexp_scan` adding each step's emission after the step:
    for ``parts = (alpha, steps, emissions)`` (``emissions``: ``[..., N,
    S]``), ``alpha = logsumexp(alpha[..., :, None] + step, -2) + emission``
    per step: an HMM's forward filter with its observations' log
    likelihoods. (Emissions added to the steps before a scan cost jax one
    more kernel and buffer, ~30% of the scan at N = 100.) Finitary, as
    lowered terms have no three-operand form; leading batch axes broadcast."""
    alpha, steps, emissions = parts
    for n in range(steps.shape[-3]):
        step = ops.logsumexp(ops.unsqueeze(alpha, -1) + steps[..., n, :, :], -2)
        alpha = step + emissions[..., n, :]
    return alpha


LogsumexpScanEmittingOp = type(logsumexp_scan_emitting)


@find_domain.register(LogsumexpScanEmittingOp)
def find_domain_logsumexp_scan_emitting(op, parts):
    alpha, steps, emissions = parts
    batch = np.broadcast_shapes(
        alpha.shape[:-1], steps.shape[:-3], emissions.shape[:-2]
    )
    return Array[alpha.dtype, tuple(batch) + tuple(alpha.shape[-1:])]


@ops.UnaryOp.make(module_name="funsor_lowering.ops.extra_ops")
def tuple_item(x, index=0):
    """Output ``index`` of an op with several outputs (``ops.qr``,
    ``ops.slogdet`` ...), which traced programs hold as one tuple value."""
    return x[index]


TupleItemOp = type(tuple_item)


@ops.UnaryOp.make(module_name="funsor_lowering.ops.extra_ops")
def relu(x):
    """``max(x, 0)`` elementwise, with the backend's own ReLU gradient
    (zero at 0): ``torch.relu``, ``jax.nn.relu``; numpy's ``maximum``."""
    return np.maximum(x, 0)


ReluOp = type(relu)


@ops.UnaryOp.make(module_name="funsor_lowering.ops.extra_ops")
def real_part(x):
    """The real part of a complex array (``x.real`` on every backend)."""
    return x.real


RealPartOp = type(real_part)


@ops.UnaryOp.make(module_name="funsor_lowering.ops.extra_ops")
def imag_part(x):
    """The imaginary part of a complex array (``x.imag``)."""
    return x.imag


ImagPartOp = type(imag_part)


@ops.BinaryOp.make(module_name="funsor_lowering.ops.extra_ops")
def qr_project(m, u):
    """``(R, u @ Q)`` for the reduced QR factorization ``m = Q R`` of a tall
    or square ``m`` (``[..., rows, cols]``, ``rows >= cols``) and rows ``u``
    (``[..., k, rows]``): what a Gaussian's compression reads of a QR.
    Backends may compute both from one QR of ``[m | uᵀ]`` that never forms
    ``Q`` (jax: ``qr(mode="r")``, a third of the full QR's time under
    ``jax.jit``):
    Householder steps go left to right, so its ``R`` holds ``m``'s ``R``
    and, beside it, ``Qᵀ uᵀ``; leading axes of ``u`` that ``m`` lacks (a
    Gaussian's particles) become more columns, so ``m`` is factored once.
    Results keep the shapes and dtypes of ``ops.qr``'s ``R`` and of
    ``ops.matmul``.

    >>> m, u = np.array([[3.0, 1.0], [4.0, 2.0], [0.0, 1.0]]), np.ones((1, 3))
    >>> r, uq = qr_project(m, u)
    >>> r.shape, uq.shape
    ((2, 2), (1, 2))
    """
    q, r = ops.qr(m)
    return r, ops.matmul(u, q)


QrProjectOp = type(qr_project)


@ops.BinaryOp.make(module_name="funsor_lowering.ops.extra_ops")
def vecdot(x, y):
    """``ops.sum(x * y, -1)``, the dot products of vectors on the last axis
    (leading axes broadcast): one call where the backend has one
    (``torch.linalg.vecdot``, numpy 2's ``np.vecdot``), where funsor's
    Gaussians square and sum whitened residuals.

    >>> vecdot(np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([1.0, 1.0]))
    array([3., 7.])
    """
    return ops.sum(ops.mul(x, y), -1)


VecdotOp = type(vecdot)


@find_domain.register(VecdotOp)
def find_domain_vecdot(op, x, y):
    batch = np.broadcast_shapes(x.shape[:-1], y.shape[:-1])
    return Array[find_domain(ops.mul, x, y).dtype, tuple(batch)]


@ops.BinaryOp.make(module_name="funsor_lowering.ops.extra_ops")
def triangular_solve_vectors(x, y, upper=False, transpose=False):
    """``ops.triangular_solve`` of a batch of vectors ``x`` (``[..., n]``)
    and triangular ``y`` (``[..., n, n]``): ``z`` with ``y z = x`` (``yᵀ z =
    x`` if ``transpose``) per vector, without the unit axis that
    ``ops.triangular_solve`` needs (``triangular_solve(x[..., None], y)[...,
    0]``, three calls). torch solves a batch of vectors and one matrix as
    one solve from the right (``Z yᵀ = X``), numpy as one LAPACK call.

    >>> y = np.array([[2.0, 0.0], [1.0, 1.0]])
    >>> triangular_solve_vectors(np.array([[2.0, 3.0], [4.0, 2.0]]), y)
    array([[1., 2.],
           [2., 0.]])
    """
    column = ops.unsqueeze(x, -1)
    return ops.triangular_solve(column, y, upper, transpose)[..., 0]


TriangularSolveVectorsOp = type(triangular_solve_vectors)


@find_domain.register(TriangularSolveVectorsOp)
def find_domain_triangular_solve_vectors(op, x, y):
    batch = np.broadcast_shapes(x.shape[:-1], y.shape[:-2])
    return Array[x.dtype, tuple(batch) + tuple(x.shape[-1:])]


__all__ = [
    "RANDOM_OP_TYPES",
    "backend_distribution",
    "CategoricalSampleOp",
    "DistributionLogProbOp",
    "DistributionSampleOp",
    "ImagPartOp",
    "LogspaceEinsumOp",
    "LogsumexpScanEmittingOp",
    "LogsumexpScanOp",
    "QrProjectOp",
    "RandnWithKeyOp",
    "RealPartOp",
    "ReluOp",
    "SplitKeyOp",
    "TakeOp",
    "TriangularSolveVectorsOp",
    "TupleItemOp",
    "VecdotOp",
    "categorical_sample",
    "distribution_log_prob",
    "distribution_sample",
    "logspace_einsum",
    "logsumexp_scan",
    "logsumexp_scan_emitting",
    "qr_project",
    "randn_with_key",
    "split_key",
    "take",
    "getslice_op",
    "imag_part",
    "real_part",
    "relu",
    "triangular_solve_vectors",
    "tuple_item",
    "vecdot",
]


def numeric_parameters(dist_class, names):
    """The parameters in ``names`` that ``dist_class`` takes as Python
    numbers where they are scalars: those its ``arg_constraints`` does not
    declare (torch's Multinomial ``total_count``), as funsor's ``to_data``
    passes them.

    >>> class Multinomial:  # torch's declares probs and logits only
    ...     arg_constraints = {"probs": None, "logits": None}
    >>> numeric_parameters(Multinomial, ("total_count", "probs"))
    ('total_count',)
    """
    declared = getattr(dist_class, "arg_constraints", None)
    if not isinstance(declared, dict):
        return ()
    return tuple(name for name in names if name not in declared)


def backend_distribution(dist_class, names, params, event_rank, validate=None):
    """The backend distribution ``dist_class(**dict(zip(names, params)))``
    with ``event_rank`` event dims; its arguments unvalidated where
    ``validate`` is false."""
    kwargs = dict(zip(names, params))
    for name in numeric_parameters(dist_class, names):
        value = kwargs[name]
        if getattr(value, "shape", None) == ():
            kwargs[name] = int(value) if _is_integral(value) else float(value)
    if validate is False or any(getattr(p, "is_meta", False) for p in params):
        # shape inference on torch's meta tensors (symbolic tracing): no
        # values to validate
        kwargs["validate_args"] = False
    if dist_class.__name__ == "Delta":
        # a Delta's log_density has the batch shape only: its event dims
        # are given as ``event_dim`` (numpyro broadcasts it with ``v``)
        kwargs["event_dim"] = event_rank
    dist = dist_class(**kwargs)
    extra = event_rank - len(dist.event_shape)
    return dist.to_event(extra) if extra > 0 else dist


def _is_integral(value):
    return float(value) == int(value)


@ops.FinitaryOp.make(module_name="funsor_lowering.ops.extra_ops")
def distribution_log_prob(args, dist_class=None, names=(), event_rank=0):
    """``dist_class(**dict(zip(names, args[:-1]))).log_prob(args[-1])``, with
    the distribution's event made ``event_rank`` dims (``to_event``), as
    funsor's ``to_data`` of a distribution builds it."""
    *params, value = args
    return backend_distribution(dist_class, names, params, event_rank).log_prob(value)


DistributionLogProbOp = type(distribution_log_prob)


@find_domain.register(DistributionLogProbOp)
def find_domain_distribution_log_prob(op, domains):
    # Only the lowering rule builds this op and knows the batch shape; it
    # passes it as the value's leading shape (see rules/distributions.py).
    *params, value = domains
    event_rank = op.defaults["event_rank"]
    return Array["real", tuple(value.shape[: len(value.shape) - event_rank])]


@ops.FinitaryOp.make(module_name="funsor_lowering.ops.extra_ops")
def distribution_sample(
    args, dist_class=None, names=(), event_rank=0, sample_shape=(), keyed=False
):
    """A draw of shape ``sample_shape + batch + event`` from the backend
    distribution built from ``args`` (its parameters, then the rng key when
    ``keyed``, as jax needs): ``rsample`` where the distribution has it, else
    ``sample`` (detached). A random op: never folded."""
    params, key = (args[:-1], args[-1]) if keyed else (args, None)
    dist = backend_distribution(dist_class, names, params, event_rank)
    draw_args = (key, sample_shape) if keyed else (sample_shape,)
    if dist.has_rsample:
        return dist.rsample(*draw_args)
    return ops.detach(dist.sample(*draw_args))


DistributionSampleOp = type(distribution_sample)


@ops.BinaryOp.make(module_name="funsor_lowering.ops.extra_ops")
def randn_with_key(prototype, rng_key, shape=()):
    """``ops.randn(prototype, shape, rng_key)`` with the key as an operand
    (a program input on jax), not a fixed parameter."""
    return ops.randn(prototype, shape, rng_key)


RandnWithKeyOp = type(randn_with_key)


@find_domain.register(RandnWithKeyOp)
def find_domain_randn_with_key(op, prototype, rng_key):
    return Array["real", tuple(op.defaults["shape"])]


@ops.UnaryOp.make(module_name="funsor_lowering.ops.extra_ops")
def split_key(key, index=0, num=2):
    """Row ``index`` of ``jax.random.split(key, num)``: a fresh key derived
    from ``key`` (the jax backend registers the implementation)."""
    raise NotImplementedError(
        f"split_key needs a jax PRNG key, got {type(key).__name__}"
    )


SplitKeyOp = type(split_key)


@find_domain.register(SplitKeyOp)
def find_domain_split_key(op, key):
    return key


@ops.FinitaryOp.make(module_name="funsor_lowering.ops.extra_ops")
def categorical_sample(args, sample_shape=(), keyed=False):
    """Indices drawn from ``Categorical(logits=args[0])`` (over its last
    axis), of shape ``sample_shape + logits.shape[:-1]``; ``args[1]`` is the
    rng key when ``keyed``. This default (numpy) draws by inverse CDF, as
    funsor's numpy sampler does; torch and jax register their Categorical.
    A random op: never folded."""
    logits = args[0]
    shape = tuple(sample_shape) + logits.shape[:-1]
    probs = np.exp(logits - np.amax(logits, -1, keepdims=True))
    cdf = np.cumsum(probs / np.sum(probs, -1, keepdims=True), -1)
    uniform = np.random.rand(*shape)
    return np.sum(cdf < uniform[..., None], axis=-1)


CategoricalSampleOp = type(categorical_sample)


@find_domain.register(CategoricalSampleOp)
def find_domain_categorical_sample(op, domains):
    logits = domains[0]
    shape = tuple(op.defaults["sample_shape"]) + tuple(logits.shape[:-1])
    return Array[logits.shape[-1], shape]


@ops.FinitaryOp.make(module_name="funsor_lowering.ops.extra_ops")
def scatter_indexed(parts, layout=(), accumulate=False):
    """``ops.scatter(destin, indices, source)`` (``ops.scatter_add`` where
    ``accumulate``) with the index arrays as operands, so that a trace
    records them: ``parts`` is ``(destin, source, *index_arrays)``;
    ``layout`` gives each position of ``indices``: ``"array"`` (the next
    index array), ``None``, or ``("slice", start, stop, step)``.

    >>> scatter_indexed((np.zeros(3), np.ones(2), np.array([0, 2])), ("array",))
    array([1., 0., 1.])
    """
    destin, source, *arrays = parts
    arrays = iter(arrays)
    indices = tuple(
        next(arrays)
        if item == "array"
        else slice(*item[1:])
        if isinstance(item, tuple)
        else item
        for item in layout
    )
    return (ops.scatter_add if accumulate else ops.scatter)(destin, indices, source)


ScatterIndexedOp = type(scatter_indexed)


@find_domain.register(ScatterIndexedOp)
def find_domain_scatter_indexed(op, domains):
    return domains[0]


def flat_scatter(op, args, kwargs, is_array):
    """``(scatter_indexed op, parts)`` for a call of ``ops.scatter`` or
    ``ops.scatter_add`` whose index tuple holds arrays, else ``None``."""
    if kwargs or len(args) != 3 or not isinstance(args[1], tuple):
        return None
    destin, indices, source = args
    if not any(is_array(i) for i in indices):
        return None
    layout, arrays = [], []
    for item in indices:
        if is_array(item):
            layout.append("array")
            arrays.append(item)
        elif isinstance(item, slice):
            layout.append(("slice", item.start, item.stop, item.step))
        elif item is None or isinstance(item, int):
            layout.append(item)
        else:
            return None
    accumulate = isinstance(op, ops.ScatterAddOp)
    flat_op = ScatterIndexedOp(layout=tuple(layout), accumulate=accumulate)
    return flat_op, (destin, source, *arrays)


def getslice_op(index):
    """``ops.GetsliceOp(index=index)``, a one-item tuple index written as
    its item. funsor caches getslice ops by ``(index,)``, so ``x[(1,)]``
    and ``x[1]`` share one op, the first one made; funsor's ``Tuple``
    indexing then fails if the cached op holds a tuple (it indexes a Python
    tuple with it). Ops made here never hold one-item tuples.

    >>> getslice_op((1,)).defaults["index"]
    1
    """
    if isinstance(index, tuple) and len(index) == 1:
        index = index[0]
    return ops.GetsliceOp(index=index)


# Ops whose results are random draws: never folded or merged by passes.
RANDOM_OP_TYPES = (
    ops.RandnOp,
    RandnWithKeyOp,
    DistributionSampleOp,
    CategoricalSampleOp,
)
