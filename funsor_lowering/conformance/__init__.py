"""funsor's own test suite, run with funsor's functions under test compiled.

- :mod:`.wrapped`: the funsor functions and methods that run through
  :func:`funsor_lowering.jit` (this project's list);
- :mod:`.plugin`: the pytest plugin that wraps them before funsor's test
  files are imported, and reports how each test's calls ran;
- :mod:`.runner`: fetches funsor's source distribution, runs its test
  files eagerly and compiled, and writes ``docs/conformance.md``
  (``python -m funsor_lowering conformance``).
"""
