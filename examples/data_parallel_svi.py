"""Data-parallel SVI with ``AutoGaussian(model, backend="compiled")``.

    python examples/data_parallel_svi.py [--processes 2] [--steps 20]

Each of ``--processes`` processes (``torch.distributed``, ``gloo`` backend,
one CPU machine) takes an equal shard of the data: the model's data plate
is subsampled to the shard, so its likelihood is scaled by ``N / shard``.
After each backward pass the gradients are averaged with an all-reduce, so
every process takes the same Adam step. All processes use the same seed,
hence the same guide draws: the average of the shard losses is then exactly
the full-data loss, and the parameters equal single-process training on the
full data (checked at the end, in float64).
"""

import argparse
import os
import socket

import funsor
import pyro
import pyro.distributions as dist
import torch
import torch.distributed
import torch.multiprocessing as mp
from pyro.infer import Trace_ELBO
from pyro.infer.autoguide import AutoGaussian

import funsor_lowering.pyro  # noqa: F401  (registers backend="compiled")

N, D = 64, 3  # data points, regression weights


def dataset():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(N, D, generator=generator, dtype=torch.float64)
    w = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    y = x @ w + 0.3 + 0.1 * torch.randn(N, generator=generator, dtype=torch.float64)
    return x, y


def model(x, y, shard):
    """Bayesian linear regression; the data plate holds only ``shard``."""
    w = pyro.sample("w", dist.Normal(torch.zeros(D), 1.0).to_event(1))
    b = pyro.sample("b", dist.Normal(0.0, 1.0))
    with pyro.plate("data", N, subsample=shard):
        pyro.sample("obs", dist.Normal(x[shard] @ w + b, 0.1), obs=y[shard])


def train(shard, steps, all_reduce=None):
    """Train on ``shard`` of the data; ``all_reduce`` averages gradients
    across processes. Returns the guide's parameters."""
    torch.set_default_dtype(torch.float64)
    funsor.set_backend("torch")
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    x, y = dataset()
    guide = AutoGaussian(model, backend="compiled")
    guide(x, y, shard)  # sets up the parameters (same seed: same values)
    params = list(guide.parameters())
    optimizer = torch.optim.Adam(params, lr=0.02)
    elbo = Trace_ELBO()
    for _ in range(steps):
        optimizer.zero_grad()
        elbo.differentiable_loss(model, guide, x, y, shard).backward()
        if all_reduce is not None:
            all_reduce(params)
        optimizer.step()
    return {name: p.detach().clone() for name, p in guide.named_parameters()}


def average_gradients(params):
    world = torch.distributed.get_world_size()
    for p in params:
        torch.distributed.all_reduce(p.grad)
        p.grad /= world


def worker(rank, world, port, steps, results):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    try:
        shard = torch.arange(rank, N, world)  # equal shards: N / world each
        params = train(shard, steps, all_reduce=average_gradients)
        results[rank] = {k: v.numpy() for k, v in params.items()}
    finally:
        torch.distributed.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args(argv)
    if N % args.processes:
        raise ValueError(f"{N} data points do not split into {args.processes} shards")

    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(
            worker,
            args=(args.processes, free_port(), args.steps, results),
            nprocs=args.processes,
        )
        parallel = dict(results)

    single = train(torch.arange(N), args.steps)
    for rank, params in parallel.items():
        for name, value in single.items():
            difference = abs(torch.as_tensor(params[name]) - value).max().item()
            assert difference < 1e-9, (rank, name, difference)
    print(
        f"{args.processes} processes x {N // args.processes} data points, "
        f"{args.steps} steps: parameters equal single-process training "
        f"({len(single)} tensors)"
    )


if __name__ == "__main__":
    main()
