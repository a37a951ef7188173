"""Train one of Pyro's hmm.py models (examples/contrib/funsor/hmm.py) with
the compiled TraceEnum_ELBO, beside pyro.contrib.funsor's.

    python examples/enumerated_hmm.py [-m 1] [-n 10] [--sequences 20] [--length 50]

Both losses start from the same seed; the script checks that their ELBO
trajectories are equal and prints the time per SVI step of each.
"""

import argparse
import os
import sys
import time

import funsor
import pyro.contrib.funsor  # noqa: F401  (registers the pyroapi backend)
import pyro.contrib.funsor.infer as contrib
from pyroapi import infer, optim, pyro, pyro_backend

import funsor_lowering.pyro as compiled

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.hmm_models import (  # noqa: E402
    MODELS,
    PLATE_NESTING,
    VECTORIZED,
    guide_for,
    jsb_like_data,
)


def train(module, model, data, args):
    markov = "Markov" if args.model in VECTORIZED else ""
    Loss = getattr(module, f"Trace{markov}Enum_ELBO")
    pyro.set_rng_seed(0)
    pyro.clear_param_store()
    guide = guide_for(model)
    elbo = Loss(max_plate_nesting=PLATE_NESTING[args.model])
    svi = infer.SVI(model, guide, optim.Adam({"lr": 0.05}), elbo)
    losses, times = [], []
    for _ in range(args.steps):
        start = time.perf_counter()
        losses.append(svi.step(*data))
        times.append(time.perf_counter() - start)
    return losses, times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--model", default="1", choices=sorted(MODELS))
    parser.add_argument("-n", "--steps", default=10, type=int)
    parser.add_argument("--sequences", default=20, type=int)
    parser.add_argument("--length", default=50, type=int)
    parser.add_argument("--hidden", default=16, type=int)
    args = parser.parse_args()

    funsor.set_backend("torch")
    data = jsb_like_data(args.sequences, args.length)

    def model(*a, **k):
        return MODELS[args.model](*a, hidden_dim=args.hidden, **k)

    with pyro_backend("contrib.funsor"):
        expected, contrib_times = train(contrib, model, data, args)
        actual, compiled_times = train(compiled, model, data, args)
        for step, (e, a) in enumerate(zip(expected, actual)):
            print(f"step {step:>3}  contrib.funsor {e:12.4f}  compiled {a:12.4f}")
        assert all(abs(e - a) <= 1e-4 * abs(e) for e, a in zip(expected, actual))
        steady = slice(1, None) if args.steps > 1 else slice(None)
        c = sorted(contrib_times[steady])[len(contrib_times[steady]) // 2]
        o = sorted(compiled_times[steady])[len(compiled_times[steady]) // 2]
        print(
            f"median step: contrib.funsor {c:.3f} s, compiled {o:.3f} s ({c / o:.1f}x)"
        )
        print(f"first compiled step (compiles): {compiled_times[0]:.3f} s")


if __name__ == "__main__":
    main()
