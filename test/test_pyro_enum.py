"""funsor_lowering.pyro's enumeration losses and infer_discrete against
pyro.contrib.funsor's, on the models of Pyro's examples/contrib/funsor/hmm.py
and Pyro's own infer_discrete scenarios: equal losses, gradients and SVI
trajectories, equal MAP values, samples from the same distribution, the
same errors. torch only (Pyro)."""

import functools

import funsor
import pytest

if funsor.get_backend() != "torch":
    pytest.skip("Pyro runs on the torch backend", allow_module_level=True)

import pyro.contrib.funsor  # noqa: E402, F401  (registers the pyroapi backend)
import pyro.contrib.funsor.infer as contrib  # noqa: E402
import torch  # noqa: E402
from pyroapi import distributions as dist  # noqa: E402
from pyroapi import handlers, infer, optim, pyro, pyro_backend  # noqa: E402

import funsor_lowering.pyro as compiled  # noqa: E402
from benchmarks import hmm_models  # noqa: E402
from benchmarks.hmm_models import (  # noqa: E402
    MODELS,
    PLATE_NESTING,
    VECTORIZED,
    guide_for,
    jsb_like_data,
)
from funsor_lowering.pyro import discrete, enum_elbo  # noqa: E402
from funsor_lowering.pyro.program_cache import ProgramCache  # noqa: E402

pytestmark = pytest.mark.usefixtures("float64_contrib_backend")


def small_model(key, hidden_dim=4):
    model = MODELS[key]

    def bound(*args, **kwargs):
        return model(*args, hidden_dim=hidden_dim, **kwargs)

    return bound


def loss_class(module, key, jit=False):
    markov = "Markov" if key in VECTORIZED else ""
    return getattr(module, f"{'Jit' if jit else ''}Trace{markov}Enum_ELBO")


def train(module, key, data, steps=3, jit=False, **elbo_kwargs):
    """SVI losses and final parameters of hmm.py's training, from seed 0."""
    pyro.set_rng_seed(0)
    pyro.clear_param_store()
    hmm_models._NOTE_LOGITS.clear()
    model = small_model(key)
    elbo = loss_class(module, key, jit)(
        max_plate_nesting=PLATE_NESTING[key], **elbo_kwargs
    )
    svi = infer.SVI(model, guide_for(model), optim.Adam({"lr": 0.05}), elbo)
    losses = [svi.step(*data) for _ in range(steps)]
    params = {k: v.detach().clone() for k, v in pyro.get_param_store().items()}
    return losses, params


def assert_same_training(expected, actual):
    (expected_losses, expected_params), (actual_losses, actual_params) = (
        expected,
        actual,
    )
    assert actual_losses == pytest.approx(expected_losses, rel=1e-10, abs=1e-9)
    assert actual_params.keys() == expected_params.keys()
    for name, value in expected_params.items():
        torch.testing.assert_close(actual_params[name], value, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("key", list(MODELS))
def test_hmm_models_train_as_contrib(key):
    data = jsb_like_data(3, 6, 5)
    data = (data[0].double(), data[1])
    expected = train(contrib, key, data)
    assert_same_training(expected, train(compiled, key, data))


@pytest.mark.parametrize("key", ["1", "7"])
def test_jit_losses_train_as_contrib(key):
    data = jsb_like_data(3, 6, 5)
    data = (data[0].double(), data[1])
    expected = train(contrib, key, data, jit=True, ignore_jit_warnings=True)
    actual = train(compiled, key, data, jit=True, ignore_jit_warnings=True)
    assert_same_training(expected, actual)


def loss_and_grads(module, key, data, **elbo_kwargs):
    model = small_model(key)
    elbo = loss_class(module, key)(max_plate_nesting=PLATE_NESTING[key], **elbo_kwargs)
    pyro.set_rng_seed(1)
    loss = elbo.differentiable_loss(model, guide_for(model), *data)
    params = dict(pyro.get_param_store().named_parameters())
    grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
    return loss, dict(zip(params, grads))


@pytest.mark.parametrize("key", ["1", "3", "7"])
def test_gradients_equal_contrib(key):
    data = jsb_like_data(2, 5, 4, seed=3)
    data = (data[0].double(), data[1])
    pyro.clear_param_store()
    expected_loss, expected = loss_and_grads(contrib, key, data)
    actual_loss, actual = loss_and_grads(compiled, key, data)
    torch.testing.assert_close(actual_loss, expected_loss, rtol=1e-10, atol=1e-10)
    assert actual.keys() == expected.keys() and expected
    for name, grad in expected.items():
        assert grad is not None and grad.abs().sum() > 0
        torch.testing.assert_close(actual[name], grad, rtol=1e-9, atol=1e-9)


def test_one_program_per_structure_and_new_shapes_recompile(monkeypatch):
    compiles = []
    real_compile = enum_elbo._CompiledEnumLoss._compile

    def counting_compile(self, *args):
        compiles.append(args)
        return real_compile(self, *args)

    monkeypatch.setattr(enum_elbo._CompiledEnumLoss, "_compile", counting_compile)
    monkeypatch.setattr(enum_elbo, "PROGRAMS", ProgramCache())
    long, short = jsb_like_data(3, 6, 5, seed=5), jsb_like_data(3, 4, 5, seed=6)
    long, short = (long[0].double(), long[1]), (short[0].double(), short[1])
    for data, compiled_so_far in [(long, 1), (long, 1), (short, 2), (long, 2)]:
        pyro.clear_param_store()
        expected, _ = loss_and_grads(contrib, "1", data)
        pyro.clear_param_store()
        actual, _ = loss_and_grads(compiled, "1", data)
        torch.testing.assert_close(actual, expected, rtol=1e-10, atol=1e-10)
        assert len(compiles) == compiled_so_far


def mixture_model(data):
    """A continuous global, an enumerated local and a subsampled plate:
    guide samples, a common subsampling scale and enumeration together."""
    weights = pyro.param("weights", torch.tensor([0.3, 0.7]))
    shift = pyro.sample("shift", dist.Normal(0.0, 1.0))
    locs = pyro.param("locs", torch.tensor([-1.0, 2.0]))
    with pyro.plate("data", 6, subsample_size=len(data), dim=-1):
        z = pyro.sample("z", dist.Categorical(weights), infer={"enumerate": "parallel"})
        pyro.sample("x", dist.Normal(locs[z] + shift, 1.0), obs=data)


def mixture_guide(data):
    loc = pyro.param("shift_loc", torch.tensor(0.1))
    pyro.sample("shift", dist.Normal(loc, 0.5))


def enumerated_guide_model():
    probs = pyro.param("probs", torch.tensor([0.2, 0.5, 0.3]))
    c = pyro.sample("c", dist.Categorical(probs))
    with pyro.plate("obs", 2, dim=-1):
        pyro.sample("x", dist.Normal(c.double(), 1.0), obs=torch.tensor([0.5, 1.5]))


def enumerated_guide():
    q = pyro.param("q", torch.tensor([0.3, 0.3, 0.4]))
    pyro.sample("c", dist.Categorical(q), infer={"enumerate": "parallel"})


@pytest.mark.parametrize("num_particles", [1, 3])
def test_guide_samples_scales_and_particles_as_contrib(num_particles):
    data = torch.tensor([0.0, 1.0, 2.5])
    results = []
    for module in (contrib, compiled):
        pyro.clear_param_store()
        pyro.set_rng_seed(2)
        elbo = module.TraceEnum_ELBO(max_plate_nesting=1, num_particles=num_particles)
        svi = infer.SVI(mixture_model, mixture_guide, optim.Adam({"lr": 0.1}), elbo)
        results.append([svi.step(data) for _ in range(3)])
    assert results[1] == pytest.approx(results[0], rel=1e-10)


def test_guide_side_enumeration_as_contrib():
    results = []
    for module in (contrib, compiled):
        pyro.clear_param_store()
        elbo = module.TraceEnum_ELBO(max_plate_nesting=1)
        svi = infer.SVI(
            enumerated_guide_model, enumerated_guide, optim.Adam({"lr": 0.1}), elbo
        )
        results.append([svi.step() for _ in range(3)])
    assert results[1] == pytest.approx(results[0], rel=1e-10)


def bernoulli_enumerated():
    z = pyro.sample("z", dist.Bernoulli(0.3), infer={"enumerate": "parallel"})
    pyro.sample("x", dist.Normal(z, 1.0), obs=torch.tensor(0.5))


def flat_enumerated():
    z = pyro.sample(
        "z", dist.Categorical(torch.ones(3) / 3), infer={"enumerate": "flat"}
    )
    pyro.sample("x", dist.Normal(z.double(), 1.0), obs=torch.tensor(0.5))


def test_unsupported_sites_raise_naming_the_site():
    # pyro.contrib.funsor itself fails on an enumerated Bernoulli
    with pytest.raises(ValueError, match="Output mismatch"):
        contrib.TraceEnum_ELBO(max_plate_nesting=1).loss(
            bernoulli_enumerated, lambda: None
        )
    with pytest.raises(NotImplementedError, match="site 'z'.*Bernoulli"):
        compiled.TraceEnum_ELBO(max_plate_nesting=1).loss(
            bernoulli_enumerated, lambda: None
        )
    with pytest.raises(NotImplementedError, match="site 'z'.*flat"):
        compiled.TraceEnum_ELBO(max_plate_nesting=1).loss(flat_enumerated, lambda: None)


def markov_guide(data):
    x = 0
    probs = pyro.param("q", torch.ones(3, 3) / 3)
    for t in pyro.vectorized_markov(name="time", size=len(data), dim=-1):
        x = pyro.sample(
            f"x_{t}", dist.Categorical(probs[x]), infer={"enumerate": "parallel"}
        )


def test_guide_side_markov_enumeration_raises_contribs_error():
    data = torch.zeros(4)
    message = "does not yet support guide side Markov enumeration"
    for module in (contrib, compiled):
        elbo = module.TraceMarkovEnum_ELBO(max_plate_nesting=1)
        with pytest.raises(NotImplementedError, match=message):
            elbo.loss(lambda data: None, markov_guide, data)


# infer_discrete: Pyro's scenarios (tests/contrib/funsor/test_infer_discrete.py)
def gaussian_hmm(data, hidden_dim=6, state="states", observation="obs"):
    transition = 0.3 / hidden_dim + 0.7 * torch.eye(hidden_dim)
    means = torch.arange(float(hidden_dim))
    states = [0]
    for t in pyro.markov(range(len(data))):
        states.append(
            pyro.sample(f"{state}_{t}", dist.Categorical(transition[states[-1]]))
        )
        pyro.sample(
            f"{observation}_{t}", dist.Normal(means[states[-1]], 1.0), obs=data[t]
        )
    return states


@pytest.mark.parametrize("length", [1, 2, 10])
@pytest.mark.parametrize("temperature", [0, 1])
def test_infer_discrete_hmm_equals_contrib(length, temperature):
    data = [torch.tensor(float(v)) for v in torch.linspace(0, 5, length)]
    model = infer.config_enumerate(gaussian_hmm)
    results = []
    for module in (contrib, discrete):
        pyro.set_rng_seed(7)
        decoder = module.infer_discrete(model, temperature=temperature)
        results.append([int(s) for s in decoder(data)])
    # MAP is deterministic; sampling draws the same random numbers in the
    # same order, so it agrees too (distributions are tested below)
    assert results[1] == results[0]


def two_step_model(z1=None, z2=None):
    p = pyro.param("p", torch.tensor([[0.25, 0.75], [0.1, 0.9]]))
    loc = pyro.param("loc", torch.tensor([-1.0, 1.0]))
    z1 = pyro.sample("z1", dist.Categorical(p[0]), obs=z1)
    z2 = pyro.sample("z2", dist.Categorical(p[z1]), obs=z2)
    with pyro.plate("data", 3):
        pyro.sample("x1", dist.Normal(loc[z1], 1.0), obs=torch.tensor([-1.0, -1, 0]))
        pyro.sample("x2", dist.Normal(loc[z2], 1.0), obs=torch.tensor([-1.0, 1, 1]))


def exact_posterior():
    """p(z1, z2 | x) by conditioning on each of the four values."""
    log_joint = torch.zeros(2, 2)
    for z1 in range(2):
        for z2 in range(2):
            trace = handlers.trace(two_step_model).get_trace(
                torch.tensor(z1), torch.tensor(z2)
            )
            log_joint[z1, z2] = trace.log_prob_sum()
    return (log_joint - log_joint.logsumexp((0, 1))).exp()


def test_infer_discrete_map_and_sample_distributions():
    pyro.clear_param_store()
    posterior = exact_posterior()
    model = infer.config_enumerate(two_step_model)
    map_trace = handlers.trace(discrete.infer_discrete(model, -3, 0)).get_trace()
    best = divmod(int(posterior.argmax()), 2)
    assert (
        int(map_trace.nodes["z1"]["value"]),
        int(map_trace.nodes["z2"]["value"]),
    ) == best

    particles = pyro.plate("particles", 20000, dim=-2)(model)
    pyro.set_rng_seed(3)
    trace = handlers.trace(discrete.infer_discrete(particles, -3, 1)).get_trace()
    z1 = trace.nodes["z1"]["value"].reshape(-1)
    z2 = trace.nodes["z2"]["value"].reshape(-1)
    counts = torch.zeros(2, 2)
    counts.index_put_((z1, z2), torch.ones(len(z1)), accumulate=True)
    # 4 standard errors of a frequency out of 20000 draws is below 0.015
    torch.testing.assert_close(counts / len(z1), posterior, atol=0.015, rtol=0)


def test_infer_discrete_rejects_what_contrib_rejects():
    def model():
        pyro.sample("u", dist.Normal(0.0, 1.0))
        pyro.sample(
            "c", dist.Categorical(torch.ones(2) / 2), infer={"enumerate": "parallel"}
        )

    with pytest.raises(KeyError):
        contrib.infer_discrete(model, temperature=0)()
    with pytest.raises(NotImplementedError, match="site 'u'"):
        discrete.infer_discrete(model, temperature=0)()
    for module in (contrib, discrete):
        with pytest.raises(ValueError, match="temperature"):
            module.infer_discrete(model, temperature=0.5)()


def test_example_runs_as_a_script():
    from .helpers import run_example

    done = run_example(
        "enumerated_hmm.py", "-m", "1", "-n", "3", "--sequences", "3", "--length", "6"
    )
    assert done.returncode == 0, done.stderr
    assert "median step: contrib.funsor" in done.stdout


def conditioned_hmm(key, hidden_dim=4, data_dim=5):
    """hmm.py's model ``key`` with its ``probs_*`` sites fixed."""
    generator = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.rand(*shape, generator=generator)

    side = int(hidden_dim**0.5)
    probs = {
        "0": {
            "probs_x": rand(hidden_dim, hidden_dim),
            "probs_y": rand(hidden_dim, data_dim),
        },
        "2": {
            "probs_x": rand(hidden_dim, hidden_dim),
            "probs_y": rand(hidden_dim, 2, data_dim),
        },
        "3": {"probs_w": rand(side, side), "probs_x": rand(side, side)},
        "4": {"probs_w": rand(side, side), "probs_x": rand(side, side, side)},
        "6": {},
    }
    probs["1"] = probs["0"]
    for key_ in ("3", "4"):
        probs[key_]["probs_y"] = rand(side, side, data_dim)
    data = {
        k: v / v.sum(-1, keepdim=True) if k != "probs_y" else v
        for k, v in probs[key].items()
    }
    model = small_model(key, hidden_dim)
    return handlers.condition(model, data={k: v.double() for k, v in data.items()})


@pytest.mark.parametrize("key", ["0", "1", "2", "3", "4", "6"])
def test_infer_discrete_map_of_hmm_models_equals_pyros(key):
    # pyro.contrib.funsor's infer_discrete fails on models 1-4 (funsor's
    # adjoint of a contraction of three terms), Pyro's own does
    # not: MAP values equal (full-length sequences: masked steps are masked
    # differently by the two)
    import pyro.infer

    sequences, lengths = jsb_like_data(3, 5, 5)
    lengths[:] = 5
    data = (sequences.double(), lengths)
    model = conditioned_hmm(key)
    modules = [("pyro", pyro.infer), ("contrib.funsor", discrete)]
    if key in ("0", "6"):  # where pyro.contrib.funsor's succeeds
        modules.append(("contrib", contrib))
    else:
        with pytest.raises(AssertionError):
            contrib.infer_discrete(model, -1 - PLATE_NESTING[key], temperature=0)(*data)
    values = {}
    for backend, module in modules:
        with pyro_backend("pyro" if backend == "pyro" else "contrib.funsor"):
            pyro.clear_param_store()
            pyro.set_rng_seed(0)
            decoder = module.infer_discrete(
                model, -1 - PLATE_NESTING[key], temperature=0
            )
            trace = handlers.trace(decoder).get_trace(*data)
            values[backend] = {
                name: site["value"].squeeze()
                for name, site in trace.nodes.items()
                if site["type"] == "sample" and name[:2] in ("w_", "x_")
            }
    for backend in values:
        assert values[backend].keys() == values["pyro"].keys()
        for name, expected in values["pyro"].items():
            assert torch.equal(values[backend][name], expected), (backend, name)


def test_infer_discrete_samples_hmm_posterior_marginals():
    import pyro.infer

    sequences, lengths = jsb_like_data(2, 3, 5, seed=1)
    data = (sequences.double(), lengths)
    model = conditioned_hmm("1", hidden_dim=3)
    with pyro_backend("pyro"):
        pyro.clear_param_store()
        marginals = pyro.infer.TraceEnum_ELBO(max_plate_nesting=2).compute_marginals(
            model, lambda *args: None, *data
        )
        expected = marginals["x_1"].probs.squeeze()  # [sequences, states]
    pyro.set_rng_seed(0)
    decoder = discrete.infer_discrete(model, -3, temperature=1)
    draws = torch.stack(
        [
            handlers.trace(decoder).get_trace(*data).nodes["x_1"]["value"].reshape(-1)
            for _ in range(600)
        ]
    )
    frequencies = torch.stack([(draws == k).double().mean(0) for k in range(3)], -1)
    # 4 standard errors of a frequency out of 600 draws is at most 0.082
    torch.testing.assert_close(frequencies, expected, atol=0.082, rtol=0)


def test_infer_discrete_of_vectorized_markov_names_the_site():
    vectorized = small_model("7")
    data = jsb_like_data(2, 4, 5)
    decoder = discrete.infer_discrete(
        handlers.condition(
            vectorized, data={"probs_x": torch.eye(4), "probs_y": torch.rand(4, 5)}
        ),
        -4,
        temperature=0,
    )
    with pytest.raises(NotImplementedError, match=r"site 'x_slice\(0, 3, None\)'"):
        decoder(data[0].double(), data[1])


def test_infer_discrete_structures_differing_in_names_share_a_program(monkeypatch):
    renamed_hmm = functools.partial(gaussian_hmm, state="z", observation="y")
    monkeypatch.setattr(discrete, "PROGRAMS", ProgramCache())
    data = [torch.tensor(v) for v in (0.0, 3.0, 5.0, 2.0)]
    decoded = [
        [
            int(s)
            for s in discrete.infer_discrete(infer.config_enumerate(m), temperature=0)(
                data
            )
        ]
        for m in (gaussian_hmm, renamed_hmm)
    ]
    assert len(discrete.PROGRAMS) == 1
    assert decoded[1] == decoded[0]
    expected = contrib.infer_discrete(
        infer.config_enumerate(gaussian_hmm), temperature=0
    )(data)
    assert decoded[0] == [int(s) for s in expected]
