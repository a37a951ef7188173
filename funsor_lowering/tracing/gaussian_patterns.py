"""Ops-only eager patterns for funsor ``Gaussian`` s on concrete arrays.

funsor 0.4.8 computes Gaussians with array operators and indexing (``@``,
``x[..., None]``), which ``trace_function`` cannot record. While tracing,
:func:`interpret` evaluates Gaussian terms with :mod:`~funsor_lowering.
gaussian_algebra` instead (``funsor.ops`` only, equal results) and
:func:`make_gaussian` replaces funsor's ``Gaussian(...)`` constructor:

- construction from ``white_vec`` / ``prec_sqrt``, ``mean``, ``info_vec``,
  ``precision``, ``scale_tril`` or ``covariance`` (wide ``prec_sqrt``
  compressed as funsor does, when ``rank > 2 * dim``);
- ``Gaussian + Gaussian``; ``Cat`` of Gaussians (as ``sequential_sum_product``
  builds them);
- substitution: renaming, ``Bint`` inputs by constants, index tensors or
  slices, real inputs by values (conditioning; all of them: the
  log-density) or affine expressions of other real inputs;
- ``reduce(ops.logaddexp, ...)`` over real inputs (marginalization, the
  normalizer) and then ``Bint`` inputs; ``reduce(ops.add, ...)`` over
  ``Bint`` inputs (plates), also of ``Tensor + Gaussian`` sums;
- sampling (``Gaussian._sample``): reparametrized draws with live
  ``ops.randn``, or preconditioned (the noise a real sample input names);
- funsor's conversion of ``Normal`` / ``MultivariateNormal`` to Gaussians.

:func:`ops_only_gaussians` installs the replacements for the duration of a
trace. Anything else returns ``None`` (funsor's own patterns apply).
"""

import contextlib
import contextvars
import math
from collections import OrderedDict

from funsor import ops
from funsor.affine import affine_inputs, is_affine
from funsor.cnf import Contraction
from funsor.delta import Delta
from funsor.domains import Bint, Real, Reals
from funsor.gaussian import Gaussian
from funsor.interpretations import reflect
from funsor.interpreter import gensym
from funsor.registry import KeyedRegistry
from funsor.tensor import Tensor, get_default_prototype
from funsor.terms import (
    Binary,
    Cat,
    Funsor,
    FunsorMeta,
    Lambda,
    Number,
    Reduce,
    Slice,
    Subs,
    Variable,
)

from ..lowering.driver import Lowered
from ..lowering.layout import align_expanded
from ..ops import hooks
from ..ops.op_rules import OpRules
from . import gaussian_algebra as ga
from .rng_keys import draw_key

COMPRESSION_THRESHOLD = 2  # funsor's Gaussian.compression_threshold default

# Whether wide Gaussians compress by Cholesky (the caller knows their
# precisions are positive definite) rather than by QR, in this thread.
_FULL_RANK_COMPRESSION = contextvars.ContextVar("full_rank_compression", default=False)


@contextlib.contextmanager
def full_rank_compression():
    """While tracing in this context (this thread only), wide Gaussians
    compress by a Cholesky factor of their precision instead of a QR
    factorization (:func:`~funsor_lowering.tracing.gaussian_algebra.compress` with
    ``full_rank=True``): equal densities and samples at a fraction of the
    cost, for callers whose compressed precisions are positive definite
    (where one is singular the Cholesky factorization raises)."""
    token = _FULL_RANK_COMPRESSION.set(True)
    try:
        yield
    finally:
        _FULL_RANK_COMPRESSION.reset(token)


# This context's DrawLog (see recording_draws).
_DRAW_LOG = contextvars.ContextVar("funsor_lowering gaussian draws", default=None)


class DrawLog:
    """The reparametrized draws of :func:`_sample`, in order: ``(sampled
    real inputs -> domains, noise Tensor)``, the noise columns in the order
    of those inputs (flattened). Every draw takes ``prototype`` as its
    prototype (dtype and device), so that no draw keeps the values it was
    computed beside alive."""

    def __init__(self, prototype):
        self.prototype = prototype
        self.draws = []


@contextlib.contextmanager
def recording_draws(prototype):
    """A context (this thread only) in which :func:`_sample` lists its
    draws in a :class:`DrawLog`, which it yields."""
    log = DrawLog(prototype)
    token = _DRAW_LOG.set(log)
    try:
        yield log
    finally:
        _DRAW_LOG.reset(token)


class NamedGaussian:
    """A Gaussian's arrays with their inputs: ``Bint`` inputs are the leading
    batch axes (in order), real inputs the rows of ``prec_sqrt`` (in order,
    each flattened)."""

    def __init__(self, white_vec, prec_sqrt, inputs):
        self.white_vec, self.prec_sqrt = white_vec, prec_sqrt
        self.ints = OrderedDict((k, d) for k, d in inputs.items() if d.dtype != "real")
        self.reals = OrderedDict((k, d) for k, d in inputs.items() if d.dtype == "real")

    @staticmethod
    def of(gaussian):
        return NamedGaussian(gaussian.white_vec, gaussian.prec_sqrt, gaussian.inputs)

    @property
    def inputs(self):
        inputs = OrderedDict(self.ints)
        inputs.update(self.reals)
        return inputs

    def rows(self, name):
        """The ``slice`` of ``prec_sqrt`` rows of real input ``name``."""
        start = 0
        for k, d in self.reals.items():
            if k == name:
                return slice(start, start + d.num_elements)
            start += d.num_elements
        raise KeyError(name)

    def funsor(self):
        """The funsor ``Gaussian``, compressed as funsor's constructor does
        (then ``Gaussian + Tensor``)."""
        dim, rank = self.prec_sqrt.shape[-2:]
        if rank > COMPRESSION_THRESHOLD * dim:
            white_vec, prec_sqrt, shift = ga.compress(
                self.white_vec, self.prec_sqrt, _FULL_RANK_COMPRESSION.get()
            )
            compressed = NamedGaussian(white_vec, prec_sqrt, self.inputs)
            return compressed.funsor() + Tensor(shift, self.ints)
        # funsor's base constructor: goes through the active interpretation
        # (funsor's substitute relies on it), skipping GaussianMeta's conversions
        items = tuple(self.inputs.items())
        return FunsorMeta.__call__(Gaussian, self.white_vec, self.prec_sqrt, items)

    def aligned(self, ints, reals):
        """The arrays laid out for ``ints`` (batch, expanded) and ``reals``
        (rows; zero rows for reals this Gaussian lacks)."""
        white_vec = _align_batch(self.white_vec, self.ints, ints, 1)
        prec_sqrt = _align_batch(self.prec_sqrt, self.ints, ints, 2)
        if list(reals) == list(self.reals):
            return white_vec, prec_sqrt
        blocks = []
        for name, domain in reals.items():
            if name in self.reals:
                rows = (Ellipsis, self.rows(name), slice(None))
                blocks.append(ops.getslice(prec_sqrt, rows))
            else:
                shape = tuple(prec_sqrt.shape[:-2]) + (
                    domain.num_elements,
                    prec_sqrt.shape[-1],
                )
                blocks.append(ops.new_zeros(prec_sqrt, shape))
        return white_vec, ops.cat(tuple(blocks), -2)

    def reorder_reals(self, last, first=()):
        """The same Gaussian with the real inputs ``last`` moved to the end
        (and ``first`` to the front)."""
        reals = OrderedDict((k, self.reals[k]) for k in first)
        reals.update((k, d) for k, d in self.reals.items() if k not in last)
        reals.update((k, self.reals[k]) for k in last)
        white_vec, prec_sqrt = self.aligned(self.ints, reals)
        inputs = OrderedDict(self.ints)
        inputs.update(reals)
        return NamedGaussian(white_vec, prec_sqrt, inputs)


def _align_batch(data, old, new, event_rank):
    if list(old) == list(new) and all(old[k] == new[k] for k in new):
        return data
    event_shape = tuple(data.shape[len(data.shape) - event_rank :])
    lowered = Lowered(Tensor(data), OrderedDict(old))
    return align_expanded(lowered, OrderedDict(new), event_shape).data


def _union_ints(*gaussians_or_tensors):
    ints = OrderedDict()
    for g in gaussians_or_tensors:
        inputs = g.ints if isinstance(g, NamedGaussian) else g.inputs
        ints.update((k, d) for k, d in inputs.items() if d.dtype != "real")
    return ints


def _tensor_data(value, ints, event_shape, prototype):
    """A Tensor's (or Number's) data laid out for batch ``ints`` +
    ``event_shape``."""
    if isinstance(value, Number):
        data, inputs = ops.new_full(prototype, (), value.data), OrderedDict()
    else:
        data, inputs = value.data, OrderedDict(value.inputs)
    return _align_batch(data, inputs, ints, len(event_shape))


# ----------------------------------------------------------------- construct
def make_gaussian(
    cls,
    white_vec=None,
    prec_sqrt=None,
    inputs=None,
    *,
    mean=None,
    info_vec=None,
    precision=None,
    scale_tril=None,
    covariance=None,
):
    """``Gaussian(...)`` (funsor's constructor arguments) with ops only.
    Array arguments may also be given as ``Tensor`` s without inputs (as
    ``compile_function`` passes its keywords)."""
    if inputs is None:
        raise ValueError("Gaussian needs inputs")
    white_vec, prec_sqrt, mean, info_vec, precision, scale_tril, covariance = (
        _array_of(a)
        for a in (
            white_vec,
            prec_sqrt,
            mean,
            info_vec,
            precision,
            scale_tril,
            covariance,
        )
    )
    inputs = OrderedDict(inputs)
    if prec_sqrt is None and white_vec is not None:
        raise ValueError("Cannot specify white_vec without prec_sqrt")
    triangular = False
    if prec_sqrt is None:
        if precision is not None:
            prec_sqrt, triangular = ops.cholesky(precision), True
        elif covariance is not None:
            scale_tril = ops.cholesky(covariance)
        if scale_tril is not None:
            prec_sqrt = ga.transpose(ops.triangular_inv(scale_tril))
        if prec_sqrt is None:
            raise ValueError(
                "At least one of prec_sqrt, precision, scale_tril, or covariance "
                "must be specified"
            )
    if white_vec is None:
        if mean is not None:
            white_vec = ga.vecmat(mean, prec_sqrt)
        elif info_vec is not None:
            if not triangular:
                prec_sqrt = ops.cholesky(ga.precision(prec_sqrt))
            white_vec = ga.solve_tril(prec_sqrt, info_vec)
        else:
            raise ValueError(
                "At least one of white_vec, mean, or info_vec must be specified"
            )
    return NamedGaussian(white_vec, prec_sqrt, inputs).funsor()


def _array_of(value):
    if isinstance(value, Tensor) and not value.inputs:
        return value.data
    return value


# ----------------------------------------------------------------- patterns
# Term patterns, matched by funsor's type dispatch as funsor's own eager
# patterns are: (term class, argument types) -> the evaluation, or None.
_PATTERNS = KeyedRegistry(default=lambda *args: None)
_GAUSSIAN_SUM_TERMS = [Gaussian, Tensor, Number]  # variadic: any number of them


def interpret(cls, *args):
    """The ops-only evaluation of term ``cls(*args)``, or ``None``."""
    return _PATTERNS(cls, *args)


@_PATTERNS.register(Binary, ops.AddOp, Gaussian, Gaussian)
def _add_pattern(op, lhs, rhs):
    return add(lhs, rhs)


@_PATTERNS.register(Cat, str, tuple, str)
def _cat_pattern(name, parts, part_name):
    if all(_split_mixture(p) is not None for p in parts):
        return cat(name, parts, part_name)
    return None


@_PATTERNS.register(Subs, Gaussian, tuple)
def _subs_pattern(gaussian, subs):
    return substitute(gaussian, subs)


@_PATTERNS.register(Reduce, ops.Op, Gaussian, frozenset)
def _reduce_pattern(op, gaussian, reduced):
    return reduce(op, (gaussian,), reduced)


@_PATTERNS.register(
    Contraction, ops.AssociativeOp, ops.AddOp, frozenset, _GAUSSIAN_SUM_TERMS
)
def _contraction_pattern(red_op, bin_op, reduced, *terms):
    if any(isinstance(t, Gaussian) for t in terms):
        return reduce(red_op, terms, reduced)
    return None


@_PATTERNS.register(Contraction, ops.NullOp, ops.AddOp, frozenset, _GAUSSIAN_SUM_TERMS)
def _lazy_sum_pattern(red_op, bin_op, reduced, *terms):
    return None  # a lazy sum: nothing to compute


def add(lhs, rhs):
    lhs, rhs = NamedGaussian.of(lhs), NamedGaussian.of(rhs)
    ints = _union_ints(lhs, rhs)
    reals = OrderedDict(lhs.reals)
    reals.update(rhs.reals)
    lw, lp = lhs.aligned(ints, reals)
    rw, rp = rhs.aligned(ints, reals)
    white_vec = ops.cat((lw, rw), -1)
    prec_sqrt = ops.cat((lp, rp), -1)
    inputs = OrderedDict(ints)
    inputs.update(reals)
    return NamedGaussian(white_vec, prec_sqrt, inputs).funsor()


def _split_mixture(part):
    """``(tensor or None, gaussian)`` of a Gaussian or ``Tensor + Gaussian``."""
    if isinstance(part, Gaussian):
        return None, part
    if isinstance(part, Contraction):
        return _MIXTURES(Contraction, *part._ast_values)
    return None


# ``Tensor + Gaussian`` as funsor's normal form holds it
_MIXTURES = KeyedRegistry(default=lambda *args: None)


@_MIXTURES.register(
    Contraction, ops.NullOp, ops.AddOp, frozenset, tuple[Tensor, Gaussian]
)
def _tensor_plus_gaussian(red_op, bin_op, reduced, terms):
    return terms


@_MIXTURES.register(
    Contraction, ops.NullOp, ops.AddOp, frozenset, tuple[Gaussian, Tensor]
)
def _gaussian_plus_tensor(red_op, bin_op, reduced, terms):
    return terms[::-1]


def cat(name, parts, part_name):
    """``Cat(name, parts, part_name)`` of Gaussians (or ``Tensor + Gaussian``
    sums): the Gaussians concatenated along the ``part_name`` batch axis,
    ranks padded with zero columns; the Tensors concatenated as Tensors."""
    split = [_split_mixture(p) for p in parts]
    if any(t is not None for t, _ in split):
        tensors = []
        for t, g in split:  # each laid out over its part's part_name input
            t = Number(0.0) if t is None else t
            ints = OrderedDict([(part_name, g.inputs[part_name])])
            ints.update((k, d) for k, d in t.inputs.items() if k != part_name)
            data = _tensor_data(t, ints, (), g.white_vec)
            tensors.append(Tensor(data, ints))
        gaussians = cat(name, tuple(g for _, g in split), part_name)
        return gaussians + Cat(name, tuple(tensors), part_name)
    parts = [NamedGaussian.of(g) for _, g in split]
    others = OrderedDict()
    reals = OrderedDict()
    for p in parts:
        others.update((k, d) for k, d in p.ints.items() if k != part_name)
        reals.update(p.reals)
    white_vecs, prec_sqrts = [], []
    for p in parts:
        ints = OrderedDict([(part_name, p.ints[part_name])])
        ints.update(others)
        white_vec, prec_sqrt = p.aligned(ints, reals)
        white_vecs.append(white_vec)
        prec_sqrts.append(prec_sqrt)
    rank = max(w.shape[-1] for w in white_vecs)
    for i, (white_vec, prec_sqrt) in enumerate(zip(white_vecs, prec_sqrts)):
        pad = rank - white_vec.shape[-1]
        if pad:
            zeros = ops.new_zeros(white_vec, tuple(white_vec.shape[:-1]) + (pad,))
            white_vecs[i] = ops.cat((white_vec, zeros), -1)
            zeros = ops.new_zeros(prec_sqrt, tuple(prec_sqrt.shape[:-1]) + (pad,))
            prec_sqrts[i] = ops.cat((prec_sqrt, zeros), -1)
    white_vec = ops.cat(tuple(white_vecs), 0)
    prec_sqrt = ops.cat(tuple(prec_sqrts), 0)
    inputs = OrderedDict([(name, Bint[white_vec.shape[0]])])
    inputs.update(others)
    inputs.update(reals)
    return NamedGaussian(white_vec, prec_sqrt, inputs).funsor()


def substitute(gaussian, subs):
    subs = tuple((k, v) for k, v in subs if k in gaussian.inputs)
    if not subs:
        return gaussian
    g = NamedGaussian.of(gaussian)
    affine = [
        (k, v)
        for k, v in subs
        if not isinstance(v, (Tensor, Number, Slice, Variable))
        and is_affine(v)
        and affine_inputs(v)
    ]
    if affine:  # one at a time; the rest substitute into the result
        (name, value), rest = affine[0], tuple(kv for kv in subs if kv != affine[0])
        result = _substitute_affine(g, name, value)
        return Subs(result, rest) if rest else result
    renames = {k: v for k, v in subs if isinstance(v, Variable)}
    values = {k: v for k, v in subs if not isinstance(v, Variable)}
    if any(
        not isinstance(v, (Tensor, Number, Slice) if k in g.ints else (Tensor, Number))
        for k, v in values.items()
    ):
        return None  # lazy or affine substitution: funsor's own
    if renames:
        return _rename(g, renames, values)
    int_values = {k: v for k, v in values.items() if k in g.ints}
    if int_values:
        return _index_batch(g, int_values, values)
    return _condition(g, values)


def _rename(g, renames, values):
    """``g`` with inputs renamed (Variable substitutions), then ``values``
    substituted into the result."""
    if any(renames[k].output != g.inputs[k] for k in renames):
        return None
    inputs = OrderedDict(
        (renames.get(k, Variable(k, d)).name, d) for k, d in g.inputs.items()
    )
    if len(inputs) != len(g.inputs):
        raise ValueError("Variable substitution name conflict")
    g = NamedGaussian(g.white_vec, g.prec_sqrt, inputs)
    result = g.funsor()
    return Subs(result, tuple(values.items())) if values else result


def _index_batch(g, int_values, values):
    """``g``'s batch indexed by ``int_values`` (as Tensors, which the tracer
    evaluates with ops), then the other ``values`` substituted."""
    subs_items = tuple(int_values.items())
    white_vec = Subs(Tensor(g.white_vec, g.ints), subs_items)
    prec_sqrt = Subs(Tensor(g.prec_sqrt, g.ints), subs_items)
    white_vec, prec_sqrt = _broadcast_pair(white_vec, prec_sqrt, g.white_vec)
    inputs = OrderedDict(
        (k, d) for k, d in white_vec.inputs.items() if d.dtype != "real"
    )
    inputs.update(g.reals)
    g = NamedGaussian(white_vec.data, prec_sqrt.data, inputs)
    rest = tuple((k, v) for k, v in values.items() if k not in int_values)
    result = g.funsor()
    return Subs(result, rest) if rest else result


def _condition(g, values):
    """``g`` conditioned on the real ``values`` (all of them: its
    log-density)."""
    names = [k for k in g.reals if k in values]
    g = g.reorder_reals(names)
    ints = _union_ints(g, *values.values())
    white_vec, prec_sqrt = g.aligned(ints, g.reals)
    flat = [
        ops.ReshapeOp(shape=tuple(d.size for d in ints.values()) + (-1,))(
            _tensor_data(values[k], ints, g.reals[k].shape, g.white_vec)
        )
        for k in names
    ]
    value = flat[0] if len(flat) == 1 else ops.cat(tuple(flat), -1)
    kept_dim = sum(d.num_elements for k, d in g.reals.items() if k not in values)
    if kept_dim == 0:
        log_density = ga.log_density(white_vec, prec_sqrt, value)
        return Tensor(log_density, ints)
    white_vec, prec_sqrt = ga.condition(
        white_vec, prec_sqrt, value, slice(kept_dim, None)
    )
    inputs = OrderedDict(ints)
    inputs.update((k, d) for k, d in g.reals.items() if k not in values)
    return NamedGaussian(white_vec, prec_sqrt, inputs).funsor()


def affine_parts(value):
    """``(const, coeffs)`` of a funsor affine in some real inputs, with
    ``funsor.ops`` only: ``const`` is ``value`` at zero, ``coeffs[y]`` a
    Tensor of shape ``y.shape + value.shape`` (evaluated at basis vectors)."""
    prototype = get_default_prototype()
    names = affine_inputs(value)
    inputs = OrderedDict((k, d) for k, d in value.inputs.items() if k in names)
    zeros = {k: Tensor(ops.new_zeros(prototype, d.shape)) for k, d in inputs.items()}
    const = value(**zeros)
    coeffs = OrderedDict()
    for k, d in inputs.items():
        n = d.num_elements
        basis = ops.ReshapeOp(shape=(n,) + d.shape)(ops.new_eye(prototype, (n,)))
        probe = Variable(f"_{k}_probe", Bint[n])
        at_basis = value(**dict(zeros, **{k: Tensor(basis)[probe]}))
        coeff = Lambda(probe, at_basis - const)
        coeffs[k] = coeff.reshape(d.shape + const.shape)
    return const, coeffs


def _substitute_affine(g, name, value):
    """Substitute real input ``name`` by ``const + sum_y y @ coeff_y``:
    ``x P - w`` gains rows ``coeff_y @ P_name`` for each ``y`` and ``w``
    loses ``const @ P_name``."""
    const, coeffs = affine_parts(value)
    if not isinstance(const, Tensor) or not all(
        isinstance(c, Tensor) for c in coeffs.values()
    ):
        return _lazy_subs(g, name, value)
    g = g.reorder_reals([name])
    ints = _union_ints(g, const, *coeffs.values())
    white_vec, prec_sqrt = g.aligned(ints, g.reals)
    batch = tuple(d.size for d in ints.values())
    size = g.reals[name].num_elements
    block = ops.getslice(prec_sqrt, (Ellipsis, g.rows(name), slice(None)))
    flat_const = ops.ReshapeOp(shape=batch + (size,))(
        _tensor_data(const, ints, const.output.shape, white_vec)
    )
    white_vec = ops.sub(white_vec, ga.vecmat(flat_const, block))
    reals = OrderedDict((k, d) for k, d in g.reals.items() if k != name)
    rows = {
        k: ops.getslice(prec_sqrt, (Ellipsis, g.rows(k), slice(None))) for k in reals
    }
    for y, coeff in coeffs.items():
        y_domain = value.inputs[y]
        matrix = ops.ReshapeOp(shape=batch + (y_domain.num_elements, size))(
            _tensor_data(coeff, ints, coeff.output.shape, white_vec)
        )
        extra = ga.matmul(matrix, block)
        rows[y] = ops.add(rows[y], extra) if y in rows else extra
        reals.setdefault(y, y_domain)
    prec_sqrt = ops.cat(tuple(rows[k] for k in reals), -2)
    inputs = OrderedDict(ints)
    inputs.update(reals)
    return NamedGaussian(white_vec, prec_sqrt, inputs).funsor()


def _lazy_subs(g, name, value):
    return reflect.interpret(Subs, g.funsor(), ((name, value),))


def _broadcast_pair(white_vec, prec_sqrt, prototype):
    """Two Tensors laid out over the union of their inputs."""
    ints = _union_ints(white_vec, prec_sqrt)
    return tuple(
        Tensor(_tensor_data(t, ints, t.output.shape, prototype), ints)
        for t in (white_vec, prec_sqrt)
    )


def reduce(op, terms, reduced):
    """``reduce(op, sum of terms, reduced)`` for Gaussian, Tensor and Number
    terms; ``None`` where funsor leaves it lazy (mixtures)."""
    names = {v.name if isinstance(v, Variable) else v for v in reduced}
    gaussians = [t for t in terms if isinstance(t, Gaussian)]
    others = [t for t in terms if not isinstance(t, Gaussian)]
    gaussian = gaussians[0]
    for g in gaussians[1:]:
        gaussian = add(gaussian, g)
        if not isinstance(gaussian, Gaussian):  # compressed: Gaussian + Tensor
            parts = gaussian.terms
            others += [t for t in parts if not isinstance(t, Gaussian)]
            (gaussian,) = [t for t in parts if isinstance(t, Gaussian)]
    g = NamedGaussian.of(gaussian)
    real_names = [k for k in g.reals if k in names]
    int_names = [k for k in names if k not in g.reals]
    reduction = _REDUCTIONS.rule(op)
    if reduction is None:
        return None
    return reduction(op, g, others, real_names, int_names)


# How a sum of a Gaussian and ``others`` reduces over its real and integer
# inputs, per reduction op (``logaddexp`` and its subclass ``sample``;
# funsor leaves the rest lazy).
_REDUCTIONS = OpRules("Gaussian reduction")


@_REDUCTIONS.register(ops.AddOp)
def _product_over_plates(op, g, others, real_names, int_names):
    if real_names or others:
        return None
    return _plate(g, [k for k in g.ints if k in int_names])


@_REDUCTIONS.register(ops.LogaddexpOp)
def _integrate(op, g, others, real_names, int_names):
    if any(k in g.ints for k in int_names) and len(real_names) < len(g.reals):
        return None  # a mixture of Gaussians: funsor keeps it lazy
    if not real_names:
        return None
    kept_dim = sum(d.num_elements for k, d in g.reals.items() if k not in real_names)
    if kept_dim == 0:
        result = Tensor(ga.log_normalizer(g.white_vec, g.prec_sqrt), g.ints)
    else:
        result = _marginal(g, real_names)
    for other in others:
        result = result + other
    remaining = frozenset(k for k in int_names if k in result.inputs)
    return result.reduce(op, remaining) if remaining else result


def _marginal(g, names):
    """``g`` with its real inputs ``names`` integrated out (not all of
    them), as funsor's ``Gaussian + Tensor``.

    Where ``g``'s rank covers all its real inputs, by one QR factorization
    of ``g`` (:func:`~funsor_lowering.tracing.gaussian_algebra.marginalize_compressed`):
    the marginal comes compressed (rank = its dimension), where funsor
    factors the dropped block, projects the kept rows and compresses only
    when the rank exceeds twice the dimension. The same distribution (equal
    densities, normalizers and draws) in another square-root basis: later
    joins stay narrow, so fewer compressions follow (a Kalman filter's
    program: a quarter fewer operations). Compressing by Cholesky factors
    (:func:`full_rank_compression`, and on funsor terms) needs the whole
    precision positive definite, not only the dropped block's: only where
    funsor compresses the marginal too (then both are)."""
    kept = OrderedDict((k, d) for k, d in g.reals.items() if k not in names)
    kept_dim = sum(d.num_elements for d in kept.values())
    dim, rank = g.prec_sqrt.shape[-2:]
    inputs = OrderedDict(g.ints)
    inputs.update(kept)
    by_cholesky = _FULL_RANK_COMPRESSION.get() or isinstance(g.prec_sqrt, Funsor)
    compressed = rank > COMPRESSION_THRESHOLD * kept_dim
    if rank >= dim and (compressed or not by_cholesky):
        g = g.reorder_reals((), first=names)
        white_vec, prec_sqrt, constant = ga.marginalize_compressed(
            g.white_vec, g.prec_sqrt, dim - kept_dim, by_cholesky
        )
    else:
        g = g.reorder_reals(names)
        white_vec, prec_sqrt, constant = ga.marginalize(
            g.white_vec, g.prec_sqrt, slice(kept_dim, None)
        )
    return NamedGaussian(white_vec, prec_sqrt, inputs).funsor() + Tensor(
        constant, g.ints
    )


def _plate(g, names):
    """``reduce(ops.add, g, names)`` over ``Bint`` inputs: the product of
    the Gaussians along them, their ranks concatenated."""
    if not names:
        return g.funsor()
    kept = OrderedDict((k, d) for k, d in g.ints.items() if k not in names)
    order = list(kept) + names
    ints = OrderedDict((k, g.ints[k]) for k in order)
    white_vec, prec_sqrt = g.aligned(ints, g.reals)
    nk, nr = len(kept), len(names)
    batch = tuple(d.size for d in kept.values())
    rank = white_vec.shape[-1] * math.prod(g.ints[k].size for k in names)
    white_vec = ops.ReshapeOp(shape=batch + (rank,))(white_vec)
    # prec_sqrt: (kept, reduced, dim, rank) -> (kept, dim, reduced, rank)
    dims = tuple(range(nk)) + (nk + nr,) + tuple(range(nk, nk + nr)) + (nk + nr + 1,)
    prec_sqrt = ops.permute(prec_sqrt, dims)
    dim = prec_sqrt.shape[nk]
    prec_sqrt = ops.ReshapeOp(shape=batch + (dim, rank))(prec_sqrt)
    inputs = OrderedDict(kept)
    inputs.update(g.reals)
    return NamedGaussian(white_vec, prec_sqrt, inputs).funsor()


# funsor calls these Gaussian methods directly (substitute, eager Reduce);
# while tracing they are replaced by the ops-only versions below.


def _eager_subs(self, subs):
    result = substitute(self, subs)
    return (
        hooks.original("Gaussian.eager_subs")(self, subs) if result is None else result
    )


def _eager_reduce(self, op, reduced_vars):
    result = reduce(op, (self,), reduced_vars)
    if result is None:
        return hooks.original("Gaussian.eager_reduce")(self, op, reduced_vars)
    return result


def _sample(self, sampled_vars, sample_inputs, rng_key):
    """``Gaussian._sample`` with ``funsor.ops``, funsor's draw for the same
    noise: the sampled real inputs ``a`` get ``Delta`` s at
    ``La⁻ᵀ(La⁻¹ Pa (w - xb Pb) + noise)`` (lazy in the remaining reals
    ``xb``; ``La = chol(Pa Paᵀ)``), and the marginal over the remaining ones
    (the log normalizer if none) is kept. The noise is drawn with
    ``ops.randn`` (live: fresh per program call) over Bint sample inputs, or
    is the white-noise variable a real sample input names (preconditioning).
    """

    sampled = frozenset(sampled_vars).intersection(self.inputs)
    if not sampled:
        return self
    g = NamedGaussian.of(self)
    if any(k in g.ints for k in sampled):
        return hooks.original("Gaussian._sample")(
            self, sampled_vars, sample_inputs, rng_key
        )
    names = [k for k in g.reals if k in sampled]
    g = g.reorder_reals(names)
    kept = OrderedDict((k, d) for k, d in g.reals.items() if k not in sampled)
    kept_dim = sum(d.num_elements for d in kept.values())
    rows = slice(kept_dim, None)
    w, P, ints = g.white_vec, g.prec_sqrt, g.ints
    block = ops.getslice(P, (Ellipsis, rows, slice(None)))
    chol = ops.cholesky(ga.precision(block))
    if kept:
        result = _marginal(g, names)
        flat = [Variable(k, d).reshape((d.num_elements,)) for k, d in kept.items()]
        flat = flat[0] if len(flat) == 1 else ops.cat(tuple(flat), -1)
        kept_block = ops.getslice(P, (Ellipsis, slice(0, kept_dim), slice(None)))
        w_a = Tensor(w, ints) - flat @ Tensor(kept_block, ints)
        info = Tensor(block, ints) @ w_a
    else:
        result = Tensor(ga.log_normalizer(w, P), ints)
        info = Tensor(ga.info_vec(w, block), ints)
    whitened = ga.solve_tril(Tensor(chol, ints), info)
    sample_inputs = OrderedDict(
        (k, d) for k, d in sample_inputs.items() if k not in self.inputs
    )
    noise = _noise(g, names, sample_inputs, chol, rng_key)
    point = ga.solve_tril(Tensor(chol, ints), noise + whitened, transposed=True)
    offset = 0
    for name in names:
        domain = g.reals[name]
        part = point[offset : offset + domain.num_elements].reshape(domain.shape)
        offset += domain.num_elements
        result = result + Delta(name, part)
    return result


def _noise(g, names, sample_inputs, chol, rng_key):
    """The standard normal noise of a draw of ``g``'s reals ``names``: the
    white-noise variable a real sample input names (preconditioning), else
    ``ops.randn`` over the Bint sample inputs and ``g``'s batch."""
    ints = g.ints
    if [d.dtype for d in sample_inputs.values()] == ["real"]:
        ((name, domain),) = sample_inputs.items()
        return Variable(name, domain)[tuple(ints)]
    shape = tuple(d.size for d in sample_inputs.values())
    shape += tuple(d.size for d in ints.values()) + (chol.shape[-1],)
    key = draw_key(rng_key)
    log = _DRAW_LOG.get()
    prototype = g.white_vec if log is None else log.prototype
    if key is None:
        draw = ops.randn(prototype, shape)
    else:
        draw = ops.randn(prototype, shape, key)
    noise_inputs = OrderedDict(sample_inputs)
    noise_inputs.update(ints)
    noise = Tensor(draw, noise_inputs)
    if log is not None:
        log.draws.append((OrderedDict((k, g.reals[k]) for k in names), noise))
    return noise


def _eager_add(op, lhs, rhs):
    return add(lhs, rhs)


def _eager_normal(loc, scale, value):
    """Normal(value; loc, scale) as funsor's eager does: a Gaussian in the
    fresh variable ``u = value - loc`` (white_vec 0, prec_sqrt 1/scale)
    plus ``-log(2 pi)/2 - log(scale)``, substituted affinely; with ops."""
    if not is_affine(loc) or not is_affine(value):
        return None
    data = scale.data
    white_vec = ops.new_zeros(data, tuple(data.shape) + (1,))
    prec_sqrt = ops.unsqueeze(ops.unsqueeze(ops.reciprocal(data), -1), -1)
    return _standard_form(
        loc,
        value,
        scale.inputs,
        Real,
        white_vec,
        prec_sqrt,
        (-0.5 * math.log(2 * math.pi) - ops.log(scale)),
    )


def _eager_mvn(loc, scale_tril, value):
    """MultivariateNormal as a Gaussian: prec_sqrt ``L⁻ᵀ``, white_vec 0,
    plus ``-d/2 log(2 pi) - sum(log(diag(L)))``; with ops."""
    if not is_affine(loc) or not is_affine(value):
        return None
    data = scale_tril.data
    dim = data.shape[-1]
    white_vec = ops.new_zeros(data, tuple(data.shape[:-1]))
    prec_sqrt = ga.transpose(ops.triangular_inv(data))
    diag = Tensor(ops.diagonal(data, -1, -2), scale_tril.inputs)
    constant = -0.5 * dim * math.log(2 * math.pi) - ops.log(diag).sum()
    return _standard_form(
        loc, value, scale_tril.inputs, Reals[dim], white_vec, prec_sqrt, constant
    )


def _standard_form(loc, value, inputs, domain, white_vec, prec_sqrt, constant):
    inputs = OrderedDict(inputs)
    name = gensym("value")
    inputs[name] = domain
    gaussian = constant + NamedGaussian(white_vec, prec_sqrt, inputs).funsor()
    return gaussian(**{name: value - loc})


def ops_only_gaussians():
    """Hook replacements (:mod:`funsor_lowering.funsor_hooks`) under which funsor's
    Gaussian constructor, ``+``, ``eager_subs``, ``eager_reduce``, sampling
    and Normal / MVN conversion compute with ``funsor.ops`` only."""
    return {
        "GaussianMeta.__call__": make_gaussian,
        # funsor's Contraction patterns dispatch to this one directly
        "eager Gaussian + Gaussian": _eager_add,
        "Gaussian.eager_subs": _eager_subs,
        "Gaussian.eager_reduce": _eager_reduce,
        "Gaussian._sample": _sample,
        "distribution.eager_normal": _eager_normal,
        "distribution.eager_mvn": _eager_mvn,
    }


__all__ = [
    "NamedGaussian",
    "full_rank_compression",
    "interpret",
    "make_gaussian",
    "ops_only_gaussians",
]
