"""Enumerated discrete HMMs (Pyro's ``examples/contrib/funsor/hmm.py``
models): the SVI step of ``funsor_lowering.pyro``'s compiled losses against
``pyro.contrib.funsor``'s and Pyro's own opt_einsum-based
``pyro.infer.TraceEnum_ELBO``, torch on 1 thread, interleaved.

    python -m benchmarks.enum_hmm [--repeats 5] [--models 0 1 ... 7 2v 3v] [--write]

Data of the JSB chorales' shapes: 20 sequences of up to 50 steps, 51
notes, 16 hidden states. Each loss gets its own ``SVI`` with learning rate
0, so every step runs at the same parameters. For the funsor-based losses
the step is split into recording the model and guide (running them under
the losses' handlers, and for the compiled loss computing the log factors
they recorded) and the rest (the ELBO's contraction, backward and
update). The first compiled step includes compiling the program.
"""

import argparse
import os
import sys
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.timing import Report, interleaved_single_calls  # noqa: E402

SIZES = {"num_sequences": 20, "max_length": 50, "data_dim": 51}
HIDDEN = 16


def _record_contrib(elbo, model, guide, data):
    """The part of ``pyro.contrib.funsor``'s loss that runs the model and
    guide under its handlers."""
    from pyro.contrib.funsor.handlers import enum, replay, trace

    first_dim = -elbo.max_plate_nesting - 1
    with enum(first_available_dim=first_dim):
        guide_tr = trace(guide).get_trace(*data)
        trace(replay(model, trace=guide_tr)).get_trace(*data)


def _record_compiled(elbo, model, guide, data):
    """The compiled loss's counterpart: running the model and guide under
    its recording handlers, and computing the log factors they recorded
    (the program's inputs)."""
    from funsor_lowering.pyro.enum_elbo import record_traces
    from funsor_lowering.pyro.enum_terms import describe_traces

    describe_traces(*record_traces(elbo, model, guide, data, {}))


def measure(key, repeats):
    import pyro.contrib.funsor  # noqa: F401  (registers the pyroapi backend)
    import pyro.contrib.funsor.infer as contrib
    import pyro.infer
    from pyroapi import optim, pyro, pyro_backend

    import funsor_lowering.pyro as compiled
    from benchmarks.hmm_models import (
        MODELS,
        PLATE_NESTING,
        VECTORIZED,
        guide_for,
        jsb_like_data,
    )
    from funsor_lowering.pyro import enum_elbo

    data = jsb_like_data(**SIZES)
    markov = "Markov" if key in VECTORIZED else ""

    def model(*args, **kwargs):
        return MODELS[key](*args, hidden_dim=HIDDEN, **kwargs)

    losses = {
        "contrib.funsor": (
            "contrib.funsor",
            getattr(contrib, f"Trace{markov}Enum_ELBO"),
        ),
        "compiled": ("contrib.funsor", getattr(compiled, f"Trace{markov}Enum_ELBO")),
    }
    if key not in VECTORIZED:  # vectorized_markov is pyro.contrib.funsor's only
        losses["pyro.infer"] = ("pyro", pyro.infer.TraceEnum_ELBO)
    recorders = {"contrib.funsor": _record_contrib, "compiled": _record_compiled}
    methods, backends, first_step = {}, {}, None
    pyro.set_rng_seed(0)
    for name, (backend, Loss) in losses.items():
        with pyro_backend(backend):
            pyro.clear_param_store()
            guide = guide_for(model)
            elbo = Loss(max_plate_nesting=PLATE_NESTING[key])
            svi = pyro.infer.SVI(model, guide, optim.Adam({"lr": 0.0}), elbo)
            if name == "compiled":
                enum_elbo.PROGRAMS.clear()
                start = time.perf_counter()
                svi.step(*data)
                first_step = time.perf_counter() - start
            else:
                svi.step(*data)
        methods[name] = lambda svi=svi: svi.step(*data)
        backends[name] = backend
        if name in recorders:
            record = recorders[name]
            methods[f"{name} record"] = lambda r=record, e=elbo, g=guide: r(
                e, model, g, data
            )
            backends[f"{name} record"] = backend
    medians = interleaved_single_calls(
        methods, repeats, context=lambda name: pyro_backend(backends[name])
    )
    return medians, first_step


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.enum_hmm")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--models",
        nargs="*",
        default=["0", "1", "2", "3", "4", "5", "6", "7", "2v", "3v"],
    )
    parser.add_argument("--write", action="store_true", help="write RESULTS_enum.md")
    args = parser.parse_args(argv)

    import funsor
    import torch

    funsor.set_backend("torch")
    torch.set_num_threads(1)
    emit = Report()

    emit(
        f"Medians of {args.repeats} interleaved SVI steps (`python -m "
        "benchmarks.enum_hmm --write`), torch on 1 thread; "
        f"{SIZES['num_sequences']} sequences x {SIZES['max_length']} steps, "
        f"{SIZES['data_dim']} notes, {HIDDEN} hidden states."
    )
    emit()
    header = [
        "model",
        "contrib.funsor step (record + rest)",
        "pyro.infer step",
        "compiled step (record + rest)",
        "contrib.funsor / compiled",
        "pyro.infer / compiled",
        "compiled first step",
    ]
    emit.header(header)
    for key in args.models:
        m, first = measure(key, args.repeats)

        def split(name, m=m):
            step, record = m[name], m[f"{name} record"]
            return f"{step:.3f} s ({record:.3f} + {step - record:.3f})"

        c, ours = m["contrib.funsor"], m["compiled"]
        p = m.get("pyro.infer")
        row = [
            key,
            split("contrib.funsor"),
            f"{p:.3f} s" if p else "n/a (vectorized_markov)",
            split("compiled"),
            f"{c / ours:.1f}x",
            f"{p / ours:.2f}x" if p else "",
            f"{first:.1f} s = {first / c:.1f} contrib steps",
        ]
        emit.row(row)
    emit()
    emit(
        "Models 0-7 are hmm.py's (7: time vectorized); 2v and 3v are models 2 "
        "and 3 with time vectorized, ours. In 2v the emission probabilities "
        "are indexed by the data (each note by its previous value), so its "
        "log density is computed elementwise, as in the model itself; "
        "elsewhere an observed Bernoulli's sum over the notes is one einsum "
        "of the data with the logits."
    )
    if args.write:
        emit.write("RESULTS_enum.md", "Enumerated HMMs (Pyro's hmm.py models)")


if __name__ == "__main__":
    main()
