"""The trace pipeline: a function runs once on symbolic values
(:mod:`funsor_lowering.ops.symbolic`) while every ``funsor.ops`` call is
recorded (:mod:`.tracer`) into an :class:`~funsor_lowering.OpProgram`.

- :mod:`.tracer`: ``trace_function`` and the op recorder;
- :mod:`.abstract`: result shapes of ops on symbolic arrays;
- :mod:`.decorator`: ``jit``;
- :mod:`.gaussian_patterns`: funsor's Gaussian patterns in ``funsor.ops``
  (:mod:`.gaussian_algebra`);
- :mod:`.dense_ffbs`: ``forward_filter_backward_rsample`` of plate-free
  Gaussians as one dense posterior draw;
- :mod:`.constants`: index tables recorded as program constants;
- :mod:`.rng_keys`: jax PRNG keys of draws while tracing.
"""
