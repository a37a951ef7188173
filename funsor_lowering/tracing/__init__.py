"""The trace pipeline: a function runs once on symbolic values
(:mod:`.symbolic`) while every ``funsor.ops`` call is recorded
(:mod:`.tracer`) into an :class:`~funsor_lowering.OpProgram`.

- :mod:`.symbolic`: arrays known by shape and dtype only, which refuse
  Python branches and conversions (:mod:`.concretization`);
- :mod:`.tracer`: ``trace_function`` and the op recorder;
- :mod:`.gaussian_patterns`: funsor's Gaussian patterns in ``funsor.ops``;
- :mod:`.dense_ffbs`: ``forward_filter_backward_rsample`` of plate-free
  Gaussians as one dense posterior draw;
- :mod:`.constants`: index tables recorded as program constants;
- :mod:`.rng_keys`: jax PRNG keys of draws while tracing.
"""
