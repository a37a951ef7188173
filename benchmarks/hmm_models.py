"""The discrete HMMs of Pyro's ``examples/contrib/funsor/hmm.py``, written
for ``pyroapi`` (run them under ``pyro_backend("contrib.funsor")``), on
synthetic data of the JSB chorales' shapes.

``MODELS[k]`` (k = "0" ... "7") are hmm.py's models: 0 a plain HMM looping
over sequences, 1 the same with a plate over sequences, 2 autoregressive
emissions, 3 a factorial HMM, 4 a dependent factorial HMM, 5 neural
emissions, 6 a second-order chain (parameters without priors), 7 model 1
with time vectorized (``vectorized_markov``). "2v" and "3v" are models 2
and 3 with time vectorized the same way. Each is trained, as in hmm.py,
with an ``AutoDelta`` guide over its ``probs_*`` sites (:func:`guide_for`)
and ``max_plate_nesting`` from :data:`PLATE_NESTING`; the vectorized
models need ``TraceMarkovEnum_ELBO``.
"""

import torch
import torch.nn as nn
from pyro.ops.indexing import Vindex
from pyroapi import distributions as dist
from pyroapi import handlers, pyro
from torch.distributions import constraints


def jsb_like_data(num_sequences=20, max_length=50, data_dim=51, seed=0):
    """Binary piano rolls shaped like the JSB chorales' (51 notes once the
    never-played ones are removed), with sequence lengths up to
    ``max_length``."""
    generator = torch.Generator().manual_seed(seed)
    sequences = (
        torch.rand(num_sequences, max_length, data_dim, generator=generator) < 0.08
    ).float()
    lengths = torch.randint(
        max_length // 2, max_length + 1, (num_sequences,), generator=generator
    )
    lengths[0] = max_length
    for i, length in enumerate(lengths):
        sequences[i, length:] = 0
    return sequences, lengths


def _sticky_transitions(name, hidden_dim, *, batch=()):
    """A Dirichlet prior favouring staying in the same state."""
    prior = dist.Dirichlet(0.9 * torch.eye(hidden_dim) + 0.1)
    if batch:
        prior = prior.expand_by(batch)
    return pyro.sample(name, prior.to_event(1 + len(batch)))


def _sparse_emissions(name, *shape):
    """A Beta prior putting about 10% of notes on."""
    return pyro.sample(
        name, dist.Beta(0.1, 0.9).expand(list(shape)).to_event(len(shape))
    )


def _sequence_steps(lengths, max_length, history=1):
    """hmm.py's loop: a plate over the sequences (dim -2) and markov time
    steps, each masked past its sequence's length; yields ``(t, batch)``."""
    with pyro.plate("sequences", len(lengths), dim=-2) as batch:
        lengths = lengths[batch]
        for t in pyro.markov(range(max_length), history=history):
            with handlers.mask(mask=(t < lengths).unsqueeze(-1)):
                yield t, batch


def _vectorized_steps(lengths, max_length):
    """The same loop with time vectorized: the plate at dim -3 and
    ``vectorized_markov`` over time at dim -2 (``t`` is an int or a range
    of steps)."""
    with pyro.plate("sequences", len(lengths), dim=-3) as batch:
        lengths = lengths[batch]
        batch = batch[:, None]
        for t in pyro.vectorized_markov(name="time", size=max_length, dim=-2):
            with handlers.mask(mask=(t < lengths.unsqueeze(-1)).unsqueeze(-1)):
                yield t, batch


def _steps(lengths, max_length, vectorized):
    """:func:`_vectorized_steps` or :func:`_sequence_steps`."""
    if vectorized:
        return _vectorized_steps(lengths, max_length)
    return _sequence_steps(lengths, max_length)


def _enumerated(name, probs):
    """A hidden state, enumerated in parallel."""
    return pyro.sample(name, dist.Categorical(probs), infer={"enumerate": "parallel"})


def model_0(sequences, lengths, hidden_dim=16, include_prior=True):
    """A plain HMM, looping over sequences in Python."""
    _, _, data_dim = sequences.shape
    with handlers.mask(mask=include_prior):
        probs_x = _sticky_transitions("probs_x", hidden_dim)
        probs_y = _sparse_emissions("probs_y", hidden_dim, data_dim)
    tones = pyro.plate("tones", data_dim, dim=-1)
    for i in pyro.plate("sequences", len(sequences)):
        x = 0
        for t in pyro.markov(range(int(lengths[i]))):
            x = _enumerated(f"x_{i}_{t}", probs_x[x])
            with tones:
                pyro.sample(
                    f"y_{i}_{t}",
                    dist.Bernoulli(probs_y[x.squeeze(-1)]),
                    obs=sequences[i, t],
                )


def model_1(sequences, lengths, hidden_dim=16, include_prior=True, vectorized=False):
    """The HMM with a plate over sequences, masked past each length."""
    _, max_length, data_dim = sequences.shape
    with handlers.mask(mask=include_prior):
        probs_x = _sticky_transitions("probs_x", hidden_dim)
        probs_y = _sparse_emissions("probs_y", hidden_dim, data_dim)
    tones = pyro.plate("tones", data_dim, dim=-1)
    x = 0
    for t, batch in _steps(lengths, max_length, vectorized):
        x = _enumerated(f"x_{t}", probs_x[x])
        with tones:
            pyro.sample(
                f"y_{t}",
                dist.Bernoulli(probs_y[x.squeeze(-1)]),
                obs=Vindex(sequences)[batch, t],
            )


def model_2(sequences, lengths, hidden_dim=16, include_prior=True, vectorized=False):
    """Each note also depends on itself one step earlier (arHMM)."""
    _, max_length, data_dim = sequences.shape
    with handlers.mask(mask=include_prior):
        probs_x = _sticky_transitions("probs_x", hidden_dim)
        probs_y = _sparse_emissions("probs_y", hidden_dim, 2, data_dim)
    tones = pyro.plate("tones", data_dim, dim=-1)
    x, y = 0, 0
    for t, batch in _steps(lengths, max_length, vectorized):
        x = _enumerated(f"x_{t}", probs_x[x])
        with tones as notes:
            y = pyro.sample(
                f"y_{t}",
                dist.Bernoulli(Vindex(probs_y)[x, y, notes]),
                obs=Vindex(sequences)[batch, t],
            ).long()


def model_3(sequences, lengths, hidden_dim=16, include_prior=True, vectorized=False):
    """Two independent chains w and x jointly emitting the notes (FHMM)."""
    _, max_length, data_dim = sequences.shape
    side = int(hidden_dim**0.5)
    with handlers.mask(mask=include_prior):
        probs_w = _sticky_transitions("probs_w", side)
        probs_x = _sticky_transitions("probs_x", side)
        probs_y = _sparse_emissions("probs_y", side, side, data_dim)
    tones = pyro.plate("tones", data_dim, dim=-1)
    w, x = 0, 0
    for t, batch in _steps(lengths, max_length, vectorized):
        w = _enumerated(f"w_{t}", probs_w[w])
        x = _enumerated(f"x_{t}", probs_x[x])
        with tones as notes:
            pyro.sample(
                f"y_{t}",
                dist.Bernoulli(Vindex(probs_y)[w, x, notes]),
                obs=Vindex(sequences)[batch, t],
            )


def model_4(sequences, lengths, hidden_dim=16, include_prior=True):
    """The factorial HMM with x's transitions depending on w (PFHMM)."""
    _, max_length, data_dim = sequences.shape
    side = int(hidden_dim**0.5)
    with handlers.mask(mask=include_prior):
        probs_w = _sticky_transitions("probs_w", side)
        probs_x = _sticky_transitions("probs_x", side, batch=(side,))
        probs_y = _sparse_emissions("probs_y", side, side, data_dim)
    tones = pyro.plate("tones", data_dim, dim=-1)
    w = x = torch.tensor(0, dtype=torch.long)
    for t, batch in _sequence_steps(lengths, max_length):
        w = _enumerated(f"w_{t}", probs_w[w])
        x = _enumerated(f"x_{t}", Vindex(probs_x)[w, x])
        with tones as notes:
            pyro.sample(
                f"y_{t}",
                dist.Bernoulli(probs_y[w, x, notes]),
                obs=sequences[batch, t],
            )


class NoteLogits(nn.Module):
    """Note logits from the hidden state and the previous step's notes (a
    small convolutional net, as hmm.py's ``TonesGenerator``)."""

    def __init__(self, hidden_dim, data_dim, nn_dim=48, channels=2):
        super().__init__()
        self.hidden_dim, self.data_dim = hidden_dim, data_dim
        self.x_to_hidden = nn.Linear(hidden_dim, nn_dim)
        self.y_to_hidden = nn.Linear(channels * data_dim, nn_dim)
        self.conv = nn.Conv1d(1, channels, 3, padding=1)
        self.to_logits = nn.Linear(nn_dim, data_dim)

    def forward(self, x, y):
        x_onehot = y.new_zeros(x.shape[:-1] + (self.hidden_dim,)).scatter_(-1, x, 1)
        y_conv = torch.relu(self.conv(y.reshape(-1, 1, self.data_dim)))
        y_conv = y_conv.reshape(y.shape[:-1] + (-1,))
        hidden = torch.relu(self.x_to_hidden(x_onehot) + self.y_to_hidden(y_conv))
        return self.to_logits(hidden)


_NOTE_LOGITS = {}


def model_5(sequences, lengths, hidden_dim=16, include_prior=True):
    """Notes from a neural net of the hidden state and previous notes."""
    _, max_length, data_dim = sequences.shape
    key = (hidden_dim, data_dim)
    if key not in _NOTE_LOGITS:
        _NOTE_LOGITS[key] = NoteLogits(hidden_dim, data_dim)
    note_logits = pyro.module("note_logits", _NOTE_LOGITS[key])
    with handlers.mask(mask=include_prior):
        probs_x = _sticky_transitions("probs_x", hidden_dim)
    x = 0
    y = torch.zeros(data_dim)
    for t, batch in _sequence_steps(lengths, max_length):
        x = _enumerated(f"x_{t}", probs_x[x])
        with pyro.plate(f"tones_{t}", data_dim, dim=-1):
            y = pyro.sample(
                f"y_{t}",
                dist.Bernoulli(logits=note_logits(x, y)),
                obs=sequences[batch, t],
            )


def model_6(sequences, lengths, hidden_dim=16, include_prior=False):
    """A second-order chain: x[t] depends on x[t-1] and x[t-2]; the
    transition and emission tables are parameters (no priors)."""
    _, max_length, data_dim = sequences.shape
    probs_x = pyro.param(
        "probs_x",
        lambda: torch.rand(hidden_dim, hidden_dim, hidden_dim),
        constraint=constraints.simplex,
    )
    probs_y = pyro.param(
        "probs_y",
        lambda: torch.rand(hidden_dim, data_dim),
        constraint=constraints.unit_interval,
    )
    tones = pyro.plate("tones", data_dim, dim=-1)
    x_curr, x_prev = torch.tensor(0), torch.tensor(0)
    for t, batch in _sequence_steps(lengths, max_length, history=2):
        x_prev, x_curr = x_curr, _enumerated(f"x_{t}", Vindex(probs_x)[x_prev, x_curr])
        with tones:
            pyro.sample(
                f"y_{t}",
                dist.Bernoulli(probs_y[x_curr.squeeze(-1)]),
                obs=sequences[batch, t],
            )


def model_7(sequences, lengths, hidden_dim=16, include_prior=True):
    """Model 1 with time vectorized: a plate over sequences and
    ``vectorized_markov`` over time (eliminated by parallel scan)."""
    model_1(sequences, lengths, hidden_dim, include_prior, vectorized=True)


def model_2v(sequences, lengths, hidden_dim=16, include_prior=True):
    """Model 2 (arHMM) with time vectorized."""
    model_2(sequences, lengths, hidden_dim, include_prior, vectorized=True)


def model_3v(sequences, lengths, hidden_dim=16, include_prior=True):
    """Model 3 (factorial HMM) with time vectorized."""
    model_3(sequences, lengths, hidden_dim, include_prior, vectorized=True)


MODELS = {
    "0": model_0,
    "1": model_1,
    "2": model_2,
    "3": model_3,
    "4": model_4,
    "5": model_5,
    "6": model_6,
    "7": model_7,
    "2v": model_2v,
    "3v": model_3v,
}
VECTORIZED = {"7", "2v", "3v"}
PLATE_NESTING = {k: 1 if k == "0" else 3 if k in VECTORIZED else 2 for k in MODELS}


def guide_for(model):
    """hmm.py's guide: MAP estimates of the ``probs_*`` sites."""
    from pyro.infer.autoguide import AutoDelta

    return AutoDelta(
        handlers.block(model, expose_fn=lambda msg: msg["name"].startswith("probs_"))
    )
