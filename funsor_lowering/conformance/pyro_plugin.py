"""A pytest plugin running Pyro's ``tests/contrib/funsor`` with this
package's compiled losses and ``infer_discrete`` in place of
``pyro.contrib.funsor``'s.

Pyro's source distribution does not ship its tests; from a checkout of
Pyro's repository (at the installed version's tag)::

    pytest -p funsor_lowering.conformance.pyro_plugin tests/contrib/funsor

Those tests reach contrib through pyroapi's ``"contrib.funsor"`` backend;
``--pyro-infer=funsor_lowering`` (the default) points that backend's
``infer`` module at :mod:`funsor_lowering.pyro.infer`, before any test
file is imported; ``--pyro-infer=contrib`` leaves it as it is (the
baseline). Each test's report line says how many losses and
``infer_discrete`` calls of this package it ran, so a test that passes
without reaching them shows as such.
"""

import collections

import pytest

_CALLS = collections.Counter()


def pytest_addoption(parser):
    parser.getgroup("funsor_lowering").addoption(
        "--pyro-infer",
        choices=("contrib", "funsor_lowering"),
        default="funsor_lowering",
        help="the infer module of pyroapi's 'contrib.funsor' backend",
    )


def pytest_configure(config):
    if config.getoption("--pyro-infer") != "funsor_lowering":
        return
    import pyro.contrib.funsor  # noqa: F401  (registers contrib's backend first)
    import pyroapi

    from ..pyro import discrete, enum_elbo
    from ..pyro.infer import PYROAPI_BACKEND

    pyroapi.register_backend("contrib.funsor", PYROAPI_BACKEND)
    _count_calls(enum_elbo._CompiledEnumLoss, "differentiable_loss")
    _count_calls(discrete, "infer_discrete", module=True)


def _count_calls(owner, name, module=False):
    original = getattr(owner, name)

    def counted(*args, **kwargs):
        _CALLS[name] += 1
        return original(*args, **kwargs)

    counted.__wrapped__ = original
    if module:
        # funsor_lowering.pyro.infer bound the name at import: rebind it
        from ..pyro import infer

        setattr(infer, name, counted)
    setattr(owner, name, counted)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    _CALLS.clear()
    yield
    item.user_properties.append(("funsor_lowering_calls", dict(_CALLS)))


def pytest_terminal_summary(terminalreporter, config):
    if config.getoption("--pyro-infer") != "funsor_lowering":
        return
    reached = untouched = 0
    for outcome in ("passed", "failed"):
        for report in terminalreporter.stats.get(outcome, []):
            calls = dict(report.user_properties).get("funsor_lowering_calls")
            if calls is None:
                continue
            if calls:
                reached += 1
            else:
                untouched += 1
    terminalreporter.write_line(
        f"funsor_lowering: {reached} tests ran this package's losses or "
        f"infer_discrete; {untouched} ran neither"
    )
