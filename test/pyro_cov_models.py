"""The four pyro-cov lineage models of Pyro's AutoGaussian tests
(``tests/infer/autoguide/test_gaussian.py``, simplified there from
pyro-cov's ``mutrans.py``) and the two-part guide of its profile test,
written here in our own code with the originals' structure, site names,
plate dims, distributions and dtypes (the default dtype, float32 unless a
test sets another).

Shapes: ``T`` weeks, ``P`` places, ``S`` strains, ``F`` features; a dataset
holds ``features [S, F]``, ``local_time [T, P]`` and ``weekly_strains
[T, P, S]`` (see :func:`fake_dataset`).
"""

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.infer.autoguide import AutoGaussian, AutoGuideList


def fake_dataset(T, P, S, F):
    """Random data of Pyro's tests' shapes (counts are rounded log-normals)."""
    return {
        "features": torch.randn(S, F),
        "local_time": torch.randn(T, P),
        "weekly_strains": torch.randn(T, P, S).exp().round(),
    }


def _unpack(dataset):
    features = dataset["features"]
    local_time = dataset["local_time"][..., None]  # [T, P, 1]
    T, P, _ = local_time.shape
    S, F = features.shape
    return features, local_time, dataset["weekly_strains"], (T, P, S, F)


def pyrocov_model(dataset):
    """Deterministic ``rate_loc``; events over strains; place and time
    plates at dims -1 and -2; a multinomial likelihood."""
    features, local_time, weekly_strains, (T, P, S, F) = _unpack(dataset)
    assert weekly_strains.shape == (T, P, S)
    coef_scale = pyro.sample("coef_scale", dist.InverseGamma(5e3, 1e2))[..., None]
    rate_scale = pyro.sample("rate_scale", dist.LogNormal(-4, 2))[..., None]
    init_loc_scale = pyro.sample("init_loc_scale", dist.LogNormal(0, 2))[..., None]
    init_scale = pyro.sample("init_scale", dist.LogNormal(0, 2))[..., None]
    coef = pyro.sample(
        "coef", dist.Logistic(torch.zeros(F), coef_scale).to_event(1)
    )  # [F]
    rate_loc = pyro.deterministic(
        "rate_loc", 0.01 * coef @ features.T, event_dim=1
    )  # [S]
    init_loc = pyro.sample(
        "init_loc", dist.Normal(torch.zeros(S), init_loc_scale).to_event(1)
    )  # [S]
    _place_and_time_events(rate_loc, rate_scale, init_loc, init_scale, dataset)


def pyrocov_model_relaxed(dataset):
    """:func:`pyrocov_model` with ``rate_loc`` latent (scale
    ``rate_loc_scale``)."""
    features, local_time, weekly_strains, (T, P, S, F) = _unpack(dataset)
    assert weekly_strains.shape == (T, P, S)
    coef_scale = pyro.sample("coef_scale", dist.InverseGamma(5e3, 1e2))[..., None]
    rate_loc_scale = pyro.sample("rate_loc_scale", dist.LogNormal(-4, 2))[..., None]
    rate_scale = pyro.sample("rate_scale", dist.LogNormal(-4, 2))[..., None]
    init_loc_scale = pyro.sample("init_loc_scale", dist.LogNormal(0, 2))[..., None]
    init_scale = pyro.sample("init_scale", dist.LogNormal(0, 2))[..., None]
    coef = pyro.sample(
        "coef", dist.Logistic(torch.zeros(F), coef_scale).to_event(1)
    )  # [F]
    rate_loc = pyro.sample(
        "rate_loc", dist.Normal(0.01 * coef @ features.T, rate_loc_scale).to_event(1)
    )  # [S]
    init_loc = pyro.sample(
        "init_loc", dist.Normal(torch.zeros(S), init_loc_scale).to_event(1)
    )  # [S]
    _place_and_time_events(rate_loc, rate_scale, init_loc, init_scale, dataset)


def _place_and_time_events(rate_loc, rate_scale, init_loc, init_scale, dataset):
    """The place plate (dim -1) of strain events and the time plate (dim -2)
    of multinomial counts shared by the first two models."""
    _, local_time, weekly_strains, (T, P, _, _) = _unpack(dataset)
    with pyro.plate("place", P, dim=-1):
        rate = pyro.sample(
            "rate", dist.Normal(rate_loc, rate_scale).to_event(1)
        )  # [P, S]
        init = pyro.sample(
            "init", dist.Normal(init_loc, init_scale).to_event(1)
        )  # [P, S]
        with pyro.plate("time", T, dim=-2):
            logits = init + rate * local_time  # [T, P, S]
            pyro.sample(
                "obs",
                dist.Multinomial(logits=logits, validate_args=False),
                obs=weekly_strains,
            )


def pyrocov_model_plated(dataset):
    """Plates for features (dim -1), strains (-1), places (-2) and weeks
    (-3) instead of events; a multinomial likelihood."""
    features, local_time, weekly_strains, (T, P, S, F) = _unpack(dataset)
    assert weekly_strains.shape == (T, P, S)
    feature_plate = pyro.plate("feature", F, dim=-1)
    strain_plate = pyro.plate("strain", S, dim=-1)
    place_plate = pyro.plate("place", P, dim=-2)
    time_plate = pyro.plate("time", T, dim=-3)
    coef_scale = pyro.sample("coef_scale", dist.InverseGamma(5e3, 1e2))
    rate_loc_scale = pyro.sample("rate_loc_scale", dist.LogNormal(-4, 2))
    rate_scale = pyro.sample("rate_scale", dist.LogNormal(-4, 2))
    init_loc_scale = pyro.sample("init_loc_scale", dist.LogNormal(0, 2))
    init_scale = pyro.sample("init_scale", dist.LogNormal(0, 2))
    with feature_plate:
        coef = pyro.sample("coef", dist.Logistic(0, coef_scale))  # [F]
    rate_loc_loc = 0.01 * coef @ features.T
    with strain_plate:
        rate_loc = pyro.sample(
            "rate_loc", dist.Normal(rate_loc_loc, rate_loc_scale)
        )  # [S]
        init_loc = pyro.sample("init_loc", dist.Normal(0, init_loc_scale))  # [S]
    with place_plate, strain_plate:
        rate = pyro.sample("rate", dist.Normal(rate_loc, rate_scale))  # [P, S]
        init = pyro.sample("init", dist.Normal(init_loc, init_scale))  # [P, S]
    with time_plate, place_plate:
        logits = (init + rate * local_time)[..., None, :]  # [T, P, 1, S]
        pyro.sample(
            "obs",
            dist.Multinomial(logits=logits, validate_args=False),
            obs=weekly_strains[..., None, :],
        )


def pyrocov_model_poisson(dataset):
    """:func:`pyrocov_model_plated` (without the feature plate) with a
    Poisson likelihood scaled by a log-normal ``pois`` per place and week."""
    features, local_time, weekly_strains, (T, P, S, F) = _unpack(dataset)
    if not torch._C._get_tracing_state():
        assert weekly_strains.shape == (T, P, S)
    strain_plate = pyro.plate("strain", S, dim=-1)
    place_plate = pyro.plate("place", P, dim=-2)
    time_plate = pyro.plate("time", T, dim=-3)
    coef_scale = pyro.sample("coef_scale", dist.LogNormal(-4, 2))
    rate_loc_scale = pyro.sample("rate_loc_scale", dist.LogNormal(-4, 2))
    rate_scale = pyro.sample("rate_scale", dist.LogNormal(-4, 2))
    init_loc_scale = pyro.sample("init_loc_scale", dist.LogNormal(0, 2))
    init_scale = pyro.sample("init_scale", dist.LogNormal(0, 2))
    pois_loc = pyro.sample("pois_loc", dist.Normal(0, 2))
    pois_scale = pyro.sample("pois_scale", dist.LogNormal(0, 2))
    coef = pyro.sample(
        "coef", dist.Logistic(torch.zeros(F), coef_scale).to_event(1)
    )  # [F]
    rate_loc_loc = 0.01 * coef @ features.T
    with strain_plate:
        rate_loc = pyro.sample(
            "rate_loc", dist.Normal(rate_loc_loc, rate_loc_scale)
        )  # [S]
        init_loc = pyro.sample("init_loc", dist.Normal(0, init_loc_scale))  # [S]
    with place_plate, strain_plate:
        rate = pyro.sample("rate", dist.Normal(rate_loc, rate_scale))  # [P, S]
        init = pyro.sample("init", dist.Normal(init_loc, init_scale))  # [P, S]
    with time_plate, place_plate:
        pois = pyro.sample("pois", dist.LogNormal(pois_loc, pois_scale))
    with time_plate, place_plate, strain_plate:
        # softmax over strains (not exp): weakly couples strains, as Pyro's
        logits = pois * (init + rate * local_time).softmax(-1)  # [T, P, S]
        pyro.sample("obs", dist.Poisson(logits), obs=weekly_strains)


class PoissonGuide(AutoGuideList):
    """The profile test's guide: one AutoGaussian over every latent site
    but the ``pois`` ones, a second over the ``pois`` sites."""

    def __init__(self, model, backend):
        super().__init__(model)
        self.append(
            AutoGaussian(poutine.block(model, hide_fn=self.hide_fn_1), backend=backend)
        )
        self.append(
            AutoGaussian(poutine.block(model, hide_fn=self.hide_fn_2), backend=backend)
        )

    @staticmethod
    def hide_fn_1(msg):
        return msg["type"] == "sample" and "pois" in msg["name"]

    @staticmethod
    def hide_fn_2(msg):
        return msg["type"] == "sample" and "pois" not in msg["name"]


PYRO_COV_MODELS = [
    (pyrocov_model, AutoGaussian),
    (pyrocov_model_relaxed, AutoGaussian),
    (pyrocov_model_plated, AutoGaussian),
    (pyrocov_model_poisson, PoissonGuide),
]
