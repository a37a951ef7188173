"""Pyro's AutoGaussian structure scenarios (the dependency structures of
Pyro's own ``tests/infer/autoguide/test_gaussian.py``, written here in our
own words): on ``backend="compiled"`` each behaves exactly as on
``backend="funsor"``. Where funsor's backend works, samples, log densities
and SVI losses are equal; where it raises, compiled raises the same error.
torch only (Pyro)."""

import funsor
import pytest

if funsor.get_backend() != "torch":
    pytest.skip("Pyro runs on the torch backend", allow_module_level=True)

import pyro  # noqa: E402
import pyro.distributions as dist  # noqa: E402
import torch  # noqa: E402
from pyro import poutine  # noqa: E402
from pyro.infer import SVI, JitTrace_ELBO, Predictive, Trace_ELBO  # noqa: E402
from pyro.infer.autoguide import AutoGaussian, AutoGuideList  # noqa: E402
from pyro.infer.reparam import LocScaleReparam  # noqa: E402
from pyro.optim import ClippedAdam  # noqa: E402

import funsor_lowering.pyro  # noqa: E402, F401  (registers backend="compiled")

from .helpers import assert_matches  # noqa: E402


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
    losses = {}
    for backend, guide in (("funsor", reference), ("compiled", compiled)):
        pyro.set_rng_seed(3)
        svi = SVI(model, guide, ClippedAdam({"lr": 1e-3}), Trace_ELBO())
        losses[backend] = [svi.step() for _ in range(2)]
    assert_matches(
        torch.tensor(losses["compiled"]), torch.tensor(losses["funsor"]), rtol=1e-4
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


@pytest.mark.parametrize("jit", [False, True], ids=["nojit", "jit"])
def test_svi_profile_runs_with_and_without_jit(jit):
    # Pyro's profile scenario: a plated model trained a few steps
    model = two_globals_scale_a_plate
    losses = {}
    for backend in ("funsor", "compiled"):
        pyro.clear_param_store()
        guide = AutoGaussian(model, backend=backend)
        elbo = (JitTrace_ELBO if jit else Trace_ELBO)(ignore_jit_warnings=True)
        pyro.set_rng_seed(4)
        svi = SVI(model, guide, ClippedAdam({"lr": 1e-3}), elbo)
        losses[backend] = [svi.step() for _ in range(3)]
    assert_matches(
        torch.tensor(losses["compiled"]), torch.tensor(losses["funsor"]), rtol=1e-4
    )


# ------------------------------------------------ pyro-cov models (simplified)
def covid_lineages(data, relaxed=False, plated=False, poisson=False):
    """The pyro-cov lineage model of Pyro's scenarios, in four variants:
    deterministic or latent rate_loc (``relaxed``), plates over strains
    (``plated``), and a Poisson likelihood with a per-place-time scale
    (``poisson``, which also plates strains)."""
    features, times, counts = data["features"], data["times"], data["counts"]
    T, P, S = counts.shape
    F = features.shape[-1]
    times = times[..., None]  # [T, P, 1]
    coef_scale = pyro.sample("coef_scale", dist.LogNormal(-4.0, 2.0))
    rate_scale = pyro.sample("rate_scale", dist.LogNormal(-4.0, 2.0))
    init_loc_scale = pyro.sample("init_loc_scale", dist.LogNormal(0.0, 2.0))
    init_scale = pyro.sample("init_scale", dist.LogNormal(0.0, 2.0))
    coef = pyro.sample(
        "coef", dist.Logistic(torch.zeros(F), coef_scale[..., None]).to_event(1)
    )
    mean_rate = 0.01 * coef @ features.T  # [S]
    if plated or poisson:
        strains = pyro.plate("strain", S, dim=-1)
        places, weeks = pyro.plate("place", P, dim=-2), pyro.plate("time", T, dim=-3)
        rate_loc_scale = pyro.sample("rate_loc_scale", dist.LogNormal(-4.0, 2.0))
        with strains:
            rate_loc = pyro.sample("rate_loc", dist.Normal(mean_rate, rate_loc_scale))
            init_loc = pyro.sample("init_loc", dist.Normal(0.0, init_loc_scale))
        with places, strains:
            rate = pyro.sample("rate", dist.Normal(rate_loc, rate_scale))
            init = pyro.sample("init", dist.Normal(init_loc, init_scale))
        if poisson:
            pois_loc = pyro.sample("pois_loc", dist.Normal(0.0, 2.0))
            pois_scale = pyro.sample("pois_scale", dist.LogNormal(0.0, 2.0))
            with weeks, places:
                scale = pyro.sample("pois", dist.LogNormal(pois_loc, pois_scale))
            with weeks, places, strains:
                mean = scale * (init + rate * times).softmax(-1)
                pyro.sample("obs", dist.Poisson(mean), obs=counts)
        else:
            with weeks, places:
                logits = (init + rate * times)[..., None, :]
                pyro.sample(
                    "obs",
                    dist.Multinomial(logits=logits, validate_args=False),
                    obs=counts[..., None, :],
                )
        return
    if relaxed:
        rate_loc_scale = pyro.sample("rate_loc_scale", dist.LogNormal(-4.0, 2.0))
        rate_loc = pyro.sample(
            "rate_loc", dist.Normal(mean_rate, rate_loc_scale[..., None]).to_event(1)
        )
    else:
        rate_loc = pyro.deterministic("rate_loc", mean_rate, event_dim=1)
    init_loc = pyro.sample(
        "init_loc", dist.Normal(torch.zeros(S), init_loc_scale[..., None]).to_event(1)
    )
    with pyro.plate("place", P, dim=-1):
        rate = pyro.sample(
            "rate", dist.Normal(rate_loc, rate_scale[..., None]).to_event(1)
        )
        init = pyro.sample(
            "init", dist.Normal(init_loc, init_scale[..., None]).to_event(1)
        )
        with pyro.plate("time", T, dim=-2):
            pyro.sample(
                "obs",
                dist.Multinomial(logits=init + rate * times, validate_args=False),
                obs=counts,
            )


class SplitGuide(AutoGuideList):
    """Pyro's PoissonGuide: one AutoGaussian for the Poisson scales, one for
    the rest."""

    def __init__(self, model, backend):
        super().__init__(model)
        for keep_pois in (False, True):
            hidden = self._hide(keep_pois)
            self.append(
                AutoGaussian(poutine.block(model, hide_fn=hidden), backend=backend)
            )

    @staticmethod
    def _hide(keep_pois):
        def hide(msg):
            return msg["type"] == "sample" and ("pois" in msg["name"]) != keep_pois

        return hide


COV_VARIANTS = {
    "plain": ({}, AutoGaussian),
    "relaxed": ({"relaxed": True}, AutoGaussian),
    "plated": ({"plated": True}, AutoGaussian),
    "poisson": ({"poisson": True}, SplitGuide),
}


@pytest.fixture
def float64():
    """Losses compared to 1e-4 need double precision (the Poisson variant's
    losses are sums of large terms)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def _cov_data(T=2, P=3, S=4, F=5):
    g = torch.Generator().manual_seed(0)
    return {
        "features": torch.randn(S, F, generator=g),
        "times": torch.randn(T, P, generator=g),
        "counts": torch.randn(T, P, S, generator=g).exp().round(),
    }


def _svi_losses(model, guide, data, steps=2):
    pyro.set_rng_seed(5)
    svi = SVI(model, guide, ClippedAdam({"lr": 1e-3}), Trace_ELBO())
    return [svi.step(data) for _ in range(steps)]


@pytest.mark.parametrize("reparam", [False, True], ids=["plain", "reparam"])
@pytest.mark.parametrize(
    "variant",
    sorted(COV_VARIANTS),
)
def test_pyrocov_models_behave_as_on_the_funsor_backend(variant, reparam, float64):
    options, Guide = COV_VARIANTS[variant]

    def model(data):
        return covid_lineages(data, **options)

    if reparam:
        sites = ["coef", "rate", "init_loc", "init"]
        if variant != "plain":
            sites.append("rate_loc")
        model = poutine.reparam(model, {s: LocScaleReparam() for s in sites})
    data = _cov_data()
    outcomes = {}
    for backend in ("funsor", "compiled"):
        pyro.clear_param_store()
        guide = Guide(model, backend=backend)
        pyro.set_rng_seed(0)
        try:
            guide(data)
        except NotImplementedError as error:
            outcomes[backend] = ("error", type(error), str(error).split("(")[0])
            continue
        outcomes[backend] = ("losses", _svi_losses(model, guide, data))
        Predictive(model, guide=guide, num_samples=2)(data)
    assert outcomes["compiled"][0] == outcomes["funsor"][0], outcomes
    if outcomes["funsor"][0] == "error":
        assert outcomes["compiled"] == outcomes["funsor"]
    else:
        assert_matches(
            torch.tensor(outcomes["compiled"][1]),
            torch.tensor(outcomes["funsor"][1]),
            rtol=1e-4,
        )
