"""AutoGaussian(model, backend="compiled") against backend="funsor": with
equal parameters and random state, equal samples, log densities, medians
and gradients; the same error for intractable structures. torch only (Pyro)."""

import funsor
import pytest

if funsor.get_backend() != "torch":
    pytest.skip("Pyro runs on the torch backend", allow_module_level=True)

import pyro  # noqa: E402
import pyro.distributions as dist  # noqa: E402
import torch  # noqa: E402
from pyro import poutine  # noqa: E402
from pyro.infer import SVI, JitTrace_ELBO, Predictive, Trace_ELBO  # noqa: E402
from pyro.infer.autoguide import AutoGaussian  # noqa: E402
from pyro.optim import Adam  # noqa: E402

import funsor_lowering.pyro  # noqa: E402, F401  (registers backend="compiled")

from .helpers import assert_matches  # noqa: E402


def chain_model():
    a = pyro.sample("a", dist.Normal(0.0, 1.0))
    b = pyro.sample("b", dist.Normal(a, 1.0))
    c = pyro.sample("c", dist.Normal(b[..., None] * torch.ones(2), 1.0).to_event(1))
    pyro.sample("obs", dist.Normal(c, 1.0).to_event(1), obs=torch.tensor([0.5, -1.0]))


def plate_model():
    a = pyro.sample("a", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    s = pyro.sample("s", dist.LogNormal(0.0, 1.0))
    with pyro.plate("p", 3):
        b = pyro.sample("b", dist.Normal(a.sum(-1), s))
        pyro.sample("obs", dist.Normal(b, 1.0), obs=torch.tensor([0.0, 1.0, 2.0]))


def nested_model():
    a = pyro.sample("a", dist.Normal(0.0, 1.0))
    with pyro.plate("i", 2, dim=-1):
        b = pyro.sample("b", dist.Normal(a, 1.0))
        with pyro.plate("j", 3, dim=-2):
            c = pyro.sample("c", dist.Normal(b, 1.0))
            pyro.sample("obs", dist.Normal(c, 1.0), obs=torch.zeros(3, 2))


MODELS = [chain_model, plate_model, nested_model]


def guides(model, seed=0):
    """A funsor-backend and a compiled-backend guide with equal, perturbed
    parameters."""
    pyro.clear_param_store()
    reference = AutoGaussian(model, backend="funsor")
    compiled = AutoGaussian(model, backend="compiled")
    pyro.set_rng_seed(seed)
    reference()
    compiled()
    with torch.no_grad():
        for p in reference.parameters():
            p.add_(0.1 * torch.randn(p.shape))
    compiled.load_state_dict(reference.state_dict())
    return reference, compiled


def seeded(fn, seed=1):
    pyro.set_rng_seed(seed)
    return fn()


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_samples_and_log_density_equal_funsor_backend(model):
    reference, compiled = guides(model)
    for seed in (1, 2):  # the second call runs the cached program
        expected = seeded(lambda: poutine.trace(reference).get_trace(), seed)
        actual = seeded(lambda: poutine.trace(compiled).get_trace(), seed)
        names = [  # the latent sites (the guide's own factor site is named by it)
            n
            for n, s in expected.nodes.items()
            if s["type"] == "sample" and not n.startswith("_")
        ]
        assert names
        for name in names:
            assert_matches(
                actual.nodes[name]["value"], expected.nodes[name]["value"], rtol=1e-4
            )
        assert_matches(actual.log_prob_sum(), expected.log_prob_sum(), rtol=1e-4)
    assert len(compiled._compiled_programs) == 1


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_median_and_temperature_equal_funsor_backend(model):
    reference, compiled = guides(model)
    assert_matches(compiled.median(), reference.median(), rtol=1e-4, atol=1e-6)
    with poutine.mask(mask=False):
        expected = seeded(lambda: reference._sample_aux_values(temperature=0.5))
        actual = seeded(lambda: compiled._sample_aux_values(temperature=0.5))
    assert_matches(actual, expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_elbo_gradients_equal_funsor_backend(model):
    reference, compiled = guides(model)
    elbo = Trace_ELBO(num_particles=3, vectorize_particles=True, max_plate_nesting=2)

    def grads(guide):
        pyro.set_rng_seed(3)
        loss = elbo.differentiable_loss(model, guide)
        params = list(guide.parameters())
        return loss, torch.autograd.grad(loss, params)

    (loss_f, grads_f), (loss_c, grads_c) = grads(reference), grads(compiled)
    assert_matches(loss_c, loss_f, rtol=1e-4)
    for gc, gf in zip(grads_c, grads_f):
        assert_matches(gc, gf, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_jit_trace_elbo_losses_and_gradients_equal_funsor_backend(model):
    # Pyro's JitTrace_ELBO traces the first step and replays the trace after
    reference, compiled = guides(model)

    def steps(guide):
        elbo = JitTrace_ELBO(
            num_particles=3,
            vectorize_particles=True,
            max_plate_nesting=2,
            ignore_jit_warnings=True,
        )
        results = []
        for seed in (3, 4):
            guide.zero_grad()
            pyro.set_rng_seed(seed)
            loss = elbo.loss_and_grads(model, guide)
            results.append((loss, [p.grad.clone() for p in guide.parameters()]))
        return results

    for (loss_c, grads_c), (loss_f, grads_f) in zip(steps(compiled), steps(reference)):
        assert_matches(torch.tensor(loss_c), torch.tensor(loss_f), rtol=1e-4)
        for gc, gf in zip(grads_c, grads_f):
            assert_matches(gc, gf, rtol=1e-3, atol=1e-5)


def test_svi_and_predictive_run_and_recompile_for_new_particle_plates():
    _, guide = guides(plate_model)
    svi = SVI(plate_model, guide, Adam({"lr": 0.01}), Trace_ELBO())
    losses = [svi.step() for _ in range(5)]
    assert all(torch.isfinite(torch.tensor(losses)))
    samples = Predictive(plate_model, guide=guide, num_samples=4, parallel=True)()
    assert samples["b"].shape == (4, 3)
    assert len(guide._compiled_programs) >= 2  # plain steps and the particle plate


def test_intractable_structure_raises_like_funsor_backend():
    def model():  # a plated site feeds a global one: not monotone
        plate = pyro.plate("i", 2, dim=-1)
        with plate:
            a = pyro.sample("a", dist.Normal(0.0, 1.0))
        b = pyro.sample("b", dist.Normal(a.sum(-1), 1.0))
        with plate:
            pyro.sample("c", dist.Normal(b[..., None], 1.0), obs=torch.zeros(2))

    for backend in ("funsor", "compiled"):
        pyro.clear_param_store()
        guide = AutoGaussian(model, backend=backend)
        with pytest.raises(NotImplementedError, match="plate"):
            guide()


@pytest.mark.parametrize(
    "reparam, size",
    [(False, (2, 3, 4, 5)), (True, (2, 3, 4, 5)), (False, (5, 30, 50, 8))],
    ids=["plain", "reparam", "benchmark-large"],
)
def test_pyrocov_like_model_agrees_with_funsor_backend(reparam, size):
    # benchmark-large is the benchmark's large size (T, P, S, F), which
    # failed before a transpose of slices kept whole slices of the last axes
    from pyro.infer.reparam import LocScaleReparam

    from benchmarks.autogaussian import dataset, pyrocov_like_model

    data = dataset(*size)
    model = pyrocov_like_model
    if reparam:
        sites = ("coef", "rate_loc", "rate", "init_loc", "init")
        model = poutine.reparam(model, {s: LocScaleReparam() for s in sites})

    def bound():
        model(data)

    reference, compiled = guides(bound)
    expected = seeded(lambda: poutine.trace(reference).get_trace())
    actual = seeded(lambda: poutine.trace(compiled).get_trace())
    assert_matches(actual.log_prob_sum(), expected.log_prob_sum(), rtol=1e-4)
    for name in ("rate", "init", "coef"):
        site = next(n for n in expected.nodes if n.startswith(name))
        assert_matches(
            actual.nodes[site]["value"], expected.nodes[site]["value"], rtol=1e-4
        )
    svi = SVI(bound, compiled, Adam({"lr": 1e-6}), Trace_ELBO())
    assert torch.isfinite(torch.tensor(svi.step()))


def _plated_pyrocov_model():
    from benchmarks.autogaussian import dataset, pyrocov_like_model

    data = dataset(2, 3, 4, 5)

    def bound():
        pyrocov_like_model(data)

    return bound


def _op_names(program):
    return {type(operation.op).__name__ for operation in program.operations}


def test_plate_products_compress_by_cholesky_not_qr():
    reference, compiled = guides(_plated_pyrocov_model())
    expected = seeded(lambda: poutine.trace(reference).get_trace())
    actual = seeded(lambda: poutine.trace(compiled).get_trace())
    assert_matches(actual.log_prob_sum(), expected.log_prob_sum(), rtol=1e-4)
    ((program, _, full_rank),) = compiled._compiled_programs.values()
    assert full_rank
    assert "QrOp" not in _op_names(program)
    assert "CholeskyOp" in _op_names(program)


def test_singular_compressed_precision_falls_back_to_funsor_qr_recipe():
    # diagonal square roots: no factor informs the sites upstream of the
    # plates, so the plate products' precisions are singular (zero)
    reference, compiled = guides(_plated_pyrocov_model())
    with torch.no_grad():
        for name, p in reference.named_parameters():
            if "prec_sqrt" in name:
                diagonal = p.diagonal(dim1=-2, dim2=-1).clone()
                p.zero_()
                p.diagonal(dim1=-2, dim2=-1).copy_(diagonal)
    compiled.load_state_dict(reference.state_dict())
    for seed in (1, 2):  # the second call runs the QR program directly
        expected = seeded(lambda: poutine.trace(reference).get_trace(), seed)
        actual = seeded(lambda: poutine.trace(compiled).get_trace(), seed)
        assert_matches(actual.log_prob_sum(), expected.log_prob_sum(), rtol=1e-4)
        for name in ("rate", "init", "coef"):
            assert_matches(
                actual.nodes[name]["value"], expected.nodes[name]["value"], rtol=1e-4
            )
    with poutine.mask(mask=False):  # and the preconditioned program
        expected = seeded(lambda: reference._sample_aux_values(temperature=0.5))
        actual = seeded(lambda: compiled._sample_aux_values(temperature=0.5))
    assert_matches(actual, expected, rtol=1e-4, atol=1e-6)
    entries = list(compiled._compiled_programs.values())
    assert len(entries) == 2
    for program, _, full_rank in entries:
        assert not full_rank
        assert "QrOp" in _op_names(program)
