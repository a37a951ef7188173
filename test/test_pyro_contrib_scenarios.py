"""Scenarios of Pyro's own ``tests/contrib/funsor`` suite, written in our
words with the originals' structure, names and dtypes (float32, Pyro's
default, parameters that require grad): funsor_lowering.pyro's losses and
``infer_discrete`` swapped in for ``pyro.contrib.funsor``'s give its losses,
gradients and values. torch only (Pyro)."""

import funsor
import pytest

if funsor.get_backend() != "torch":
    pytest.skip("Pyro runs on the torch backend", allow_module_level=True)

import pyro.contrib.funsor  # noqa: E402, F401  (registers the pyroapi backend)
import pyro.contrib.funsor.infer as contrib  # noqa: E402
import torch  # noqa: E402
from pyroapi import distributions as dist  # noqa: E402
from pyroapi import handlers, infer, pyro  # noqa: E402
from torch.distributions import constraints  # noqa: E402

import funsor_lowering.pyro as compiled  # noqa: E402

pytestmark = pytest.mark.usefixtures("float32_contrib_backend")


# --------------------------------------------- test_elbo_enumerate_plate_11
# Model [ ai -> [ bij -> cij ] ], guide [ ai -> [ bij ] ], both enumerated.
PLATE_11_PARAMS = {
    "model_probs_a": [0.45, 0.55],
    "model_probs_b": [[0.3, 0.7], [0.6, 0.4]],
    "model_probs_c": [[0.3, 0.4, 0.3], [0.4, 0.4, 0.2]],
    "guide_probs_a": [0.45, 0.55],
    "guide_probs_b": [[0.3, 0.7], [0.8, 0.2]],
}
PLATE_11_DATA = [[0, 1, 2], [1, 2, 2]]


def model_plate():
    probs_a = pyro.param("model_probs_a")
    probs_b = pyro.param("model_probs_b")
    probs_c = pyro.param("model_probs_c")
    data = torch.tensor(PLATE_11_DATA)
    with pyro.plate("i", 2, dim=-2):
        a = pyro.sample("a", dist.Categorical(probs_a))
        with pyro.plate("j", 3, dim=-1):
            b = pyro.sample("b", dist.Categorical(probs_b[a]))
            pyro.sample("c", dist.Categorical(probs_c[b]), obs=data)


def guide_plate():
    probs_a = pyro.param("guide_probs_a")
    probs_b = pyro.param("guide_probs_b")
    with pyro.plate("i", 2, dim=-2):
        a = pyro.sample("a", dist.Categorical(probs_a))
        with pyro.plate("j", 3, dim=-1):
            pyro.sample("b", dist.Categorical(probs_b[a]))


def plate_11_loss_and_grads(module):
    pyro.clear_param_store()
    for name, value in PLATE_11_PARAMS.items():
        pyro.param(name, torch.tensor(value), constraint=constraints.simplex)
    elbo = module.TraceEnum_ELBO(max_plate_nesting=2)
    loss = elbo.differentiable_loss(
        infer.config_enumerate(model_plate), infer.config_enumerate(guide_plate)
    )
    params = [pyro.param(name).unconstrained() for name in PLATE_11_PARAMS]
    assert all(p.requires_grad for p in params)
    return loss, torch.autograd.grad(loss, params)


def test_plated_model_with_parameters_that_require_grad_equals_contrib():
    expected_loss, expected_grads = plate_11_loss_and_grads(contrib)
    actual_loss, actual_grads = plate_11_loss_and_grads(compiled)
    assert actual_loss.dtype == expected_loss.dtype == torch.float32
    torch.testing.assert_close(actual_loss, expected_loss, rtol=1e-5, atol=1e-6)
    for actual, expected in zip(actual_grads, expected_grads):
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6)


# ------------------------- test_{svi,mcmc}_model_side_enumeration's models
# Continuous sites conditioned on values drawn with enumeration on: those
# values carry the enumeration dims of the discrete sites they depend on.
def model_zzxx():
    data = [torch.tensor([-1.0, -1.0, 0.0]), torch.tensor([-1.0, 1.0])]
    p = pyro.param("p", torch.tensor([0.25, 0.75]))
    loc = pyro.sample("loc", dist.Normal(0, 1).expand([2]).to_event(1))
    scale = pyro.sample("scale", dist.Normal(0, 1)).exp()
    z1 = pyro.sample("z1", dist.Categorical(p))
    with pyro.plate("data[0]", 3):
        pyro.sample("x1", dist.Normal(loc[z1], scale), obs=data[0])
    with pyro.plate("data[1]", 2):
        z2 = pyro.sample("z2", dist.Categorical(p))
        pyro.sample("x2", dist.Normal(loc[z2], scale), obs=data[1])


def model2():
    data = [torch.tensor([-1.0, -1.0, 0.0]), torch.tensor([-1.0, 1.0])]
    p = pyro.param("p", torch.tensor([0.25, 0.75]))
    loc = pyro.sample("loc", dist.Normal(0, 1).expand([2]).to_event(1))
    z1 = pyro.sample("z1", dist.Categorical(p))
    scale = pyro.sample("scale", dist.Normal(torch.tensor([0.0, 1.0])[z1], 1)).exp()
    with pyro.plate("data[0]", 3):
        pyro.sample("x1", dist.Normal(loc[z1], scale), obs=data[0])
    with pyro.plate("data[1]", 2):
        z2 = pyro.sample("z2", dist.Categorical(p))
        pyro.sample("x2", dist.Normal(loc[z2], scale), obs=data[1])


def values_drawn_under_enumeration(model, seed):
    pyro.set_rng_seed(seed)
    enumerated = handlers.enum(infer.config_enumerate(model))
    trace = handlers.trace(
        handlers.block(enumerated, expose=["loc", "scale"])
    ).get_trace()
    return {
        name: site["value"]
        for name, site in trace.nodes.items()
        if site["type"] == "sample"
    }


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("model", [model_zzxx, model2])
def test_infer_discrete_observed_on_values_drawn_under_enumeration(model, seed):
    data = values_drawn_under_enumeration(model, seed)
    if model is model2:  # the scale depends on z1: drawn once per z1 value
        assert data["scale"].numel() == 2
    conditioned = handlers.condition(infer.config_enumerate(model), data)
    traces = {
        module: handlers.trace(
            module.infer_discrete(conditioned, temperature=0)
        ).get_trace()
        for module in (contrib, compiled)
    }
    expected, actual = traces[contrib], traces[compiled]
    assert set(actual.nodes) == set(handlers.trace(model).get_trace().nodes)
    assert "z1" not in actual.nodes["scale"]["funsor"]["value"].inputs
    for name in ("z1", "z2", "scale", "loc"):
        torch.testing.assert_close(
            actual.nodes[name]["value"], expected.nodes[name]["value"]
        )
    torch.testing.assert_close(actual.log_prob_sum(), expected.log_prob_sum())


@pytest.mark.parametrize("model", [model_zzxx, model2])
def test_infer_discrete_samples_observed_on_values_drawn_under_enumeration(model):
    data = values_drawn_under_enumeration(model, 0)
    conditioned = handlers.condition(infer.config_enumerate(model), data)
    trace = handlers.trace(
        compiled.infer_discrete(conditioned, temperature=1)
    ).get_trace()
    expected = handlers.trace(model).get_trace()
    for name in ("z1", "z2", "scale"):
        assert trace.nodes[name]["value"].shape == expected.nodes[name]["value"].shape
    assert torch.isfinite(trace.log_prob_sum())


# ------------------------------------------ the pyroapi backend "funsor_lowering"
def test_pyroapi_backend_names_this_packages_losses():
    import pyroapi

    with pyroapi.pyro_backend("funsor_lowering"):
        assert infer.TraceEnum_ELBO is compiled.TraceEnum_ELBO
        assert infer.TraceMarkovEnum_ELBO is compiled.TraceMarkovEnum_ELBO
        assert infer.infer_discrete is compiled.infer_discrete
        assert infer.Trace_ELBO is contrib.Trace_ELBO  # the rest is contrib's
        pyro.clear_param_store()
        for name, value in PLATE_11_PARAMS.items():
            pyro.param(name, torch.tensor(value), constraint=constraints.simplex)
        actual = infer.TraceEnum_ELBO(max_plate_nesting=2).differentiable_loss(
            infer.config_enumerate(model_plate), infer.config_enumerate(guide_plate)
        )
    expected, _ = plate_11_loss_and_grads(contrib)
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6)


PYROAPI_TEST_FILE = """
import pyro.contrib.funsor
import pyroapi
import torch
from pyroapi import distributions as dist, infer, pyro


@pyroapi.pyro_backend("contrib.funsor")
def test_enumerated_loss():
    def model():
        p = pyro.param("p", torch.tensor([0.3, 0.7]))
        x = pyro.sample("x", dist.Categorical(p), infer={"enumerate": "parallel"})
        pyro.sample("y", dist.Normal(x.float(), 1.0), obs=torch.tensor(0.5))

    loss = infer.TraceEnum_ELBO(max_plate_nesting=0).differentiable_loss(
        model, lambda: None
    )
    expected = -torch.logsumexp(
        torch.tensor([0.3, 0.7]).log() + dist.Normal(torch.tensor([0.0, 1.0]), 1.0)
        .log_prob(torch.tensor(0.5)), 0
    )
    torch.testing.assert_close(loss, expected)
"""


@pytest.mark.parametrize("infer_module", ["funsor_lowering", "contrib"])
def test_pyro_plugin_runs_pyroapi_tests_with_this_packages_losses(
    tmp_path, infer_module
):
    import subprocess
    import sys

    (tmp_path / "test_pyroapi_user.py").write_text(PYROAPI_TEST_FILE)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "funsor_lowering.conformance.pyro_plugin",
            f"--pyro-infer={infer_module}",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
            str(tmp_path / "test_pyroapi_user.py"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout
    reached = "funsor_lowering: 1 tests ran this package's losses"
    assert (reached in result.stdout) == (infer_module == "funsor_lowering")
