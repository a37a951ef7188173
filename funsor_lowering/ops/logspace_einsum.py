"""``logspace_einsum``: a log-space contraction (``logaddexp`` over
``add``) computed as matrix products in probability space, without losing
accuracy.

``logspace_einsum((x, y), equation="ij,jk->ik")`` is
``log(einsum(equation, exp(x), exp(y)))``, the ``(logaddexp, add)``
contraction eager funsor computes. It runs as Pyro's ``torch_log`` einsum
backend does: each operand shifted by its maximum over the summed axes,
exponentiated, contracted by one ``einsum`` (a matrix product), and the log
of the result shifted back. Where that loses accuracy (a contracted entry
below ``tiny / eps`` of its dtype, where terms go subnormal or to 0: rows
some 670 nats apart in float64, 70 in float32), those entries are
computed again in log space, by a broadcast ``add`` and ``logsumexp``; an
entry that is ``-inf`` in log space is ``-inf`` either way. Shifts are constants to
differentiation, so gradients are eager funsor's.

One algorithm for every backend (:func:`logspace_einsum_with`), given the
backend's array functions (:class:`ArrayFunctions`); numpy's are here,
torch and jax register theirs with the op.

Example::

    >>> import numpy as np
    >>> x = np.array([[0.0, -800.0]])  # x's peak meets y's low: exp(-800)
    >>> y = np.array([[-800.0], [0.0]])  # underflows to 0 in float64
    >>> logspace_einsum((x, y), equation="ij,jk->ik").round(3)  # -800 + log 2
    array([[-799.307]])
"""

import math
import typing
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from funsor import ops
from funsor.domains import find_domain

from .shapes import find_domain_einsum


class ArrayFunctions(NamedTuple):
    """One backend's array functions :func:`logspace_einsum_with` needs."""

    einsum: Callable  # (equation, *arrays)
    matmul: Callable
    permute: Callable  # (x, axes)
    amax: Callable  # (x, axes) with kept dims
    logsumexp: Callable  # (x, axis)
    where: Callable  # (condition, x, y)
    isfinite: Callable
    exp: Callable
    log: Callable
    stop_gradient: Callable
    smallest_accurate: Callable  # x -> the least product kept (its dtype's)
    any: Callable  # whether any entry is true
    # (predicate, if_true, if_false): the call of one of the two functions
    # (jax: lax.cond; under torch.jit.trace, which records one path of a
    # Python branch: if_true, which is right either way)
    branch: Callable


class _Plan(NamedTuple):
    terms: tuple  # each operand's letters
    output: str
    summed: tuple  # per operand: the axes summed out
    # per operand: its shift's axes order (kept axes in output order, then
    # the summed ones; None: as they are) and, per output letter, the
    # operand's axis of that letter (None: a unit axis)
    shift_layouts: tuple
    full: str  # the output's letters, then the summed ones
    matmul: "_Matmul | None"


class _Matmul(NamedTuple):
    """Two operands contracted as a batched matmul: each permuted to
    ``(batch, free, summed)`` / ``(batch, summed, free)`` axes and reshaped
    to three, the product reshaped back and permuted to the output."""

    orders: tuple  # the two operands' axes orders
    counts: tuple  # (batch, x free, summed) numbers of axes
    to_output: tuple | None  # None: the identity


_PLANS = {}  # equation -> its _Plan (a dict: torch.compile traces through it)


def _plan(equation):
    plan = _PLANS.get(equation)
    if plan is None:
        plan = _PLANS.setdefault(equation, _make_plan(equation))
    return plan


def _make_plan(equation):
    inputs, output = equation.replace(" ", "").split("->")
    terms = tuple(inputs.split(","))
    if any("." in t for t in terms) or "." in output:
        raise NotImplementedError(f"logspace_einsum with an ellipsis: {equation!r}")
    summed_letters = "".join(
        sorted({c for t in terms for c in t} - set(output), key=inputs.index)
    )
    summed = tuple(tuple(i for i, c in enumerate(t) if c not in output) for t in terms)
    layouts = []
    for t, axes in zip(terms, summed):
        order = tuple(t.index(c) for c in output if c in t) + axes
        at = tuple(t.index(c) if c in t else None for c in output)
        layouts.append((None if order == tuple(range(len(t))) else order, at))
    return _Plan(
        terms,
        output,
        summed,
        tuple(layouts),
        output + summed_letters,
        _matmul_plan(terms, output),
    )


def _matmul_plan(terms, output):
    """``_Plan.matmul`` of an equation, where it is a batched matmul."""
    if len(terms) != 2 or any(len(set(t)) != len(t) for t in terms):
        return None
    x, y = terms
    batch = "".join(c for c in output if c in x and c in y)
    x_free = "".join(c for c in x if c not in y)
    y_free = "".join(c for c in y if c not in x)
    summed = "".join(c for c in x if c in y and c not in output)
    if any(c not in output for c in x_free + y_free):
        return None  # a letter summed within one operand
    orders = (
        tuple(x.index(c) for c in batch + x_free + summed),
        tuple(y.index(c) for c in batch + summed + y_free),
    )
    letters = batch + x_free + y_free
    to_output = tuple(letters.index(c) for c in output)
    identity = to_output == tuple(range(len(output)))
    counts = (len(batch), len(x_free), len(summed))
    return _Matmul(orders, counts, None if identity else to_output)


def _sizes(plan, operands):
    sizes = {}
    for letters, x in zip(plan.terms, operands):
        for c, n in zip(letters, x.shape):
            sizes[c] = max(sizes.get(c, 1), n)
    return sizes


def _laid_out(xp, x, letters, target, sizes):
    """``x`` (axes ``letters``) transposed to the order of ``target`` and
    given unit axes for ``target``'s letters it lacks, so it broadcasts."""
    order = tuple(letters.index(c) for c in target if c in letters)
    if order != tuple(range(len(letters))):
        x = xp.permute(x, order)
    return x.reshape(tuple(sizes[c] if c in letters else 1 for c in target))


def _contract(xp, plan, equation, operands):
    """``einsum(equation, *operands)``: two operands whose letters are each
    batch (in both and the output), free (in one and the output) or summed
    (in both, not the output) as one batched ``matmul`` (numpy's ``einsum``
    does not call BLAS), else the backend's ``einsum``."""
    if plan.matmul is None:
        return xp.einsum(equation, *operands)
    (x_order, y_order), (nb, nx, nk), to_output = plan.matmul
    x, y = xp.permute(operands[0], x_order), xp.permute(operands[1], y_order)
    xs, ys = tuple(x.shape), tuple(y.shape)
    if xs[:nb] != ys[:nb] or xs[nb + nx :] != ys[nb : nb + nk]:
        return xp.einsum(equation, *operands)  # sizes that broadcast
    batch, free, summed = xs[:nb], xs[nb : nb + nx], xs[nb + nx :]
    b, k = math.prod(batch), math.prod(summed)
    x = x.reshape((b, math.prod(free), k))
    y = y.reshape((b, k, math.prod(ys[nb + nk :])))
    result = xp.matmul(x, y).reshape(batch + free + ys[nb + nk :])
    return result if to_output is None else xp.permute(result, to_output)


def logspace_einsum_with(xp, operands, equation):
    """``log(einsum(equation, *exp(operands)))`` by shifted matrix products,
    entries that underflow recomputed in log space (module docstring)."""
    plan = _plan(equation)
    shifted, total_shift = [], None
    for x, axes, (order, at) in zip(operands, plan.summed, plan.shift_layouts):
        shift = xp.stop_gradient(xp.amax(x, axes) if axes else x)
        shift = xp.where(xp.isfinite(shift), shift, 0)  # all -inf (or inf, nan)
        shifted.append(xp.exp(x - shift))
        if order is not None:
            shift = xp.permute(shift, order)
        shift = shift.reshape(tuple(1 if i is None else x.shape[i] for i in at))
        total_shift = shift if total_shift is None else total_shift + shift
    product = _contract(xp, plan, equation, shifted)
    # (not min(product) < least: a NaN entry would hide the others)
    inaccurate = product < xp.smallest_accurate(product)

    def accurate():
        return xp.log(product) + total_shift

    def recomputed():  # the inaccurate entries in log space
        # 1 where inaccurate: its log and gradient stay finite, and unused
        fast = xp.log(xp.where(inaccurate, 1, product)) + total_shift
        return xp.where(inaccurate, _in_log_space(xp, plan, operands), fast)

    return xp.branch(xp.any(inaccurate), recomputed, accurate)


def _in_log_space(xp, plan, operands):
    """The contraction by a broadcast ``add`` and ``logsumexp``."""
    sizes, total = _sizes(plan, operands), None
    for x, letters in zip(operands, plan.terms):
        x = _laid_out(xp, x, letters, plan.full, sizes)
        total = x if total is None else total + x
    n = len(plan.full) - len(plan.output)
    total = total.reshape(tuple(total.shape[: len(plan.output)]) + (-1,))
    return xp.logsumexp(total, -1) if n else total[..., 0]


_SMALLEST_ACCURATE = {}  # numpy dtype -> the least product kept


def _numpy_smallest_accurate(x):
    least = _SMALLEST_ACCURATE.get(x.dtype)
    if least is None:
        info = np.finfo(x.dtype)
        least = _SMALLEST_ACCURATE.setdefault(x.dtype, info.tiny / info.eps)
    return least


def _numpy_logsumexp(x, axis):
    shift = np.amax(x, axis, keepdims=True)
    shift = np.where(np.isfinite(shift), shift, 0)
    with np.errstate(divide="ignore"):
        return np.log(np.sum(np.exp(x - shift), axis)) + np.squeeze(shift, axis)


def _numpy_branch(predicate, if_true, if_false):
    return if_true() if predicate else if_false()


def _numpy_log(x):
    with np.errstate(divide="ignore"):
        return np.log(x)


NUMPY_FUNCTIONS = ArrayFunctions(
    einsum=np.einsum,
    matmul=np.matmul,
    permute=np.transpose,
    amax=lambda x, axes: np.amax(x, axes, keepdims=True),
    logsumexp=_numpy_logsumexp,
    where=np.where,
    isfinite=np.isfinite,
    exp=np.exp,
    log=_numpy_log,
    stop_gradient=lambda x: x,
    smallest_accurate=_numpy_smallest_accurate,
    any=np.any,
    branch=_numpy_branch,
)


@ops.FinitaryOp.make(module_name="funsor_lowering.ops.logspace_einsum")
def logspace_einsum(operands, equation):
    """``log(einsum(equation, *exp(operands)))`` (module docstring)."""
    raise NotImplementedError(
        f"logspace_einsum of {tuple(type(x).__name__ for x in operands)}: "
        f"supported are numpy, torch and jax arrays"
    )


LogspaceEinsumOp = type(logspace_einsum)


@logspace_einsum.register(typing.Tuple[typing.Union[np.ndarray, np.generic], ...])  # noqa: UP006, UP007
def _numpy_logspace_einsum(operands, equation):
    return logspace_einsum_with(NUMPY_FUNCTIONS, operands, equation)


@find_domain.register(LogspaceEinsumOp)
def find_domain_logspace_einsum(op, domains):
    """``einsum``'s shape and dtype (:mod:`.shapes`' rule)."""
    return find_domain_einsum(op, domains)
