"""Observed Bernoulli sites summed over plates by one einsum
(funsor_lowering.pyro.observed_bernoulli): the sums equal torch's own
log_prob summed, over generated broadcast patterns, expanded parameters and
masks, with their gradients; and models whose Bernoulli sites take each
path (summed with the parameters along the plate, summed with parameters
broadcast along it, kept whole under a mask varying along it) train as
pyro.contrib.funsor. torch only (Pyro)."""

import funsor
import pytest

if funsor.get_backend() != "torch":
    pytest.skip("Pyro runs on the torch backend", allow_module_level=True)

import pyro.contrib.funsor  # noqa: E402, F401  (registers the pyroapi backend)
import pyro.contrib.funsor.infer as contrib  # noqa: E402
import torch  # noqa: E402
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from pyro.distributions import MaskedDistribution  # noqa: E402
from pyroapi import distributions as dist  # noqa: E402
from pyroapi import handlers, infer, optim, pyro  # noqa: E402
from torch.distributions import constraints  # noqa: E402

import funsor_lowering.pyro as compiled  # noqa: E402
from funsor_lowering.pyro.observed_bernoulli import BernoulliLogDensity  # noqa: E402


@st.composite
def bernoulli_cases(draw):
    """Shapes of the parameter, value and mask (sizes 1-3, aligned right),
    whether the parameter is given as probs or logits, is expanded to the
    full shape and validates values, and the dims to sum."""
    ndim = draw(st.integers(1, 4))
    full = [draw(st.sampled_from([1, 2, 3])) for _ in range(ndim)]

    def shape():  # broadcasts to the full shape
        sizes = [draw(st.sampled_from([1, size])) for size in full]
        return tuple(sizes[draw(st.integers(0, ndim)) :])

    param_shape, value_shape = shape(), shape()
    mask_shape = draw(st.none() | st.just(()) | st.builds(shape))
    dims = draw(st.sets(st.integers(-ndim, -1)))
    return {
        "param_shape": param_shape,
        "value_shape": value_shape,
        "mask_shape": mask_shape,
        "as_probs": draw(st.booleans()),
        "expanded": draw(st.booleans()),
        "validated": draw(st.booleans()),
        "dims": dims,
        "seed": draw(st.integers(0, 2**16)),
    }


@given(bernoulli_cases())
def test_summed_log_density_equals_torch_log_prob_summed(case):
    generator = torch.Generator().manual_seed(case["seed"])
    param = torch.rand(case["param_shape"], generator=generator, dtype=torch.float64)
    param = (param if case["as_probs"] else 4 * param - 2).requires_grad_()
    value = torch.randint(
        2, case["value_shape"], generator=generator, dtype=torch.float64
    )
    mask = None
    if case["mask_shape"] is not None:
        mask = torch.rand(case["mask_shape"], generator=generator) < 0.7
    shape = torch.broadcast_shapes(
        param.shape, value.shape, () if mask is None else mask.shape
    )

    def bernoulli():  # a new one each time: probs' logits are cached
        kwargs = {"probs" if case["as_probs"] else "logits": param}
        fn = torch.distributions.Bernoulli(**kwargs, validate_args=case["validated"])
        if case["expanded"]:
            fn = fn.expand(torch.broadcast_shapes(param.shape, value.shape))
        return fn

    expected = bernoulli() if mask is None else MaskedDistribution(bernoulli(), mask)
    expected = expected.log_prob(value).expand(shape)
    lazy = BernoulliLogDensity(bernoulli(), value, mask, shape)
    dims = lazy.summable(d for d in case["dims"] if -len(shape) <= d)
    if dims:
        expected = expected.sum(sorted(dims), keepdim=True)
        actual = lazy.summed(dims)
    else:
        actual = lazy.materialized()
    assert actual.shape == expected.shape
    torch.testing.assert_close(actual, expected, rtol=1e-12, atol=1e-12)
    (expected_grad,) = torch.autograd.grad(expected.sum(), param)
    (actual_grad,) = torch.autograd.grad(actual.sum(), param)
    torch.testing.assert_close(actual_grad, expected_grad, rtol=1e-12, atol=1e-12)


def test_summable_dims_exclude_those_the_mask_varies_along():
    fn = torch.distributions.Bernoulli(torch.full((2, 3), 0.4))
    value = torch.ones(2, 3)
    mask = torch.tensor([[True], [False]])
    lazy = BernoulliLogDensity(fn, value, mask, (2, 3))
    assert lazy.summable({-1, -2}) == {-1}


def test_invalid_values_raise_as_log_prob():
    fn = torch.distributions.Bernoulli(torch.full((3,), 0.4), validate_args=True)
    with pytest.raises(ValueError, match="value"):
        fn.log_prob(torch.tensor([0.0, 0.5, 1.0]))
    with pytest.raises(ValueError, match="value"):
        BernoulliLogDensity(fn, torch.tensor([0.0, 0.5, 1.0]), None, (3,))


def bernoulli_mixture(data, mask):
    """A mixture of Bernoulli vectors, with three emissions: one with a
    probability per component and column (summed over the columns), one
    with logits per component only (broadcast along the columns)
    and one masked along the columns (not summed)."""
    weights = pyro.param(
        "weights", torch.tensor([0.3, 0.5, 0.2]), constraint=constraints.simplex
    )
    probs = pyro.param(
        "probs",
        torch.linspace(0.1, 0.9, 12).reshape(3, 4),
        constraint=constraints.unit_interval,
    )
    shared = pyro.param("shared", torch.tensor([-1.0, 0.5, 2.0]))  # logits
    with pyro.plate("rows", data.shape[0], dim=-2):
        z = pyro.sample("z", dist.Categorical(weights), infer={"enumerate": "parallel"})
        with pyro.plate("columns", data.shape[1], dim=-1):
            pyro.sample("x", dist.Bernoulli(probs[z.squeeze(-1)]), obs=data)
            pyro.sample("y", dist.Bernoulli(logits=shared[z]), obs=1 - data)
            with handlers.mask(mask=mask):
                pyro.sample("w", dist.Bernoulli(probs[z.squeeze(-1)]), obs=data)


@pytest.mark.usefixtures("float64_contrib_backend")
def test_bernoulli_mixture_trains_as_contrib():
    data = torch.tensor(
        [[1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 0.0]]
    )
    mask = torch.tensor([True, False, True, True])
    trajectories = []
    for module in (contrib, compiled):
        pyro.clear_param_store()
        elbo = module.TraceEnum_ELBO(max_plate_nesting=2)
        svi = infer.SVI(
            bernoulli_mixture, lambda *args: None, optim.Adam({"lr": 0.1}), elbo
        )
        losses = [svi.step(data, mask) for _ in range(3)]
        params = {k: v.detach().clone() for k, v in pyro.get_param_store().items()}
        trajectories.append((losses, params))
    (expected_losses, expected), (actual_losses, actual) = trajectories
    assert expected_losses[0] != expected_losses[-1]  # it trains
    assert actual_losses == pytest.approx(expected_losses, rel=1e-10)
    assert actual.keys() == expected.keys()
    for name, value in expected.items():
        torch.testing.assert_close(actual[name], value, rtol=1e-9, atol=1e-9)
