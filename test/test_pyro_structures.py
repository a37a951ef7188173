"""Pyro's AutoGaussian structure scenarios (the dependency structures of
Pyro's own ``tests/infer/autoguide/test_gaussian.py``, written here in our
own words): on ``backend="compiled"`` each behaves exactly as on
``backend="funsor"``. Where funsor's backend works, samples, log densities
and SVI losses are equal; where it raises, compiled raises the same error.
torch only (Pyro)."""

import contextlib

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
from pyro.infer.reparam import LocScaleReparam  # noqa: E402
from pyro.optim import ClippedAdam  # noqa: E402

import funsor_lowering.pyro  # noqa: E402, F401  (registers backend="compiled")

from .helpers import assert_matches  # noqa: E402
from .pyro_cov_models import (  # noqa: E402
    PYRO_COV_MODELS,
    PoissonGuide,
    fake_dataset,
    pyrocov_model,
    pyrocov_model_poisson,
)


def one_observed_latent():
    z = pyro.sample("z", dist.Normal(0.0, 1.0))
    pyro.sample("y", dist.Normal(z, 1.0), obs=torch.ones(()))


def latent_observed_in_a_plate():
    z = pyro.sample("z", dist.Normal(0.0, 1.0))
    with pyro.plate("n", 3):
        pyro.sample("y", dist.Normal(z, 1.0), obs=torch.ones(3))


def markov_chain_of_three():
    u = pyro.sample("u", dist.Normal(0.0, 1.0))
    v = pyro.sample("v", dist.Normal(u, 1.0))
    w = pyro.sample("w", dist.Normal(v, 1.0))
    pyro.sample("y", dist.Normal(w, 1.0), obs=torch.tensor(1.0))


def plated_chains():
    with pyro.plate("n", 2):
        u = pyro.sample("u", dist.Normal(0.0, 1.0))
        v = pyro.sample("v", dist.Normal(u, 1.0))
        w = pyro.sample("w", dist.Normal(v, 1.0))
        pyro.sample("y", dist.Normal(w, 1.0), obs=torch.tensor(1.0))


def global_then_plated_then_sum():
    g = pyro.sample("g", dist.Normal(0.0, 1.0))
    with pyro.plate("n", 2):
        u = pyro.sample("u", dist.Normal(g, 1.0))
        v = pyro.sample("v", dist.Normal(u, 1.0))
    pyro.sample("y", dist.Normal(v.sum(), 1.0), obs=torch.tensor(1.0))


def two_globals_scale_a_plate():
    loc = pyro.sample("loc", dist.Normal(0.0, 1.0))
    log_scale = pyro.sample("log_scale", dist.Normal(0.0, 1.0))
    with pyro.plate("n", 2):
        u = pyro.sample("u", dist.Normal(loc, log_scale.exp()))
        pyro.sample("y", dist.Normal(u, 1.0), obs=torch.tensor(1.0))


def _crossed_plate_latents():
    """Plates ``rows`` (2) and ``cols`` (3) crossing, a latent in each."""
    rows, cols = pyro.plate("rows", 2, dim=-1), pyro.plate("cols", 3, dim=-2)
    with rows:
        r = pyro.sample("r", dist.Normal(0.0, 1.0))
    with cols:
        c = pyro.sample("c", dist.Normal(0.0, 1.0))
    return rows, cols, r, c


def crossed_plates_coupled():
    rows, cols, r, c = _crossed_plate_latents()
    with rows, cols:
        u = pyro.sample("u", dist.Normal(r, c.exp()))
        pyro.sample("y", dist.Normal(1.0, 1.0), obs=u)


def plate_means_feed_globals():
    rows, cols = pyro.plate("rows", 2, dim=-1), pyro.plate("cols", 3, dim=-2)
    g = pyro.sample("g", dist.Normal(0.0, 1.0))
    with rows:
        r = pyro.sample("r", dist.Normal(g, 1.0))
    with cols:
        c = pyro.sample("c", dist.Normal(r.mean(), 1.0))
    h = pyro.sample("h", dist.Normal(c.mean(), 1.0))
    pyro.sample("y", dist.Normal(1.0, 1.0), obs=h)


def plated_latent_feeds_global_then_plate():
    rows = pyro.plate("rows", 2, dim=-1)
    with rows:
        r = pyro.sample("r", dist.Normal(0.0, 1.0))
    g = pyro.sample("g", dist.Normal(r.mean(-1), 1.0))
    with rows:
        pyro.sample("y", dist.Normal(g, 1.0), obs=torch.ones(2))


def plated_latent_feeds_observed_global():
    with pyro.plate("rows", 2):
        r = pyro.sample("r", dist.Normal(0.0, 1.0))
    pyro.sample("y", dist.Normal(r.mean(-1), 1.0), obs=torch.tensor(0.0))


def crossed_plates_sum():  # intractable: funsor's backend raises
    rows, cols, r, c = _crossed_plate_latents()
    with rows, cols:
        u = pyro.sample("u", dist.Normal(r + c, 1.0))
        pyro.sample("y", dist.Normal(u, 1.0), obs=torch.zeros(3, 2))


STRUCTURES = [
    one_observed_latent,
    latent_observed_in_a_plate,
    markov_chain_of_three,
    plated_chains,
    global_then_plated_then_sum,
    two_globals_scale_a_plate,
    crossed_plates_coupled,
    plate_means_feed_globals,
    plated_latent_feeds_global_then_plate,
    plated_latent_feeds_observed_global,
    crossed_plates_sum,
]


def _first_call(backend, model):
    pyro.clear_param_store()
    guide = AutoGaussian(model, backend=backend)
    pyro.set_rng_seed(0)
    try:
        guide()
    except NotImplementedError as error:
        return guide, error
    return guide, None


@pytest.mark.parametrize("model", STRUCTURES, ids=lambda m: m.__name__)
def test_structure_behaves_as_on_the_funsor_backend(model):
    reference, reference_error = _first_call("funsor", model)
    compiled, compiled_error = _first_call("compiled", model)
    if reference_error is not None:
        assert compiled_error is not None, "compiled worked where funsor raised"
        # funsor's own error; its message may show the term differently
        assert type(compiled_error) is type(reference_error)
        assert str(compiled_error).split("(")[0] == str(reference_error).split("(")[0]
        return
    assert compiled_error is None, compiled_error
    with torch.no_grad():
        for p in reference.parameters():
            p.add_(0.1 * torch.randn(p.shape))
    compiled.load_state_dict(reference.state_dict())
    for seed in (1, 2):
        pyro.set_rng_seed(seed)
        expected = poutine.trace(reference).get_trace()
        pyro.set_rng_seed(seed)
        actual = poutine.trace(compiled).get_trace()
        assert_matches(actual.log_prob_sum(), expected.log_prob_sum(), rtol=1e-4)
        for name, site in expected.nodes.items():
            if site["type"] == "sample" and not name.startswith("_"):
                assert_matches(
                    actual.nodes[name]["value"], site["value"], rtol=1e-4, atol=1e-6
                )
    for Elbo in (Trace_ELBO, JitTrace_ELBO):
        losses = {}
        for backend, guide in (("funsor", reference), ("compiled", compiled)):
            pyro.set_rng_seed(3)
            elbo = Elbo(ignore_jit_warnings=True)
            svi = SVI(model, guide, ClippedAdam({"lr": 1e-3}), elbo)
            losses[backend] = [svi.step() for _ in range(3)]
        assert_matches(
            torch.tensor(losses["compiled"]),
            torch.tensor(losses["funsor"]),
            rtol=1e-4,
            path=Elbo.__name__,
        )
    latents = {
        n
        for n, site in expected.nodes.items()
        if site["type"] == "sample"
        and not site["is_observed"]
        and not poutine.util.site_is_subsample(site)
        and not n.startswith("_")
    }
    samples = Predictive(model, guide=compiled, num_samples=2)()
    assert latents <= set(samples)


# ------------------------------------------------ Pyro's pyro-cov scenarios
# The four models and the two-part guide of Pyro's AutoGaussian tests, with
# their names, structure and dtypes (test/pyro_cov_models.py), trained as
# Pyro's smoke, reparam and profile tests train them, under Trace_ELBO and
# JitTrace_ELBO, in float32 (Pyro's default; the profile test in float64
# too). JitTrace_ELBO used to crash the interpreter here (a LinAlgError
# caught inside the jit trace).
@contextlib.contextmanager
def default_dtype(name):
    old = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, name))
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def _trained(model, Guide, backend, dataset, Elbo, steps=2):
    """``("losses", [...])`` of Pyro's test steps (ClippedAdam at lr 1e-8,
    ``max_plate_nesting=3``) after the guide's first call, then a
    Predictive; or ``("error", type, message)`` where the first call
    raises."""
    pyro.clear_param_store()
    guide = Guide(model, backend=backend)
    pyro.set_rng_seed(0)
    try:
        guide(dataset)
    except NotImplementedError as error:
        return ("error", type(error), str(error).split("(")[0])
    elbo = Elbo(max_plate_nesting=3, ignore_jit_warnings=True)
    svi = SVI(model, guide, ClippedAdam({"lr": 1e-8}), elbo)
    pyro.set_rng_seed(5)
    losses = [svi.step(dataset) for _ in range(steps)]
    Predictive(model, guide=guide, num_samples=2)(dataset)
    return ("losses", losses)


def assert_same_outcome(model, Guide, dataset, Elbo):
    dtype = str(torch.get_default_dtype()).split(".")[-1]
    outcomes = {
        backend: _trained(model, Guide, backend, dataset, Elbo)
        for backend in ("funsor", "compiled")
    }
    assert outcomes["compiled"][0] == outcomes["funsor"][0], outcomes
    if outcomes["funsor"][0] == "error":
        assert outcomes["compiled"] == outcomes["funsor"]
        return
    # the losses are sums of large terms: float32 rounds them at ~1e-5
    rtol = 2e-4 if dtype == "float32" else 1e-6
    assert_matches(
        torch.tensor(outcomes["compiled"][1]),
        torch.tensor(outcomes["funsor"][1]),
        rtol=rtol,
    )


ELBOS = [Trace_ELBO, JitTrace_ELBO]


@pytest.mark.parametrize("Elbo", ELBOS, ids=["trace", "jit"])
@pytest.mark.parametrize(
    "model, Guide", PYRO_COV_MODELS, ids=[m.__name__ for m, _ in PYRO_COV_MODELS]
)
def test_pyrocov_smoke_behaves_as_on_the_funsor_backend(model, Guide, Elbo):
    pyro.set_rng_seed(0)
    with default_dtype("float32"):
        dataset = fake_dataset(T=3, P=4, S=5, F=6)
        assert_same_outcome(model, Guide, dataset, Elbo)


@pytest.mark.parametrize("Elbo", ELBOS, ids=["trace", "jit"])
@pytest.mark.parametrize(
    "model, Guide", PYRO_COV_MODELS, ids=[m.__name__ for m, _ in PYRO_COV_MODELS]
)
def test_pyrocov_reparam_behaves_as_on_the_funsor_backend(model, Guide, Elbo):
    pyro.set_rng_seed(0)
    config = {
        "coef": LocScaleReparam(),
        "rate_loc": None if model is pyrocov_model else LocScaleReparam(),
        "rate": LocScaleReparam(),
        "init_loc": LocScaleReparam(),
        "init": LocScaleReparam(),
    }
    reparam_model = poutine.reparam(model, config)
    with default_dtype("float32"):
        dataset = fake_dataset(T=2, P=3, S=4, F=5)
        assert_same_outcome(reparam_model, Guide, dataset, Elbo)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("Elbo", ELBOS, ids=["trace", "jit"])
def test_profile_scenario_behaves_as_on_the_funsor_backend(Elbo, dtype, n=1):
    # Pyro's test_profile: the Poisson model and its two-part guide, sized by n
    pyro.set_rng_seed(0)
    with default_dtype(dtype):
        dataset = fake_dataset(T=min(n, 50), P=n + 1, S=n + 2, F=n + 3)
        assert_same_outcome(pyrocov_model_poisson, PoissonGuide, dataset, Elbo)
