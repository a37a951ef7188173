"""Benchmark suite: ``python -m benchmarks [--backend numpy|torch|jax]``."""
