"""funsor's examples (``examples/`` of funsor's repository), written in our
words with the originals' structure, names and dtypes: each example's
per-step computation run through ``funsor_lowering.jit`` equals eager
funsor, and where the example trains, so do its gradients and its training
trajectory. Most parameters are passed as arguments here, as the
examples compute their funsors with torch and Pyro calls ``jit`` does not
record; minipyro's param store is captured as it is (``jit`` holds tensors
that require grad by reference)."""

import math
from collections import OrderedDict

import funsor
import numpy as np
import pytest
from funsor import ops
from funsor.adjoint import AdjointTape
from funsor.domains import Bint
from funsor.interpretations import lazy
from funsor.interpreter import reinterpret
from funsor.optimizer import apply_optimizer
from funsor.tensor import Tensor
from funsor.testing import assert_close, random_tensor

from funsor_lowering import jit

BACKEND = funsor.get_backend()


# ------------------------------------------------- examples/forward_backward.py
def drop_names(step):
    """The example's renaming of each (prev, curr) pair to one summed
    ``_drop_i`` name: ``(prev -> drop, curr -> drop, drop names)``."""
    step = OrderedDict(sorted(step.items()))
    drop = tuple(f"_drop_{i}" for i in range(len(step)))
    prev_to_drop = dict(zip(step.keys(), drop))
    curr_to_drop = dict(zip(step.values(), drop))
    return prev_to_drop, curr_to_drop, frozenset(drop)


def forward_algorithm(factors, step):
    """Z = p(y[0:T]) by the forward algorithm, as the example writes it."""
    prev_to_drop, curr_to_drop, reduce_vars = drop_names(step)
    alpha = factors[0]
    for trans in factors[1:]:
        alpha = (alpha(**curr_to_drop) + trans(**prev_to_drop)).reduce(
            ops.logaddexp, reduce_vars
        )
    return alpha(**curr_to_drop).reduce(ops.logaddexp, reduce_vars)


def forward_backward_algorithm(factors, step):
    """p(x[t], x[t-1] | Y) by explicit forward and backward passes."""
    prev_to_drop, curr_to_drop, reduce_vars = drop_names(step)
    alpha = factors[0]
    beta = Tensor(ops.full_like(alpha.data, 0.0), alpha(x_curr="x_prev").inputs)
    betas = [beta]
    for trans in factors[:0:-1]:
        beta = (trans(**curr_to_drop) + beta(**prev_to_drop)).reduce(
            ops.logaddexp, reduce_vars
        )
        betas.append(beta)
    Z = (factors[0](**curr_to_drop) + beta(**prev_to_drop)).reduce(
        ops.logaddexp, reduce_vars
    )
    betas.reverse()
    marginals = [factors[0] + betas[0](x_prev="x_curr") - Z]
    for trans, beta in zip(factors[1:], betas[1:]):
        alpha_trans = alpha(x_curr="x_prev") + trans
        alpha = alpha_trans.reduce(ops.logaddexp, "x_prev")
        marginals.append(alpha_trans + beta(x_prev="x_curr") - Z)
    return marginals


def backprop_marginals(factors):
    """The same marginals' adjoint route: AdjointTape over the forward
    algorithm."""
    with AdjointTape() as tape:
        Z = forward_algorithm(factors, {"x_prev": "x_curr"})
    result = tape.adjoint(ops.logaddexp, ops.add, Z, factors)
    return Z, list(result.values())


def hmm_factors(time_steps=10, hidden_dim=3):
    init = random_tensor(OrderedDict([("x_curr", Bint[hidden_dim])]))
    trans = [
        random_tensor(OrderedDict(x_prev=Bint[hidden_dim], x_curr=Bint[hidden_dim]))
        for _ in range(time_steps - 1)
    ]
    return [init] + trans


def test_forward_backward_example_both_routes():
    factors = hmm_factors()
    step = {"x_prev": "x_curr"}
    expected = forward_backward_algorithm(factors, step)
    actual = jit(forward_backward_algorithm)(factors, step)
    for a, e in zip(actual, expected, strict=True):
        assert_close(a.align(tuple(e.inputs)), e, atol=1e-5, rtol=1e-5)
    expected_Z, expected_adj = backprop_marginals(factors)
    actual_Z, actual_adj = jit(backprop_marginals)(factors)
    assert_close(actual_Z, expected_Z, atol=1e-5, rtol=1e-5)
    for a, e in zip(actual_adj, expected_adj, strict=True):
        assert_close(a.align(tuple(e.inputs)), e, atol=1e-5, rtol=1e-5)
    # the example's check: the adjoint route gives the marginals
    for marginal, adj, trans in zip(expected, actual_adj, factors):
        actual_marginal = adj + trans - actual_Z
        assert_close(actual_marginal.align(tuple(marginal.inputs)), marginal, rtol=1e-4)


# ------------------------- examples/discrete_hmm.py, examples/kalman_filter.py
torch_only = pytest.mark.skipif(BACKEND != "torch", reason="the example is torch")


def discrete_hmm_model(trans_probs, emit_probs, data, hidden_dim=2, lazy_=False):
    """examples/discrete_hmm.py's model, its parameters as arguments."""
    import funsor.torch.distributions as dist

    log_prob = funsor.to_funsor(0.0)
    trans = dist.Categorical(
        probs=Tensor(trans_probs, inputs=OrderedDict([("prev", Bint[hidden_dim])]))
    )
    emit = dist.Categorical(
        probs=Tensor(emit_probs, inputs=OrderedDict([("latent", Bint[hidden_dim])]))
    )
    x_curr = funsor.Number(0, hidden_dim)
    for t, y in enumerate(data):
        x_prev = x_curr
        x_curr = funsor.Variable(f"x_{t}", Bint[hidden_dim])
        log_prob += trans(prev=x_prev, value=x_curr)
        if not lazy_ and isinstance(x_prev, funsor.Variable):
            log_prob = log_prob.reduce(ops.logaddexp, x_prev.name)
        log_prob += emit(latent=x_curr, value=Tensor(y, dtype=2))
    return log_prob.reduce(ops.logaddexp)


def kalman_filter_model(trans_noise, emit_noise, data, lazy_=False):
    """examples/kalman_filter.py's model, its parameters as arguments."""
    import funsor.torch.distributions as dist
    import torch

    log_prob = funsor.to_funsor(0.0)
    x_curr = Tensor(torch.tensor(0.0))
    for t, y in enumerate(data):
        x_prev = x_curr
        x_curr = funsor.Variable(f"x_{t}", funsor.Real)
        log_prob += dist.Normal(1 + x_prev / 2.0, trans_noise, value=x_curr)
        if t > 0 and not lazy_:
            log_prob = log_prob.reduce(ops.logaddexp, x_prev.name)
        log_prob += dist.Normal(0.5 + 3 * x_curr, emit_noise, value=y)
    return log_prob.reduce(ops.logaddexp)


def lazily(model):
    """The examples' ``--lazy`` route: build lazily, optimize, evaluate."""

    def run(*args):
        with lazy:
            log_prob = apply_optimizer(model(*args, lazy_=True))
        return reinterpret(log_prob)

    return run


def train(step_fn, params, data, steps=3, lr=0.01):
    """The examples' training loop; the losses and final parameters."""
    import torch

    params = [p.detach().clone().requires_grad_() for p in params]
    optim = torch.optim.Adam(params, lr=lr)
    losses = []
    for _ in range(steps):
        optim.zero_grad()
        log_prob = step_fn(*params, data)
        assert not log_prob.inputs, "free variables remain"
        loss = -log_prob.data
        loss.backward()
        optim.step()
        losses.append(loss.item())
    return losses, [p.detach() for p in params]


def assert_same_training(actual, expected, rtol=1e-5, atol=1e-6):
    """The same finite losses (rtol 1e-5) and parameters (``rtol``,
    ``atol``: float32 training, the same ops in another order)."""
    actual_losses, actual_params = actual
    expected_losses, expected_params = expected
    assert np.isfinite(expected_losses).all()
    np.testing.assert_allclose(actual_losses, expected_losses, rtol=1e-5)
    for a, e in zip(actual_params, expected_params, strict=True):
        np.testing.assert_allclose(a.numpy(), e.numpy(), rtol=rtol, atol=atol)


@torch_only
@pytest.mark.parametrize("route", ["eager", "lazy"])
def test_discrete_hmm_example_trains_as_eager(route):
    import torch

    # the example's dtypes: float32 parameters, int64 data
    params = [
        torch.tensor([[0.2, 0.8], [0.7, 0.3]]),
        torch.tensor([[0.4, 0.6], [0.1, 0.9]]),
    ]
    data = torch.ones(10, dtype=torch.long)
    model = discrete_hmm_model if route == "eager" else lazily(discrete_hmm_model)
    jitted = jit(model)
    assert_same_training(train(jitted, params, data), train(model, params, data))
    assert jitted.cache_info()["compiled"] == 1  # one program, every step


@torch_only
@pytest.mark.parametrize("route", ["eager", "lazy"])
def test_kalman_filter_example_trains_as_eager(route):
    import torch

    params = [torch.tensor(0.1), torch.tensor(0.5)]
    torch.manual_seed(0)
    data = torch.randn(10)
    model = kalman_filter_model if route == "eager" else lazily(kalman_filter_model)
    jitted = jit(model)
    assert_same_training(train(jitted, params, data), train(model, params, data))
    assert jitted.cache_info()["compiled"] == 1


# --------------------------------------------------------- examples/slds.py
def slds_model(trans_probs, trans_noise, emit_noise, data):
    """examples/slds.py's model, under its own ``moment_matching``
    decorator, its parameters (funsor Tensors) as arguments."""
    import funsor.torch.distributions as dist
    import torch

    @funsor.interpretations.moment_matching
    def model(data):
        log_prob = funsor.Number(0.0)
        s_curr = Tensor(torch.tensor(0), dtype=2)
        x_curr = Tensor(torch.tensor(0.0))
        for t, y in enumerate(data):
            s_prev = s_curr
            x_prev = x_curr
            s_curr = funsor.Variable(f"s_{t}", Bint[2])
            log_prob += dist.Categorical(trans_probs[s_prev], value=s_curr)
            x_curr = funsor.Variable(f"x_{t}", funsor.Real)
            log_prob += dist.Normal(x_prev, trans_noise[s_curr], value=x_curr)
            if t > 0:
                log_prob = log_prob.reduce(ops.logaddexp, {s_prev.name, x_prev.name})
            log_prob += dist.Normal(x_curr, emit_noise, value=y)
        return log_prob.reduce(ops.logaddexp)

    return model(data)


@torch_only
def test_slds_example_trains_as_eager():
    import torch

    params = [
        torch.tensor([[0.9, 0.1], [0.1, 0.9]]),
        torch.tensor([0.1, 1.0]),
        torch.tensor(0.5),
    ]
    torch.manual_seed(0)
    data = torch.randn(10)
    jitted = jit(slds_model)

    def eager_step(*args):
        *params, data = args
        return slds_model(*map(Tensor, params), data)

    def jitted_step(*args):
        *params, data = args
        return jitted(*map(Tensor, params), data)

    assert_same_training(
        train(jitted_step, params, data), train(eager_step, params, data)
    )
    assert jitted.cache_info()["compiled"] == 1


# --------------------------------------------------------- examples/pcfg.py
def pcfg_uniform(components):
    """examples/pcfg.py's ``Uniform``: a uniform mixture of components."""
    components = tuple(components)
    if len(components) == 1:
        return components[0]
    var = funsor.Variable("v", Bint[len(components)])
    mixture = funsor.terms.Stack(var.name, components).reduce(ops.logaddexp, var.name)
    return mixture - math.log(len(components))


def pcfg_model(size, position=0):
    """examples/pcfg.py's grammar over ``size`` binary symbols."""
    if size == 1:
        name = str(position)
        return pcfg_uniform(
            (
                funsor.delta.Delta(name, funsor.Number(0, 2)),
                funsor.delta.Delta(name, funsor.Number(1, 2)),
            )
        )
    return pcfg_uniform(
        pcfg_model(t, position) + pcfg_model(size - t, t + position)
        for t in range(1, size)
    )


@pytest.mark.parametrize("size", [2, 3, 4])
def test_pcfg_example_log_prob(size):
    model = pcfg_model(size)

    def log_prob(data):
        obs = {str(i): data(i) for i in range(size)}
        return model(**obs)

    data = Tensor(
        funsor.testing.randint(0, 2, (size,)), OrderedDict(i=Bint[size]), dtype=2
    )
    expected = log_prob(data)
    assert_close(jit(log_prob)(data), expected)


# ------------------------------------------------------- examples/talbot.py
@funsor.factory.make_funsor
def InverseLaplace(
    F: funsor.factory.Has[{"s"}],  # noqa: F821  (a variable name, not a type)
    t: funsor.Funsor,
    s: funsor.factory.Bound,
) -> funsor.factory.Fresh[lambda F: F]:
    """examples/talbot.py's inverse Laplace transform of F(s) at times t:
    no closed form (lazy), approximated by the ``Talbot`` interpretation."""
    return None


class Talbot(funsor.interpretations.StatefulInterpretation):
    """examples/talbot.py's numerical inversion, with ``num_steps`` terms."""

    def __init__(self, num_steps):
        super().__init__("talbot")
        self.num_steps = num_steps


@Talbot.register(InverseLaplace, funsor.Funsor, funsor.Funsor, funsor.Variable)
def talbot(self, F, t, s):
    import torch

    n = self.num_steps
    k = torch.arange(1, n)
    cot = 1 / (math.pi / n * k).tan()
    delta = torch.zeros(n, dtype=torch.complex64)
    delta[0] = 2 * n / 5
    delta[1:] = 2 * math.pi / 5 * k * (cot + 1j)
    gamma = torch.zeros(n, dtype=torch.complex64)
    gamma[0] = 0.5 * delta[0].exp()
    gamma[1:] = (1 + 1j * math.pi / n * k * (1 + cot**2) - 1j * cot) * delta[1:].exp()
    delta = Tensor(delta)["num_steps"]
    gamma = Tensor(gamma)["num_steps"]
    ilt = 0.4 / t * (gamma * F(**{s.name: delta / t})).reduce(ops.add, "num_steps")
    return Tensor(ilt.data.real, ilt.inputs)  # a complex program, a real result


def talbot_loss():
    """The example's n-step kinetics fit: |InverseLaplace(F) - data| summed
    over time points, lazy in ``rate`` and ``nsteps``."""
    import torch

    rate = funsor.Variable("rate", funsor.Real)
    nsteps = funsor.Variable("nsteps", funsor.Real)
    s = funsor.Variable("s", funsor.Real)
    time = Tensor(torch.arange(0.04, 1.04, 0.04))["timepoint"]
    noise = Tensor(torch.randn(time.inputs["timepoint"].size))["timepoint"] / 500
    curve = 1 - torch.igammac(torch.tensor(4), 20 * time.data)
    data = Tensor(curve)["timepoint"] + noise
    F = rate**nsteps / (s * (rate + s) ** nsteps)
    pred = InverseLaplace(F, time, "s")
    return (pred - data).abs().reduce(ops.add, "timepoint")


@torch_only
def test_talbot_example_trains_as_eager():
    import torch

    torch.manual_seed(0)
    loss = talbot_loss()

    def step(rate, nsteps, data=None):
        with Talbot(num_steps=32):
            return -loss(rate=Tensor(rate), nsteps=Tensor(nsteps))

    params = [torch.tensor(5.0), torch.tensor(2.0)]  # the example's start
    jitted = jit(step)
    assert_same_training(train(jitted, params, None), train(step, params, None))
    assert jitted.cache_info()["compiled"] == 1


# ---------------------------------------------------------- examples/vae.py
def vae_networks():
    """examples/vae.py's encoder and decoder (float32 torch modules, their
    parameters captured by ``funsor.function``, as the example does)."""
    import typing

    import torch
    from funsor.domains import Reals
    from torch import nn
    from torch.nn import functional as F

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(784, 400)
            self.fc21 = nn.Linear(400, 20)
            self.fc22 = nn.Linear(400, 20)

        def forward(self, image: Reals[28, 28]) -> typing.Tuple[Reals[20], Reals[20]]:  # noqa: UP006
            image = image.reshape(image.shape[:-2] + (-1,))
            h1 = F.relu(self.fc1(image))
            return self.fc21(h1), self.fc22(h1).exp()

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc3 = nn.Linear(20, 400)
            self.fc4 = nn.Linear(400, 784)

        def forward(self, z: Reals[20]) -> Reals[28, 28]:
            h3 = F.relu(self.fc3(z))
            out = torch.sigmoid(self.fc4(h3))
            return out.reshape(out.shape[:-1] + (28, 28))

    return Encoder(), Decoder()


@torch_only
def test_vae_example_loss_and_gradients_equal_eager():
    import funsor.torch.distributions as dist
    import pyro
    import torch

    torch.manual_seed(0)
    encoder, decoder = vae_networks()
    encode, decode = funsor.function(encoder), funsor.function(decoder)

    @funsor.montecarlo.MonteCarlo()
    def loss_function(data, subsample_scale):
        loc, scale = encode(data)
        q = funsor.Independent(
            dist.Normal(loc["i"], scale["i"], value="z_i"), "z", "i", "z_i"
        )
        probs = decode("z")
        p = dist.Bernoulli(probs["x", "y"], value=data["x", "y"])
        p = p.reduce(ops.add, {"x", "y"})
        elbo = funsor.Integrate(q, p - q, "z")
        elbo = elbo.reduce(ops.add, "batch") * subsample_scale
        return -elbo

    images = (torch.rand(8, 28, 28) > 0.5).float()  # a batch of binary images
    data = Tensor(images, OrderedDict(batch=Bint[8]))
    params = list(encoder.parameters()) + list(decoder.parameters())
    jitted = jit(loss_function)
    for seed in (1, 2):  # compiles, then runs the cached program
        with pyro.validation_enabled(False):  # as the example
            torch.manual_seed(seed)
            expected = loss_function(data, 7.5)
            torch.manual_seed(seed)
            actual = jitted(data, 7.5)
        assert_close(actual, expected, rtol=1e-5)
        expected_grads = torch.autograd.grad(expected.data, params)
        actual_grads = torch.autograd.grad(actual.data, params)
        for a, e in zip(actual_grads, expected_grads, strict=True):
            torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4 * e.abs().max())
    assert jitted.cache_info()["compiled"] == 1


# ------------------------------------------------------- examples/sensor.py
def sensor_model(num_sensors):
    """examples/sensor.py's biased-sensor Kalman filter (an ``nn.Module``,
    float32 parameters), its forward in two parts: ``factors`` builds the
    example's funsors from the parameters with torch and Pyro calls
    (``.exp()``, ``MultivariateNormal``, ``dist_to_funsor``), which ``jit``
    cannot trace as parameters of the program; ``filter`` is the
    example's filtering loop over those funsors, the per-step work
    ``jit`` compiles. It returns the log-likelihood and the final state's
    posterior as a funsor (the example converts it with ``funsor_to_mvn``
    to a torch distribution, neither an array nor a funsor: outside
    ``jit``)."""
    import funsor.torch.distributions as f_dist
    import torch
    from funsor.domains import Reals
    from funsor.pyro.convert import dist_to_funsor
    from pyro import distributions as pdist
    from torch import nn

    process_noise = torch.tensor(
        [
            [1 / 3, 0.0, 1 / 2, 0.0],
            [0.0, 1 / 3, 0.0, 1 / 2],
            [1 / 2, 0.0, 1.0, 0.0],
            [0.0, 1 / 2, 0.0, 1.0],
        ]
    )
    transition_matrix = torch.tensor(
        [
            [1.0, 0.0, 0.0, 0.0],
            [0.0, 1.0, 0.0, 0.0],
            [1.0, 0.0, 1.0, 0.0],
            [0.0, 1.0, 0.0, 1.0],
        ]
    )

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.log_bias_scale = nn.Parameter(torch.tensor(0.0))
            self.log_obs_noise = nn.Parameter(torch.tensor(0.0))
            self.log_trans_noise = nn.Parameter(torch.tensor(0.0))

        def factors(self):
            obs_dim = 2 * num_sensors
            bias_scale = self.log_bias_scale.exp()
            obs_noise = self.log_obs_noise.exp()
            trans_noise = self.log_trans_noise.exp()
            bias = funsor.Variable("bias", Reals[obs_dim])
            bias_dist = dist_to_funsor(
                pdist.MultivariateNormal(
                    torch.zeros(obs_dim), scale_tril=bias_scale * torch.eye(obs_dim)
                )
            )(value=bias)
            init = dist_to_funsor(
                pdist.MultivariateNormal(torch.zeros(4), scale_tril=100 * torch.eye(4))
            )(value="state")
            prev = funsor.Variable("prev", Reals[4])
            curr = funsor.Variable("curr", Reals[4])
            trans_dist = f_dist.MultivariateNormal(
                loc=prev @ transition_matrix,
                scale_tril=trans_noise * torch.linalg.cholesky(process_noise),
                value=curr,
            )
            state = funsor.Variable("state", Reals[4])
            obs = funsor.Variable("obs", Reals[obs_dim])
            observation_matrix = Tensor(
                torch.eye(4, 2).unsqueeze(-1).expand(-1, -1, num_sensors).reshape(4, -1)
            )
            obs_loc = state @ observation_matrix + bias
            observation_dist = f_dist.MultivariateNormal(
                loc=obs_loc, scale_tril=obs_noise * torch.eye(obs_dim), value=obs
            )
            return bias_dist, init, trans_dist, observation_dist

        @staticmethod
        def filter(bias_dist, init, trans_dist, observation_dist, observations):
            logp = bias_dist
            curr = "state_init"
            logp += init(state=curr)
            for t, x in enumerate(observations):
                prev, curr = curr, f"state_{t}"
                logp += trans_dist(prev=prev, curr=curr)
                logp += observation_dist(state=curr, obs=x)
                logp = logp.reduce(ops.logaddexp, prev)
            logp = logp.reduce(ops.logaddexp, "bias")
            posterior = logp  # over the final state
            return logp.reduce(ops.logaddexp).data, posterior

        def forward(self, observations, filter=None):
            return (filter or self.filter)(*self.factors(), observations)

    return Model()


def sensor_observations(num_frames, num_sensors):
    """Biased, noisy observations of a random walk by ``num_sensors``
    sensors of a position in the plane (float32, as the example's)."""
    import torch

    positions = torch.cumsum(torch.randn(num_frames, 2), 0)
    bias = 4.0 * torch.randn(2 * num_sensors)
    observations = positions.repeat(1, num_sensors) + bias
    return observations + torch.randn(num_frames, 2 * num_sensors)


@torch_only
def test_sensor_example_trains_as_eager():
    import torch
    from funsor.pyro.convert import funsor_to_mvn

    torch.manual_seed(0)
    num_sensors = 2
    observations = sensor_observations(5, num_sensors)

    def fit(filter):
        torch.manual_seed(1)
        model = sensor_model(num_sensors)
        optim = torch.optim.Adam(model.parameters(), lr=0.1, betas=(0.5, 0.8))
        losses = []
        for _ in range(3):
            optim.zero_grad()
            log_prob, posterior = model(observations, filter)
            loss = -log_prob
            loss.backward()
            losses.append(loss.item())
            optim.step()
        final_state = funsor_to_mvn(posterior, ndims=0).loc
        return losses, [p.detach() for p in model.parameters()], final_state

    jitted = jit(sensor_model(num_sensors).filter)
    expected, actual = fit(None), fit(jitted)
    assert jitted.cache_info()["compiled"] == 1
    assert_same_training(actual[:2], expected[:2], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(actual[2].detach(), expected[2].detach(), rtol=1e-4)


@torch_only
def test_sensor_example_forward_as_written_is_refused_not_frozen():
    # The example's forward computes bias_scale = log_bias_scale.exp() with
    # a torch call: jit would hold that value and its gradient graph from
    # the one tracing call. It refuses, naming the tensor, rather than
    # return stale values after the first optimizer step.
    from funsor_lowering.tracing.tracer import UntracedValueError

    model = sensor_model(2)
    with pytest.raises(UntracedValueError, match="require grad"):
        jit(model)(sensor_observations(3, 2))


# ----------------------------------------------------- examples/eeg_slds.py
def eeg_slds_model(num_components=2, hidden_dim=3, obs_dim=4, lag=1):
    """examples/eeg_slds.py's switching linear dynamical system (its
    defaults: the transition matrix depends on the switching state), with
    its ``log_prob`` in two parts: ``factors`` (the example's
    ``get_tensors_and_dists``: torch and Pyro calls on the parameters,
    outside ``jit``) and ``loop``, the example's moment-matching filter
    over those funsors, which ``jit`` compiles. Data: EEG-like float32
    readings (the example downloads its data set)."""
    import funsor.torch.distributions as dist
    import pyro.distributions as pdist
    import torch
    from funsor.pyro.convert import matrix_and_mvn_to_funsor, mvn_to_funsor
    from torch import nn

    class SLDS(nn.Module):
        def __init__(self):
            super().__init__()
            self.transition_logits = nn.Parameter(
                0.1 * torch.randn(num_components, num_components)
            )
            self.transition_matrix = nn.Parameter(
                torch.eye(hidden_dim)
                + 0.05 * torch.randn(num_components, hidden_dim, hidden_dim)
            )
            self.log_transition_noise = nn.Parameter(0.1 * torch.randn(hidden_dim))
            self.observation_matrix = nn.Parameter(
                0.3 * torch.randn(hidden_dim, obs_dim)
            )
            self.log_obs_noise = nn.Parameter(0.1 * torch.randn(obs_dim))
            self.x_init_mvn = mvn_to_funsor(
                pdist.MultivariateNormal(
                    torch.zeros(hidden_dim), torch.eye(hidden_dim)
                ),
                real_inputs=OrderedDict([("x_0", funsor.Reals[hidden_dim])]),
            )

        def factors(self):
            trans_logits = self.transition_logits - self.transition_logits.logsumexp(
                dim=-1, keepdim=True
            )
            trans_probs = Tensor(trans_logits, OrderedDict(s=Bint[num_components]))
            trans_mvn = pdist.MultivariateNormal(
                torch.zeros(hidden_dim), self.log_transition_noise.exp().diag_embed()
            )
            obs_mvn = pdist.MultivariateNormal(
                torch.zeros(obs_dim), self.log_obs_noise.exp().diag_embed()
            )
            x_trans_dist = matrix_and_mvn_to_funsor(
                self.transition_matrix, trans_mvn, ("s",), "x", "y"
            )
            y_dist = matrix_and_mvn_to_funsor(
                self.observation_matrix, obs_mvn, (), "x", "y"
            )
            return trans_probs, x_trans_dist, y_dist, self.x_init_mvn

        @staticmethod
        @funsor.interpretations.moment_matching
        def loop(trans_probs, x_trans_dist, y_dist, x_init_mvn, data):
            log_prob = funsor.Number(0.0)
            s_vars = {-1: Tensor(torch.tensor(0), dtype=num_components)}
            x_vars = {}
            for t, y in enumerate(data):
                s_vars[t] = funsor.Variable(f"s_{t}", Bint[num_components])
                x_vars[t] = funsor.Variable(f"x_{t}", funsor.Reals[hidden_dim])
                log_prob += dist.Categorical(
                    trans_probs(s=s_vars[t - 1]), value=s_vars[t]
                )
                if t == 0:
                    log_prob += x_init_mvn(value=x_vars[t])
                else:
                    log_prob += x_trans_dist(s=s_vars[t], x=x_vars[t - 1], y=x_vars[t])
                if t > lag - 1:
                    log_prob = log_prob.reduce(
                        ops.logaddexp, {s_vars[t - lag], x_vars[t - lag]}
                    )
                log_prob += y_dist(s=s_vars[t], x=x_vars[t], y=y)
            T = data.shape[0]
            for t in range(lag):
                log_prob = log_prob.reduce(
                    ops.logaddexp, {s_vars[T - lag + t], x_vars[T - lag + t]}
                )
            assert not log_prob.inputs, "unexpected free variables remain"
            return log_prob.data

        def log_prob(self, data, loop=None):
            return (loop or self.loop)(*self.factors(), data)

    return SLDS()


@torch_only
def test_eeg_slds_example_trains_as_eager():
    import torch

    def fit(loop):
        torch.manual_seed(0)
        slds = eeg_slds_model()
        data = torch.randn(6, 4)
        optim = torch.optim.Adam(slds.parameters(), lr=0.03)
        losses = []
        for _ in range(3):
            optim.zero_grad()
            loss = -slds.log_prob(data, loop)
            loss.backward()
            losses.append(loss.item())
            optim.step()
        return losses, [p.detach() for p in slds.parameters()]

    jitted = jit(eeg_slds_model().loop)
    expected, actual = fit(None), fit(jitted)
    assert jitted.cache_info()["compiled"] == 1
    assert_same_training(actual, expected, rtol=1e-4, atol=1e-5)


# -------------------------------------------------- examples/mixed_hmm/*.py
MIXED_HMM_MISSING = 1e-6  # seal_data.py's stand-in for missing observations


def mixed_hmm_data(sizes):
    """seal_data.py's ``prepare_fake``: float32 observations (step, angle,
    omega) of shape (individual, group, time), masks, and missing values."""
    import torch

    observations = torch.randn(
        (sizes["individual"], sizes["group"], sizes["timesteps"], 3)
    ).abs()
    observations[observations >= 1.0] = 0.5
    mask_i = (observations > float("-inf")).any(dim=-1).any(dim=-1)
    mask_t = (observations > float("-inf")).all(dim=-1)
    observations[observations == 0.0] = MIXED_HMM_MISSING
    names = ("step", "angle", "omega")
    # model.py's initialize_raggedness_masks: float masks over (i, g, t)
    shape = mask_t.shape
    mask_i = mask_i.unsqueeze(-1).expand(shape).to(observations.dtype)
    mask_t = mask_t.to(observations.dtype)
    return {n: observations[..., k] for k, n in enumerate(names)}, mask_i, mask_t


def mixed_hmm_params(sizes):
    """model.py's ``pyro.param`` values for discrete group and individual
    random effects (constrained values; the unconstrained ones train)."""
    import torch
    from torch.distributions import biject_to, constraints

    N_v, N_state, N_c = sizes["random"], sizes["state"], sizes["group"]
    simplex, positive = constraints.simplex, constraints.positive
    inits = {
        "probs_e_g": (torch.randn(N_v).abs(), simplex),
        "theta_g": (torch.randn(N_v, N_state, N_state), constraints.real),
        "probs_e_i": (torch.randn(N_c, N_v).abs(), simplex),
        "theta_i": (torch.randn(N_c, N_v, N_state, N_state), constraints.real),
        "step_zi_param": (torch.ones(N_state, 2), simplex),
        "step_param_concentration": (torch.randn(N_state).abs(), positive),
        "step_param_rate": (torch.randn(N_state).abs(), positive),
        "angle_param_concentration": (torch.randn(N_state).abs(), positive),
        "angle_param_loc": (torch.randn(N_state).abs(), constraints.real),
        "omega_zi_param": (torch.ones(N_state, 2), simplex),
        "omega_param_concentration0": (torch.randn(N_state).abs(), positive),
        "omega_param_concentration1": (torch.randn(N_state).abs(), positive),
    }
    unconstrained = {
        name: biject_to(c).inv(v).detach().requires_grad_()
        for name, (v, c) in inits.items()
    }
    constraint = {name: c for name, (_, c) in inits.items()}

    def constrained():
        return {n: biject_to(constraint[n])(u) for n, u in unconstrained.items()}

    return unconstrained, constrained


def mixed_hmm_loss(p, observations, mask_i, mask_t, zeroinflation=True):
    """model.py's ``Model.__call__`` (discrete group and individual random
    effects) and experiment.py's ``parallel_loss_fn``: -log p(data), the
    chain over time reduced by ``MarkovProduct``, the plates ``g`` and
    ``i`` by a lazy, optimized ``sum_product``."""
    import funsor.torch.distributions as dist
    import torch

    N_i, N_c, T = mask_t.shape
    N_v, N_state = p["probs_e_g"].shape[0], p["step_zi_param"].shape[0]
    batch = OrderedDict(i=Bint[N_i], g=Bint[N_c], t=Bint[T])
    obs = {k: Tensor(v, batch) for k, v in observations.items()}
    masks = {"individual": Tensor(mask_i, batch), "timestep": Tensor(mask_t, batch)}
    y_curr = OrderedDict(y_curr=Bint[N_state])

    gamma = Tensor(torch.zeros(N_state, N_state), OrderedDict(y_prev=Bint[N_state]))
    plate_g = Tensor(torch.zeros(N_c), OrderedDict(g=Bint[N_c]))
    plate_i = Tensor(torch.zeros(N_i), OrderedDict(i=Bint[N_i]))
    log_prob = []
    e_g = funsor.Variable("e_g", Bint[N_v])
    log_prob.append(plate_g + dist.Categorical(probs=Tensor(p["probs_e_g"]))(value=e_g))
    theta_g = Tensor(p["theta_g"], OrderedDict(e_g=Bint[N_v], y_prev=Bint[N_state]))
    eps_g = (plate_g + theta_g)(e_g=e_g)
    e_i = funsor.Variable("e_i", Bint[N_v])
    probs_e_i = Tensor(p["probs_e_i"], OrderedDict(g=Bint[N_c]))
    log_prob.append(
        plate_g
        + plate_i
        + dist.Categorical(probs=probs_e_i)(value=e_i) * masks["individual"](t=0)
    )
    theta_i = Tensor(
        p["theta_i"],
        OrderedDict(g=Bint[N_c], e_i=Bint[N_v], y_prev=Bint[N_state]),
    )
    eps_i = plate_i + plate_g + theta_i(e_i=e_i)
    gamma = gamma + eps_g + eps_i
    gamma_y = gamma(y_prev="y(t=1)")
    y = funsor.Variable("y", Bint[N_state])
    y_dist = (
        plate_g
        + plate_i
        + dist.Categorical(probs=gamma_y.exp() / gamma_y.exp().sum())(value=y)
    )

    def observed(name, dist_class, **params):
        """An observation site: ``dist_class`` with the parameters (named
        by their ``pyro.param`` names) of hidden state ``y``."""
        at_y = {k: Tensor(p[param], y_curr)(y_curr=y) for k, param in params.items()}
        return plate_g + plate_i + dist_class(**at_y)(value=obs[name])

    obs_dists = {
        "step": observed(
            "step",
            dist.Gamma,
            concentration="step_param_concentration",
            rate="step_param_rate",
        ),
        "angle": observed(
            "angle",
            dist.VonMises,
            loc="angle_param_loc",
            concentration="angle_param_concentration",
        ),
        "omega": observed(
            "omega",
            dist.Beta,
            concentration1="omega_param_concentration1",
            concentration0="omega_param_concentration0",
        ),
    }
    if zeroinflation:
        for name in ("step", "omega"):
            zi = f"zi_{name}"
            zi_param = Tensor(p[f"{name}_zi_param"], y_curr)
            zi_dist = dist.Categorical(probs=zi_param(y_curr=y))(value=zi)
            missing = (
                plate_g + plate_i + dist.Delta(MIXED_HMM_MISSING, 0.0)(value=obs[name])
            )
            both = funsor.terms.Stack(zi, (obs_dists[name], missing))
            obs_dists[name] = (zi_dist + both).reduce(ops.logaddexp, zi)
    hmm_factor = obs_dists["step"] + obs_dists["angle"] + obs_dists["omega"]
    hmm_factor = hmm_factor * masks["individual"] * masks["timestep"]
    log_prob.insert(0, hmm_factor + y_dist)

    # experiment.py's parallel_loss_fn
    t_term, new_factors = log_prob[0], log_prob[1:]
    t = funsor.to_funsor("t", t_term.inputs["t"])
    chain = funsor.sum_product.MarkovProduct(
        ops.logaddexp, ops.add, t_term, t, {"y(t=1)": "y"}
    )
    new_factors = [chain] + new_factors
    eliminate = frozenset().union(*(f.inputs for f in new_factors))
    with lazy:
        loss = funsor.sum_product.sum_product(
            ops.logaddexp, ops.add, new_factors, eliminate, frozenset(["g", "i"])
        )
    loss = apply_optimizer(loss)
    assert not loss.inputs
    return -loss.data


@torch_only
def test_mixed_hmm_example_trains_as_eager():
    import torch

    sizes = {"state": 3, "random": 2, "group": 2, "individual": 3, "timesteps": 5}

    def fit(loss_fn):
        torch.manual_seed(0)
        observations, mask_i, mask_t = mixed_hmm_data(sizes)
        unconstrained, constrained = mixed_hmm_params(sizes)
        optim = torch.optim.Adam(unconstrained.values(), lr=0.05)
        losses = []
        for _ in range(3):
            optim.zero_grad()
            loss = loss_fn(constrained(), observations, mask_i, mask_t)
            loss.backward()
            losses.append(loss.item())
            optim.step()
        return losses, [u.detach() for u in unconstrained.values()]

    jitted = jit(mixed_hmm_loss)
    expected, actual = fit(mixed_hmm_loss), fit(jitted)
    assert jitted.cache_info()["compiled"] == 1
    assert_same_training(actual, expected, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------ examples/minipyro.py
def minipyro_model_and_guide():
    """The example's conjugate model (a Normal ``loc`` observed through a
    plate of ``data``) and its guide, written against pyroapi."""
    from pyroapi import distributions as dist
    from pyroapi import pyro
    from torch.distributions import constraints

    def model(data):
        loc = pyro.sample("loc", dist.Normal(0.0, 1.0))
        with pyro.plate("data", len(data), dim=-1):
            pyro.sample("obs", dist.Normal(loc, 1.0), obs=data)

    def guide(data):
        import torch

        guide_loc = pyro.param("guide_loc", torch.tensor(0.0))
        guide_scale = pyro.param(
            "guide_scale", torch.tensor(1.0), constraint=constraints.positive
        )
        pyro.sample("loc", dist.Normal(guide_loc, guide_scale))

    return model, guide


def minipyro_training(loss_fn, data, steps=3):
    """minipyro's ``SVI.step`` around ``loss_fn(data)``: backward, one Adam
    step per parameter of the param store, gradients zeroed. The losses,
    and the constrained ``guide_loc`` and ``guide_scale`` after each step
    (one flat list)."""
    import torch
    from pyroapi import optim, pyro

    torch.manual_seed(0)
    pyro.get_param_store().clear()
    adam = optim.Adam({"lr": 0.02})
    losses, trajectory = [], []
    for step in range(steps):
        torch.manual_seed(step + 1)  # the Monte Carlo draw of each step
        loss = loss_fn(data)
        funsor.to_data(loss).backward()
        params = [value for value, _ in pyro.get_param_store().values()]
        adam(params)
        for p in params:
            p.grad = torch.zeros_like(p.grad)
        losses.append(loss.item())
        for name in ("guide_loc", "guide_scale"):
            trajectory.append(pyro.param(name).data.detach().clone())
    return losses, trajectory


@torch_only
def test_minipyro_example_trains_as_eager():
    import torch
    from funsor.montecarlo import MonteCarlo
    from pyroapi import infer, pyro_backend

    model, guide = minipyro_model_and_guide()
    torch.manual_seed(0)
    data = torch.randn(100) + 3.0  # float32, as the example
    with pyro_backend("funsor"), MonteCarlo():
        elbo = infer.Trace_ELBO()

        def loss_fn(data):
            return elbo(model, guide, data)

        jitted = jit(loss_fn)
        expected = minipyro_training(loss_fn, data)
        actual = minipyro_training(jitted, data)
    assert jitted.cache_info()["compiled"] == 1
    # the steps moved guide_scale: the program reads the live param store
    assert expected[1][1] != expected[1][-1]
    assert_same_training(actual, expected)
