"""``trace_function``: run a function once on symbolic arrays
(:class:`~.symbolic.SymbolicArray`) and record every ``funsor.ops``
application, into an :class:`~funsor_lowering.OpProgram`.

Two things make the capture complete:

- :class:`OpRecorder` selects its ``funsor.ops.Op.__call__`` hook while
  tracing and records each outermost op application (op, parameters,
  arguments, result); on symbolic arguments the result's shape and dtype
  come from abstract evaluation (:mod:`.abstract`), nothing is computed;
- :class:`TracingInterpretation` evaluates funsor terms over ``Tensor`` s with
  the compiler's lowering rules, which compute through ``funsor.ops`` only,
  where funsor's eager patterns call the backend directly (opt_einsum with a
  backend string, ``.data`` indexing and reshaping).

A branch, conversion or backend call on a symbolic array raises
:class:`~.concretization.ConcretizationError`. An array that depends on no
input (a literal such as ``torch.tensor(0.5)``, or one computed outside
recorded ops from such arrays) is a constant: embedded in the program once,
by reference (never copied per call), as ``jax.jit`` and ``torch.fx`` embed
them. The strict mode ``allow_constants=False`` refuses them instead, with
an error naming the array.
Random ops (``ops.randn``) are recorded as operations, never as constants.

Example::

    >>> import numpy as np
    >>> from funsor import ops
    >>> def fn(a, x):
    ...     y = ops.exp(ops.matmul(a, x))
    ...     return {"y": y, "total": ops.sum(y)}
    >>> program = trace_function(fn, {"a": np.eye(2), "x": np.zeros(2)})
    >>> program(a=np.eye(2), x=np.ones(2))["total"]
    array(5.43656366)
"""

import contextlib
import numbers
from collections import OrderedDict

import funsor.cnf
import funsor.delta
from funsor import ops
from funsor.cnf import Contraction
from funsor.domains import Real
from funsor.gaussian import Gaussian
from funsor.interpretations import Interpretation, eager, normalize, reflect
from funsor.tensor import Tensor
from funsor.terms import Align, Funsor, Number, Slice, Subs, Tuple, Variable
from funsor.typing import get_origin
from funsor.util import get_backend, get_default_dtype

from ..backends import array_backend
from ..errors import UnsupportedTermError
from ..ir.editor import Editor
from ..ir.program import ValueType, value_type_of
from ..ir.structure import iter_leaves, iter_paths, map_leaves, path_suffix
from ..lowering import rules  # noqa: F401  (registers the lowering rules)
from ..lowering.driver import Lowerer
from ..lowering.gc_pause import gc_paused
from ..lowering.layout import align, union_batch
from ..lowering.sound_algebra import is_normal_contraction
from ..ops import hooks
from ..ops.concretization import backend_errors_named
from ..ops.extra_ops import (
    RANDOM_OP_TYPES,
    DistributionLogProbOp,
    DistributionSampleOp,
    RandnWithKeyOp,
    TupleItemOp,
    categorical_sample,
    flat_scatter,
)
from ..ops.op_rules import OpRules
from ..ops.symbolic import SymbolicArray, has_symbolic
from ..passes.pipeline import optimize
from ..runtime.codegen import bind_call
from ..runtime.entry import prepared
from . import constants, dense_ffbs, gaussian_patterns
from .abstract import abstract_result, stand_in_distribution
from .rng_keys import draw_key

RANDOM_OPS = RANDOM_OP_TYPES
# Ops whose first argument is a prototype: only its type and device matter.
PROTOTYPE_OPS = (
    ops.NewArangeOp,
    ops.NewZerosOp,
    ops.NewFullOp,
    ops.NewEyeOp,
    ops.RandnOp,
    ops.FullLikeOp,
)


class UntracedValueError(ValueError):
    """An output depends on an array that no recorded op produced."""


class Node:
    """A recorded value: an input leaf, an op result, or a constant."""

    __slots__ = ("value", "op", "args", "packed", "live", "tainted")

    def __init__(self, value, op=None, args=(), packed=False, live=False, tainted=None):
        self.value = value
        self.op = op
        self.args = args  # Nodes, or plain Python constants
        self.packed = packed
        self.live = live  # depends on an input or a random op
        # (array, op) where it depends on an array no recorded op produced
        self.tainted = tainted


class OpRecorder:
    """Records the outermost ``funsor.ops`` applications made while active
    (``with recorder:``; re-entrant). In ``recorder.symbolic_only()``, only
    those on symbolic arrays: code between recorded regions may compute on
    them, while other op calls run as usual."""

    def __init__(self, backend):
        self.backend = backend
        self.nodes = {}  # id(value) -> Node
        self.keep = []  # holds values so their ids stay unique
        self._depth = 0
        self._contexts = []

    def node(self, value):
        return self.nodes.get(id(value))

    def add(self, node):
        self.nodes[id(node.value)] = node
        self.keep.append(node.value)
        return node

    def constant(self, values):
        """``values`` (a numpy array) as a backend array, recorded as a
        constant (see :mod:`.constants`)."""
        return self.add(Node(self.backend.from_numpy(values))).value

    def __enter__(self):
        return self._enter(symbolic_only=False)

    @contextlib.contextmanager
    def symbolic_only(self):
        """A context recording op calls on symbolic arrays only."""
        self._enter(symbolic_only=True)
        try:
            yield self
        finally:
            self._contexts.pop().__exit__(None, None, None)

    def _enter(self, symbolic_only):
        original = hooks.original("Op.__call__")
        recorder = self

        def traced_call(op, *args, **kwargs):
            if recorder._depth or _on_funsors(args):
                # inside a recorded op; or an op on funsors, which builds a
                # term whose evaluation records its own ops
                return original(op, *args, **kwargs)
            symbolic = has_symbolic(args) or has_symbolic(tuple(kwargs.values()))
            if symbolic_only and not symbolic:
                return original(op, *args, **kwargs)
            adapt = _CALL_ADAPTERS.rule(op)
            if adapt is not None:
                op, args, kwargs = adapt(recorder, op, args, kwargs)
            recorder._depth += 1
            try:
                if symbolic:
                    result = abstract_result(
                        op, args, kwargs, recorder.backend, original
                    )
                elif isinstance(op, RANDOM_OPS):
                    # a draw the program makes: tracing takes none of the
                    # caller's random numbers
                    with recorder.backend.preserved_random_state():
                        result = original(op, *args, **kwargs)
                else:
                    result = original(op, *args, **kwargs)
            finally:
                recorder._depth -= 1
            return recorder.record(op, args, kwargs, result)

        context = contextlib.ExitStack()
        context.enter_context(hooks.replaced({"Op.__call__": traced_call}))
        context.enter_context(constants.recorded_by(self.constant))
        self._contexts.append(context)
        return self

    def __exit__(self, *args):
        return self._contexts.pop().__exit__(*args)

    def record(self, op, args, kwargs, result):
        """Record ``op(*args, **kwargs) == result``; returns the result."""
        cls = type(op)
        if not kwargs and len(args) == cls.arity:
            # operands only (most calls): the op's own parameters, no binding
            operands, params, canonical = list(args), dict(op.defaults), op
        else:
            operands, params, canonical = _bound_parameters(op, args, kwargs)
        if isinstance(op, ops.RandnOp) and self._is_array(params.get("rng_key")):
            # the key is data: an operand (a program input), not a parameter
            operands.append(params.pop("rng_key"))
            canonical = RandnWithKeyOp(shape=tuple(params["shape"]))
        packed = isinstance(op, ops.FinitaryOp)
        if packed:
            operands = list(operands[0])
        arg_nodes = [self.node(a) if self._is_array(a) else None for a in operands]
        arg_refs = [n if n is not None else a for n, a in zip(arg_nodes, operands)]
        # live: changes between calls, through an input, a random draw or
        # a captured value taking part in autograd (a parameter)
        live = isinstance(op, RANDOM_OPS) or any(
            n.live if n is not None else self.backend.requires_grad(a)
            for n, a in zip(arg_nodes, operands)
        )
        tainted = next(
            (n.tainted for n in arg_nodes if n is not None and n.tainted), None
        )
        for i, (n, a) in enumerate(zip(arg_nodes, operands)):
            if n is None and self._is_array(a) and tainted is None:
                if not (i == 0 and isinstance(op, PROTOTYPE_OPS)):
                    tainted = (a, canonical or op)
        for value in params.values():
            if self._is_array(value):  # data as a parameter
                node = self.node(value)
                if node is None and tainted is None:
                    tainted = (value, op)
                elif node is not None and node.live:
                    canonical, live = None, True  # cannot be replayed
        if isinstance(result, tuple) and result and all(map(self._is_array, result)):
            # an op with several outputs (qr, slogdet, eigh ...): the tuple is
            # a value, and each output a tuple_item of it
            whole = self.add(
                Node(result, canonical, tuple(arg_refs), packed, live, tainted)
            )
            items = tuple(map(self.backend.as_traceable, result))
            for index, item in enumerate(items):
                if self.node(item) is None:
                    op = TupleItemOp(index=index)
                    self.add(Node(item, op, (whole,), False, live, tainted))
            return items
        if isinstance(result, tuple) or not self._is_array(result):
            return result  # other tuples and non-arrays are not values
        result = self.backend.as_traceable(result)
        if self.node(result) is not None:
            return result  # the op returned a value it was given (jax's no-op reshape)
        self.add(Node(result, canonical, tuple(arg_refs), packed, live, tainted))
        return result

    def _is_array(self, value):
        return isinstance(value, SymbolicArray) or self.backend.is_array(value)


def _bound_parameters(op, args, kwargs):
    """``(operands, parameters, canonical op)`` of ``op(*args, **kwargs)``
    as funsor's ``Op.__call__`` binds them; the canonical op is ``None``
    where a parameter is unhashable (an array: no op to replay)."""
    cls = type(op)
    bound = bind_call(op, args, kwargs)
    names = list(cls.signature.parameters)
    params = {k: v for k, v in bound.arguments.items() if k in names[cls.arity :]}
    try:
        # lists (funsor passes permute's dims as one) replay as tuples
        canonical = cls(**{k: _as_tuples(v) for k, v in params.items()})
    except TypeError:
        canonical = None
    return list(bound.args[: cls.arity]), params, canonical


def _as_tuples(value):
    if isinstance(value, list):
        return tuple(_as_tuples(v) for v in value)
    return value


# Calls recorded otherwise than as made, per op type: a rule takes the
# recorder and the call ``(op, args, kwargs)`` and returns the call to record.
_CALL_ADAPTERS = OpRules("traced call")


@_CALL_ADAPTERS.register(ops.ScatterOp, ops.ScatterAddOp)
def _scatter_flattened(recorder, op, args, kwargs):
    """A scatter with its index arrays as operands."""
    flat = flat_scatter(op, args, kwargs, recorder._is_array)
    return (op, args, kwargs) if flat is None else (flat[0], (flat[1],), kwargs)


@_CALL_ADAPTERS.register(ops.RandnOp)
def _with_draw_key(recorder, op, args, kwargs):
    """``ops.randn``'s arguments with the key a keyed draw given none uses."""
    if not array_backend(get_backend()).keyed:
        return op, args, kwargs
    bound = bind_call(op, args, kwargs)
    if bound.arguments.get("rng_key") is None:
        bound.arguments["rng_key"] = draw_key(None)
    return op, bound.args, bound.kwargs


def _on_funsors(args):
    return any(
        isinstance(a, Funsor)
        or (isinstance(a, (tuple, list)) and any(isinstance(b, Funsor) for b in a))
        for a in args
    )


class TracingInterpretation(Interpretation):
    """Evaluates terms over Tensors with the lowering rules (which compute
    through ``funsor.ops`` only); everything else as funsor's eager."""

    is_total = True

    def __init__(self):
        super().__init__("tracing")

    # Terms that only name or hold values: funsor's eager builds them.
    LEAVES = (
        Tensor,
        Number,
        Variable,
        Slice,
        Tuple,
        Align,
        Gaussian,
        funsor.delta.Delta,
    )

    def interpret(self, cls, *args):
        result = gaussian_patterns.interpret(get_origin(cls), *args)
        if result is not None:
            return result
        if issubclass(get_origin(cls), self.LEAVES) or _has_free_variables(args):
            return eager.interpret(cls, *args)

        if get_origin(cls) is Contraction and not is_normal_contraction(args):
            # Arguments funsor's normal form rejects (a Contraction with no
            # reduced variables): funsor's normalize rewrites them, building
            # the parts through this interpretation.
            term = normalize.interpret(cls, *args)
            if isinstance(term, (Tensor, Number)) or _has_free_variables((term,)):
                return term
        else:
            term = reflect.interpret(cls, *args)
        result = evaluate_by_lowering(term)
        return eager.interpret(cls, *args) if result is None else result


def evaluate_by_lowering(term):
    """A term over Tensors evaluated by the lowering rules (``funsor.ops``
    only), as a Tensor or Number; ``None`` where no rule applies."""
    try:
        lowered = Lowerer(fold=False).lower(term)
    except (UnsupportedTermError, NotImplementedError):
        return None
    if not isinstance(getattr(lowered, "expr", None), (Tensor, Number)):
        return None
    # Inputs in the term's own order, as funsor's eager lays them out (the
    # lowering's internal layout must not show in .data). An exact
    # Approximate keeps only its model's inputs, hence the filter.
    order = tuple(n for n in term.inputs if n in lowered.batch)
    expr = align(lowered, order)
    if isinstance(expr, Number):
        return expr
    inputs = OrderedDict((n, lowered.batch[n]) for n in order)
    return Tensor(expr.data, inputs, term.output.dtype)


def traced_tensor_eager_subs(self, subs):
    """``Tensor.eager_subs`` while tracing (funsor's substitute calls it
    directly): through the lowering rules where they apply. Renamings (and
    the alpha-renaming building the term does) stay funsor's: no data."""
    values = [v for _, v in subs]
    if not all(isinstance(v, Variable) for v in values) and all(
        isinstance(v, (Tensor, Number, Slice, Variable)) for v in values
    ):
        # reflect: under another interpretation pushed by user code
        # (moment_matching), building Subs would evaluate it, calling here.
        result = evaluate_by_lowering(reflect.interpret(Subs, self, tuple(subs)))
        if result is not None:
            return result
    return hooks.original("Tensor.eager_subs")(self, subs)


def traced_delta_eager_subs(self, subs):
    """``Delta.eager_subs`` while tracing. Where every substituted value is
    the very point it replaces (funsor's backward sampling does this once
    per sampled Delta), funsor's ``log(all(point == point)) + log_density``
    (zero for points without NaN) is computed with four ops on the point's
    data, not through five funsor terms evaluated one by one."""
    values = dict(subs)
    substituted = [t for t in self.terms if t[0] in values]
    if not substituted or any(
        values[name] is not point
        or not isinstance(point, Tensor)
        or any(d.dtype == "real" for d in point.inputs.values())
        for name, (point, _) in substituted
    ):
        return hooks.original("Delta.eager_subs")(self, subs)
    log_densities = []
    for _, (point, log_density) in substituted:
        equal = ops.eq(point.data, point.data)
        event_rank = len(point.output.shape)
        if event_rank:
            equal = ops.all(equal, axis=tuple(range(-event_rank, 0)))
        log_equal = ops.log(ops.astype(equal, get_default_dtype()))
        log_densities.append(Tensor(log_equal, point.inputs) + log_density)
    total = log_densities[0]
    for term in log_densities[1:]:
        total = total + term
    kept = tuple(t for t in self.terms if t[0] not in values)
    return funsor.delta.Delta(kept) + total if kept else total


def traced_contract_tensors(reduced_vars, terms, backend):
    """funsor's eager contraction of Tensors while tracing (reached when an
    interpretation pushed by user code, such as ``moment_matching``, stands
    above tracing's): through the lowering rules, since funsor's einsum
    backends call backend functions on the data."""
    if backend in funsor.cnf.BACKEND_TO_EINSUM_BACKEND.values():
        red_op, bin_op = ops.add, ops.mul
    else:
        red_op, bin_op = ops.logaddexp, ops.add
    if not reduced_vars:
        red_op = ops.null  # a product only (funsor's normal form)
    term = reflect.interpret(
        Contraction, red_op, bin_op, frozenset(reduced_vars), tuple(terms)
    )
    result = evaluate_by_lowering(term)
    if result is None:
        return hooks.original("cnf._eager_contract_tensors")(
            reduced_vars, terms, backend
        )
    return result


def traced_eager_log_prob(cls, *params):
    """funsor's eager log density of a distribution over Tensors while
    tracing (reached when an interpretation pushed by user code, such as
    ``moment_matching``, stands above tracing's): through the lowering
    rules, since funsor's builds a backend distribution on the data."""
    result = evaluate_by_lowering(reflect.interpret(cls, *params))
    if result is None:
        return hooks.original("Distribution.eager_log_prob")(cls, *params)
    return result


def _has_free_variables(args):
    """Whether an argument is a lazy term with free inputs (a Variable, or a
    term over one); the named inputs of Tensors and Slices are data, not
    free variables."""
    for arg in args:
        if isinstance(arg, Funsor) and not isinstance(arg, (Tensor, Number, Slice)):
            if arg.inputs:
                return True
        if isinstance(arg, tuple) and _has_free_variables(arg):
            return True
    return False


def traced_distribution_sample(self, sampled_vars, sample_inputs, rng_key):
    """``Distribution._sample`` while tracing: the draw is one recorded random
    op on the parameters' data (funsor's own calls the backend sampler on
    them directly, outside ``funsor.ops``)."""
    from ..lowering.rules.distributions import parameter_operands

    value = self.value
    if not isinstance(value, Variable):
        return _traced_transformed_sample(self, sampled_vars, sample_inputs, rng_key)
    if value.name not in sampled_vars:
        return hooks.original("Distribution._sample")(
            self, sampled_vars, sample_inputs, rng_key
        )
    lowerer = Lowerer(fold=False)
    params = [lowerer.lower(p) for p in self._ast_values[:-1]]
    # the batch laid out as funsor's sampler lays it out (last input first,
    # its _get_raw_dist): draws from a global RNG (torch) are then the same
    # numbers as funsor's, in the same places
    batch = union_batch(*params)
    batch = OrderedDict((k, batch[k]) for k in reversed(self.inputs) if k in batch)
    names, exprs = parameter_operands(self, params, batch)
    operands = [e.data for e in exprs]
    key = draw_key(rng_key)
    keyed = key is not None
    event_rank = len(value.output.shape)
    op = DistributionSampleOp(
        dist_class=self.dist_class,
        names=names,
        event_rank=event_rank,
        sample_shape=tuple(d.size for d in sample_inputs.values()),
        keyed=keyed,
    )
    draw = op(tuple(operands) + ((key,) if keyed else ()))
    inputs = OrderedDict(sample_inputs)
    inputs.update(batch)
    point = Tensor(draw, inputs, value.output.dtype)
    # ... then aligned as funsor aligns its draw
    point = point.align(
        tuple(sample_inputs) + tuple(k for k in self.inputs if k in batch)
    )
    if _has_rsample(self.dist_class, names, operands, event_rank):
        return funsor.delta.Delta(value.name, point)
    # Score-function (DiCE) factor, as funsor's own sampler adds.
    log_prob = DistributionLogProbOp(
        dist_class=self.dist_class, names=names, event_rank=event_rank
    )(tuple(operands) + (draw,))
    dice = Tensor(ops.sub(log_prob, ops.detach(log_prob)), inputs)
    return funsor.delta.Delta(value.name, point, dice)


def _traced_transformed_sample(self, sampled_vars, sample_inputs, rng_key):
    """``Distribution._sample`` of a transformed value (funsor's form of a
    backend ``TransformedDistribution``: the base distribution over
    ``transform(value)``) while tracing: a draw from the base distribution,
    mapped through the inverse funsor solves for (ops such as ``exp`` and
    ``tanh``, or a backend transform recorded as one ``wrapped_transform``
    op), as funsor's sampler draws it: the same numbers."""
    base_name = "base_draw"
    while base_name in self.inputs:
        base_name = "_" + base_name
    try:
        name, point, _ = funsor.delta.solve(
            self.value, Variable(base_name, self.value.output)
        )
    except (ValueError, AssertionError):  # funsor's solve cannot invert it
        name = None
    if name is None or name not in sampled_vars:
        return hooks.original("Distribution._sample")(
            self, sampled_vars, sample_inputs, rng_key
        )
    base = reflect.interpret(
        type(self), *self._ast_values[:-1], Variable(base_name, self.value.output)
    )
    drawn = traced_distribution_sample(
        base, frozenset([base_name]), sample_inputs, rng_key
    )
    ((_, (base_point, dice)),) = drawn.terms
    return funsor.delta.Delta(name, point(**{base_name: base_point}), dice)


def _has_rsample(dist_class, names, operands, event_rank):
    """Whether the backend distribution reparametrizes its draws: a class
    attribute, else read from an instance built on stand-ins (it depends
    on which parameters the distribution has, not on their values)."""
    has_rsample = getattr(dist_class, "has_rsample", False)
    if isinstance(has_rsample, bool):
        return has_rsample
    backend = array_backend(get_backend())
    dist = stand_in_distribution(dist_class, names, operands, event_rank, backend)
    return dist.has_rsample


def traced_tensor_sample(self, sampled_vars, sample_inputs, rng_key):
    """``Tensor._sample`` while tracing (discrete sampling of a log-density
    over ``Bint`` inputs): funsor's draws with one recorded Categorical op
    on the aligned logits and computes the points and the log normalizer
    with ``funsor.ops``, where funsor's own works on ``.data`` directly."""
    sampled_vars = sampled_vars.intersection(self.inputs)
    if not sampled_vars or self.output != Real:
        return hooks.original("Tensor._sample")(
            self, sampled_vars, sample_inputs, rng_key
        )
    sample_inputs = OrderedDict(
        (k, d) for k, d in sample_inputs.items() if k not in self.inputs
    )
    batch_inputs = OrderedDict(
        (k, d) for k, d in self.inputs.items() if k not in sampled_vars
    )
    event_inputs = OrderedDict(
        (k, d) for k, d in self.inputs.items() if k in sampled_vars
    )
    order = [list(self.inputs).index(k) for k in [*batch_inputs, *event_inputs]]
    logits = self.data
    if order != sorted(order):
        logits = ops.permute(logits, tuple(order))
    batch_shape = tuple(d.size for d in batch_inputs.values())
    flat_logits = ops.ReshapeOp(shape=batch_shape + (-1,))(logits)
    sample_shape = tuple(d.size for d in sample_inputs.values())
    key = draw_key(rng_key)
    keyed = key is not None
    flat_sample = categorical_sample(
        (flat_logits,) + ((key,) if keyed else ()),
        sample_shape=sample_shape,
        keyed=keyed,
    )
    sb_inputs = OrderedDict(sample_inputs)
    sb_inputs.update(batch_inputs)
    results, rest = [], flat_sample
    for name, domain in reversed(event_inputs.items()):
        point = Tensor(ops.mod(rest, domain.size), sb_inputs, domain.size)
        rest = ops.floordiv(rest, domain.size)
        results.append(funsor.delta.Delta(name, point))
    if array_backend(get_backend()).keeps_gradients(flat_logits):
        # funsor's DiCE factor, to keep gradients: log|f| + f(x0) - detach(f(x0))
        size = flat_logits.shape[-1]
        arange = ops.new_arange(flat_logits, size)
        chosen = ops.add(ops.eq(ops.unsqueeze(flat_sample, -1), arange), 0.0)
        log_prob = ops.logsumexp(ops.add(flat_logits, ops.log(chosen)), -1)
        normalizer = ops.logsumexp(ops.detach(flat_logits), -1)
        dice = ops.add(normalizer, ops.sub(log_prob, ops.detach(log_prob)))
        results.append(Tensor(dice, sb_inputs))
    else:
        results.append(Tensor(ops.logsumexp(flat_logits, -1), batch_inputs))
    total = results[0]
    for term in results[1:]:
        total = total + term
    return total


@contextlib.contextmanager
def tracing_hooks(backend):
    """While tracing (see :mod:`funsor_lowering.funsor_hooks`): funsor's samplers
    record their draws as live ops, funsor's Gaussians compute with ops,
    and the backend routes its own calls (jax's key splitting) and its
    calls on captured values taking part in autograd through ops."""
    replacements = {
        "Distribution._sample": traced_distribution_sample,
        "Tensor._sample": traced_tensor_sample,
        "Tensor.eager_subs": traced_tensor_eager_subs,
        "Delta.eager_subs": traced_delta_eager_subs,
        "cnf._eager_contract_tensors": traced_contract_tensors,
        "Distribution.eager_log_prob": traced_eager_log_prob,
        **gaussian_patterns.ops_only_gaussians(),
        "recipes.forward_filter_backward_rsample": dense_ffbs.rsample_recipe,
        **backend.tracing_hooks(),
        **hooks.shape_rule_replacements(),
    }
    with hooks.replaced(replacements), backend.recording_backend_calls():
        yield


def trace_function(fn, kwargs, *, allow_constants=True):
    """Trace ``fn(**kwargs)`` into an :class:`OpProgram` taking and returning
    the same nesting (of tuples, lists and dicts). ``fn`` runs once, on
    symbolic arrays of the given arrays' shapes and dtypes (their values
    are never read): a Python branch or conversion on a value computed from
    them raises :class:`~.concretization.ConcretizationError`.

    :param dict kwargs: name -> backend array, or nesting of arrays.
    :param bool allow_constants: embed arrays that depend on no input
        (literals, arrays computed outside ``funsor.ops``) as constants
        (the default); ``False`` is the strict mode, which raises
        :class:`UntracedValueError` naming such an array instead.
    """
    if not isinstance(kwargs, dict):
        raise TypeError(f"trace_function expects a dict of inputs, got {kwargs!r}")
    backend = array_backend(get_backend())
    backend.activate()
    input_types = {}
    for name, value in kwargs.items():
        for path, leaf in iter_paths(value):
            if not backend.is_array(leaf):
                raise TypeError(
                    f"input {name!r}{path_suffix(path)}: expected a "
                    f"{backend.array_type_name}, got {type(leaf).__name__}"
                )
        input_types[name] = map_leaves(
            lambda a: ValueType(tuple(a.shape), backend.dtype_kind(a)), value
        )
    symbolic = map_leaves(lambda a: SymbolicArray(a.shape, a.dtype), kwargs)
    recorder = _recorder_of(backend, symbolic)
    with gc_paused():
        with tracing_hooks(backend), recorder, TracingInterpretation():
            with backend_errors_named():
                result = fn(**symbolic)
        program = _build_program(
            recorder, symbolic, input_types, result, allow_constants
        )
        # code generated on the example inputs (stand-ins may not satisfy it)
        return prepared(program, kwargs)


def _recorder_of(backend, inputs):
    """An :class:`OpRecorder` whose live values are the leaves of ``inputs``."""
    recorder = OpRecorder(backend)
    for value in inputs.values():
        for _, leaf in iter_paths(value):
            recorder.add(Node(leaf, live=True))
    return recorder


def _build_program(recorder, kwargs, input_types, result, allow_constants):
    builder = _ProgramBuilder(recorder, kwargs, input_types, allow_constants)
    # Operations run in the order they were recorded, as the function ran
    # them: random draws take the RNG's numbers in eager funsor's order.
    outputs = filter(None, map(builder.output_node, iter_leaves(result)))
    needed = _needed(outputs)
    for node in list(recorder.nodes.values()):
        if id(node) in needed and id(node) not in builder.number:
            builder.visit(node, "an output")
    return optimize(builder.editor.finish(map_leaves(builder.output, result)))


class _ProgramBuilder:
    """The recorded nodes a traced function's result needs, emitted into an
    editor's program (``number``: node id -> the program's ref)."""

    def __init__(self, recorder, kwargs, input_types, allow_constants):
        self.recorder, self.backend = recorder, recorder.backend
        self.allow_constants = allow_constants
        self.editor = Editor(input_types, get_backend())
        inputs = [
            recorder.node(leaf)
            for value in kwargs.values()
            for _, leaf in iter_paths(value)
        ]
        self.number = {id(node): self.editor.input(k) for k, node in enumerate(inputs)}

    def constant(self, value, where):
        """A captured array as a constant (held by reference)."""
        if self.backend.has_gradient_graph(value):
            raise _frozen_gradient(value, where)
        return self.editor.add_constant(value)

    def visit(self, root, where):
        """Emit every node ``root`` needs (iteratively, in topological order)."""
        stack = [(root, False)]
        while stack:
            node, done = stack.pop()
            if id(node) in self.number:
                continue
            self._check(node, where)
            if not node.live and not self.backend.requires_grad(node.value):
                # computed from constants only: a constant
                self.number[id(node)] = self.editor.add_constant(node.value)
                continue
            pending = [
                a for a in node.args if isinstance(a, Node) and id(a) not in self.number
            ]
            if pending and not done:
                stack.append((node, True))
                stack.extend((a, False) for a in pending)
                continue
            self.number[id(node)] = self._emit(node, where)

    def _check(self, node, where):
        if node.tainted is not None and not self.allow_constants:
            array, consumer = node.tainted
            raise _untraced(array, f"{where} (through {consumer!r})")
        if node.op is None and (node.live or self.backend.requires_grad(node.value)):
            raise NotImplementedError(
                f"{where} depends on a call of an op whose parameters are "
                f"computed arrays or unhashable values, which a program "
                f"cannot replay; pass such values as operands"
            )

    def _emit(self, node, where):
        prototype = isinstance(node.op, PROTOTYPE_OPS)
        args = [
            self.number[id(a)]
            if isinstance(a, Node)
            # a prototype is read for its dtype and device only
            else self.editor.add_constant(ops.detach(a))
            if prototype and i == 0
            else self.constant(a, where)
            for i, a in enumerate(node.args)
        ]
        value_type = value_type_of(node.value, self.backend)
        return self.editor.emit(node.op, args, node.packed, value_type)

    def output_node(self, value):
        if isinstance(value, Funsor):
            raise TypeError(
                f"trace_function: fn returned a funsor ({type(value).__name__}); "
                f"return arrays (e.g. its .data)"
            )
        return self.recorder.node(value) if self.recorder._is_array(value) else None

    def output(self, value):
        node = self.output_node(value)
        if node is None and isinstance(value, numbers.Number):
            return self.editor.add_constant(value)
        if node is None:
            if not self.allow_constants:
                raise _untraced(value, "an output")
            return self.constant(value, "an output")
        self.visit(node, "an output")
        return self.number[id(node)]


def _needed(roots):
    """Ids of the nodes ``roots`` depend on (them included)."""
    seen, stack = set(), list(roots)
    while stack:
        node = stack.pop()
        if id(node) not in seen:
            seen.add(id(node))
            stack.extend(a for a in node.args if isinstance(a, Node))
    return seen


def _untraced(value, where):
    shape = tuple(getattr(value, "shape", ()))
    dtype = getattr(value, "dtype", type(value).__name__)
    return UntracedValueError(
        f"{where} depends on an array (shape {shape}, dtype {dtype}) that was "
        f"computed outside recorded funsor.ops (e.g. by a backend call on "
        f"arrays), which the strict mode allow_constants=False refuses; compute "
        f"it with funsor.ops from the inputs, or drop allow_constants=False "
        f"to embed it as a constant"
    )


def _frozen_gradient(value, where):
    return UntracedValueError(
        f"{where} depends on a tensor (shape {tuple(value.shape)}, dtype "
        f"{value.dtype}) computed from tensors that require grad by backend "
        f"calls outside funsor.ops while tracing: a program would hold its "
        f"value and gradient graph from that one call, stale after the first "
        f"backward or optimizer step. Pass the tensors it is computed from as "
        f"arguments, or compute it from them with funsor.ops inside the "
        f"function (tensors that require grad captured as they are, such as "
        f"a module's parameters, are held by reference and stay live)"
    )
