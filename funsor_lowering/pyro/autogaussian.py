"""``AutoGaussian(model, backend="compiled")``: Pyro's funsor backend with its
Gaussian tensor variable elimination compiled once per model structure and
shape signature.

Pyro's ``AutoGaussianFunsor`` runs funsor's forward-filter backward-sample
recipes on every step. This backend traces the same recipe
(:func:`~funsor_lowering.trace_function`) into one program taking the
guide's ``white_vecs`` / ``prec_sqrts`` (and, below temperature 1, the
white noise) and returning the samples and their log density laid out for
Pyro's plates, caches it per particle plates and parameter shapes, and calls
it on each step. With equal parameters and random state it gives the funsor
backend's numbers: the program draws its noise with the same ``torch.randn``
calls, in the same order.

Where funsor compresses a wide Gaussian (the plate products of the guide's
factors) by a QR factorization, the program uses the Cholesky factor of its
precision (:func:`~funsor_lowering.tracing.gaussian_patterns.
full_rank_compression`): the same densities and samples (up to rounding),
several times cheaper. Should a compressed precision be singular on some
step (the Cholesky factorization raises), the guide compiles funsor's QR
recipe for that signature and reruns the step with it, from the same random
state.
"""

import contextlib
from collections import OrderedDict
from operator import attrgetter

import funsor
import pyro
import pyro.poutine as poutine
import torch
from funsor import ops
from funsor.tensor import Tensor
from pyro.infer.autoguide.gaussian import (
    AutoGaussianFunsor,
    _import_funsor,
    _try_possibly_intractable,
)
from pyro.poutine.runtime import am_i_wrapped, get_plates

from ..tracing.gaussian_patterns import full_rank_compression
from ..tracing.tracer import trace_function


class AutoGaussianCompiled(AutoGaussianFunsor):
    """Compiled implementation of :class:`~pyro.infer.autoguide.AutoGaussian`.

    The following are equivalent::

        guide = AutoGaussian(model, backend="compiled")
        guide = AutoGaussianCompiled(model)
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._compiled_programs = {}  # signature -> (program, aux shape or None)

    def _sample_aux_values(self, *, temperature: float):
        _import_funsor()
        # (plate sizes are tensors under torch.jit.trace)
        particle_plates = frozenset(f._replace(size=int(f.size)) for f in get_plates())
        plate_to_dim = self._funsor_plate_to_dim.copy()
        plate_to_dim.update({f.name: f.dim for f in particle_plates})
        params = self._gaussian_parameters()
        rsample = temperature == 1
        # Under torch.jit.trace (Pyro's JitTrace_ELBO) the graph recorded on
        # the first step runs every later step: it cannot fall back from
        # Cholesky to QR then, so traced steps take funsor's QR recipe,
        # which does not raise. Compiling runs outside the trace.
        jit_traced = torch.jit.is_tracing()
        with _outside_jit_trace():
            signature = (
                rsample,
                jit_traced,
                tuple((f.name, f.size, f.dim) for f in particle_plates),
                tuple((k, tuple(v.shape), v.dtype) for k, v in params.items()),
            )
            entry = self._compiled_programs.get(signature)
            if entry is None:
                # tracing runs on symbolic arrays: it draws nothing
                entry = self._compile(
                    particle_plates, plate_to_dim, params, rsample, not jit_traced
                )
                self._compiled_programs[signature] = entry
        program, aux_shape, full_rank = entry
        arrays = dict(params)
        if not rsample:
            sample_shape = torch.Size(f.size for f in particle_plates)
            noise = torch.randn(sample_shape + aux_shape)
            noise.mul_(temperature)
            arrays["noise"] = noise
        rng_state = torch.get_rng_state() if full_rank else None
        try:
            samples, log_prob = program(**arrays)
        except torch.linalg.LinAlgError:
            if not full_rank:
                raise
            # a singular compressed precision: funsor's QR recipe handles it
            entry = self._compile(
                particle_plates, plate_to_dim, params, rsample, full_rank=False
            )
            self._compiled_programs[signature] = entry
            torch.set_rng_state(rng_state)  # the same draws again
            samples, log_prob = entry[0](**arrays)
        if am_i_wrapped() and poutine.get_mask() is not False:
            pyro.factor(f"_{self._pyro_name}_latent", log_prob, has_rsample=True)
        return samples

    # ------------------------------------------------------------------
    def _gaussian_parameters(self):
        """The guide's Gaussian parameters, by program input name."""
        params = OrderedDict()
        for k, d in enumerate(self._funsor_factor_inputs):
            params[f"white_vec_{k}"] = attrgetter(d)(self.white_vecs)
            params[f"prec_sqrt_{k}"] = attrgetter(d)(self.prec_sqrts)
        return params

    def _gaussian_factors(self, params):
        """funsor Gaussian factors built from parameter arrays (with ops)."""
        factors = {}
        for k, (d, inputs) in enumerate(self._funsor_factor_inputs.items()):
            batch = tuple(p.size for p in sorted(self._plates[d], key=lambda p: p.dim))
            white_vec = params[f"white_vec_{k}"]
            prec_sqrt = params[f"prec_sqrt_{k}"]
            white_vec = ops.ReshapeOp(shape=batch + tuple(white_vec.shape[-1:]))(
                white_vec
            )
            prec_sqrt = ops.ReshapeOp(shape=batch + tuple(prec_sqrt.shape[-2:]))(
                prec_sqrt
            )
            factors[d] = funsor.gaussian.Gaussian(
                white_vec=white_vec, prec_sqrt=prec_sqrt, inputs=inputs
            )
        return factors

    def _compile(self, particle_plates, plate_to_dim, params, rsample, full_rank=True):
        """``(program, aux shape or None, full_rank)``: the recipe traced,
        its wide Gaussians compressed by Cholesky where ``full_rank``."""
        eliminate = self._funsor_eliminate
        plates = frozenset(plate_to_dim)
        sample_inputs = {f.name: funsor.Bint[f.size] for f in particle_plates}
        particle_names = tuple(f.name for f in particle_plates)

        def recipe(arrays):
            factors = self._gaussian_factors(arrays)
            if rsample:
                return funsor.recipes.forward_filter_backward_rsample(
                    factors=factors,
                    eliminate=eliminate,
                    plates=plates,
                    sample_inputs=sample_inputs,
                )
            return funsor.recipes.forward_filter_backward_precondition(
                factors=factors, eliminate=eliminate, plates=plates
            )

        def laid_out(samples, log_prob):
            samples = {k: to_plate_dims(v, plate_to_dim) for k, v in samples.items()}
            return samples, to_plate_dims(log_prob, plate_to_dim)

        examples = {k: v.detach() for k, v in params.items()}
        if rsample:

            def program_fn(**arrays):
                return laid_out(*recipe(arrays))

            program = _trace(program_fn, examples, full_rank)
            return program, None, full_rank

        # The white noise's shape is only known once the recipe has run.
        with torch.no_grad():
            _, log_prob = _try_possibly_intractable(recipe, examples)
        aux_shape = log_prob.inputs["aux"].shape

        def program_fn(noise, **arrays):
            samples, log_prob = recipe(arrays)
            aux = Tensor(noise)[particle_names] if particle_names else Tensor(noise)
            samples = {k: v(aux=aux) for k, v in samples.items()}
            return laid_out(samples, log_prob(aux=aux))

        sample_shape = tuple(f.size for f in particle_plates)
        examples["noise"] = torch.zeros(sample_shape + tuple(aux_shape))
        program = _trace(program_fn, examples, full_rank)
        return program, torch.Size(aux_shape), full_rank


@contextlib.contextmanager
def _outside_jit_trace():
    """Suspend a ``torch.jit.trace`` in progress (if any): ops run here are
    not recorded, shapes are Python ints, and an op that raises leaves the
    trace intact. (In torch 2.13 an exception raised by an op while tracing
    clears the tracer's state even when it is caught; the trace then
    crashes the interpreter when it collects its outputs.)"""
    state = torch._C._get_tracing_state()
    if state is None:
        yield
        return
    torch._C._set_tracing_state(None)
    try:
        yield
    finally:
        torch._C._set_tracing_state(state)


def _trace(program_fn, examples, full_rank):
    with full_rank_compression() if full_rank else contextlib.nullcontext():
        return _try_possibly_intractable(trace_function, program_fn, examples)


def to_plate_dims(value, name_to_dim):
    """A Tensor's data laid out as ``funsor.to_data(value, name_to_dim)``
    does (each named input at its plate dim, size 1 where absent), with
    ``funsor.ops`` only."""
    if not isinstance(value, Tensor):
        return funsor.to_data(value, name_to_dim=name_to_dim)
    names = sorted(value.inputs, key=lambda k: name_to_dim[k])
    data = value.data
    event = len(value.output.shape)
    order = [list(value.inputs).index(k) for k in names]
    order += list(range(len(value.inputs), len(value.inputs) + event))
    if order != sorted(order):
        data = ops.permute(data, tuple(order))
    if not names:
        return data
    rank = -min(name_to_dim[k] for k in names)
    shape = [1] * rank
    for k in names:
        shape[rank + name_to_dim[k]] = value.inputs[k].size
    shape = tuple(shape) + tuple(value.output.shape)
    return ops.ReshapeOp(shape=shape)(data)
