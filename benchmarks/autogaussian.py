"""AutoGaussian backends on a pyro-cov style model: SVI step and guide
sample times for ``dense``, ``funsor`` and ``compiled``, interleaved.

    python -m benchmarks.autogaussian [--repeats 5] [--sizes 5,10,20,8 5,30,50,8]

The model has the structure of Pyro's ``pyrocov_model_relaxed`` test model
(pyro-ppl's tests/infer/autoguide/test_gaussian.py), written here: global
scale sites, feature coefficients ``coef[F]``, per-strain ``rate_loc[S]``
and ``init_loc[S]``, per-place ``rate[P, S]`` and ``init[P, S]`` and a
multinomial likelihood over ``T`` time steps.
"""

import argparse
import os
import sys
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.timing import Report, interleaved_single_calls  # noqa: E402


def pyrocov_like_model(data):
    import pyro
    import pyro.distributions as dist
    import torch

    features, counts = data["features"], data["counts"]
    times = data["times"].unsqueeze(-1)  # [T, P, 1]
    T, P, S = counts.shape
    F = features.shape[-1]

    def scale(name, dist_):
        return pyro.sample(name, dist_).unsqueeze(-1)

    coef_scale = scale("coef_scale", dist.InverseGamma(5e3, 1e2))
    rate_loc_scale = scale("rate_loc_scale", dist.LogNormal(-4.0, 2.0))
    rate_scale = scale("rate_scale", dist.LogNormal(-4.0, 2.0))
    init_loc_scale = scale("init_loc_scale", dist.LogNormal(0.0, 2.0))
    init_scale = scale("init_scale", dist.LogNormal(0.0, 2.0))

    coef = pyro.sample("coef", dist.Logistic(torch.zeros(F), coef_scale).to_event(1))
    growth = 0.01 * coef @ features.T  # [S]
    rate_loc = pyro.sample("rate_loc", dist.Normal(growth, rate_loc_scale).to_event(1))
    init_loc = pyro.sample(
        "init_loc", dist.Normal(torch.zeros(S), init_loc_scale).to_event(1)
    )
    with pyro.plate("place", P, dim=-1):
        rate = pyro.sample("rate", dist.Normal(rate_loc, rate_scale).to_event(1))
        init = pyro.sample("init", dist.Normal(init_loc, init_scale).to_event(1))
        with pyro.plate("time", T, dim=-2):
            logits = init + rate * times  # [T, P, S]
            pyro.sample(
                "obs",
                dist.Multinomial(logits=logits, validate_args=False),
                obs=counts,
            )


def dataset(T, P, S, F, seed=0):
    import torch

    generator = torch.Generator().manual_seed(seed)
    return {
        "features": torch.randn(S, F, generator=generator),
        "times": torch.randn(T, P, generator=generator),
        "counts": torch.randn(T, P, S, generator=generator).exp().round(),
    }


def measure(size, repeats):
    import pyro
    from pyro.infer import SVI, Trace_ELBO
    from pyro.infer.autoguide import AutoGaussian
    from pyro.optim import Adam

    import funsor_lowering.pyro  # noqa: F401  (registers backend="compiled")

    data = dataset(*size)
    methods, compile_time = {}, None
    for backend in ("dense", "funsor", "compiled"):
        pyro.clear_param_store()
        pyro.set_rng_seed(0)
        guide = AutoGaussian(pyrocov_like_model, backend=backend)
        start = time.perf_counter()
        guide(data)  # sets up the prototype; the compiled backend compiles
        if backend == "compiled":
            compile_time = time.perf_counter() - start
        svi = SVI(pyrocov_like_model, guide, Adam({"lr": 1e-6}), Trace_ELBO())
        svi.step(data)
        methods[f"{backend} step"] = lambda svi=svi: svi.step(data)
        methods[f"{backend} sample"] = lambda guide=guide: guide(data)
    return interleaved_single_calls(methods, repeats), compile_time


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.autogaussian")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sizes", nargs="*", default=["5,10,20,8", "5,30,50,8"])
    parser.add_argument(
        "--write", action="store_true", help="also write RESULTS_autogaussian.md"
    )
    args = parser.parse_args(argv)
    emit = Report()

    import funsor

    funsor.set_backend("torch")
    emit(
        f"Medians of {args.repeats} interleaved repeats (`python -m "
        f"benchmarks.autogaussian --write`), torch on {os.cpu_count()} cpus."
    )
    emit()
    emit.header(
        [
            "T,P,S,F",
            "what",
            "dense",
            "funsor",
            "compiled",
            "funsor/compiled",
            "dense/compiled",
        ]
    )
    for text in args.sizes:
        size = tuple(int(x) for x in text.split(","))
        medians, compile_time = measure(size, args.repeats)
        for what in ("step", "sample"):
            d, f, c = (medians[f"{b} {what}"] for b in ("dense", "funsor", "compiled"))
            row = [
                text,
                f"SVI {what}" if what == "step" else "guide sample",
                f"{d * 1e3:.1f} ms",
                f"{f * 1e3:.1f} ms",
                f"{c * 1e3:.1f} ms",
                f"{f / c:.1f}x",
                f"{d / c:.2f}x",
            ]
            emit.row(row)
        steps = compile_time / medians["funsor step"]
        emit(
            f"| {text} | first guide call (set-up + compile) | | | "
            f"{compile_time * 1e3:.0f} ms | = {steps:.1f} funsor steps | |"
        )
    if args.write:
        emit.write("RESULTS_autogaussian.md", "AutoGaussian backends")


if __name__ == "__main__":
    main()
