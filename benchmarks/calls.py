"""Count the backend calls a function makes, the same way for programs and
hand-written code, so the benchmark can print them side by side.

- numpy: the arrays are wrapped in an ``ndarray`` subclass that counts, at
  the outermost level, every ufunc (operators included), every numpy
  function (``__array_function__``), indexing and the common methods;
- torch: a ``TorchFunctionMode`` counts every torch function, method and
  operator call (outermost only; reads of ``dtype``/``shape`` do not count);
- jax: the equations of the function's jaxpr (one per primitive or jitted
  ``jnp`` function: what runs, one dispatch each, without ``jax.jit``).

Example::

    >>> import numpy as np
    >>> count_calls(lambda x: np.exp(x + 1).sum(), {"x": np.ones(3)}, "numpy")
    3
"""

import numpy as np


def count_calls(fn, arrays, backend):
    """Backend calls of one ``fn(**arrays)`` (after a first call, so that
    one-time work such as code generation is not counted)."""
    return _COUNTERS[backend](fn, arrays)


# ------------------------------------------------------------------ numpy
class _Counted(np.ndarray):
    """An ndarray whose operations are counted (outermost calls only)."""

    calls = 0
    depth = 0

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if "out" in kwargs:
            kwargs["out"] = tuple(_plain(o) for o in kwargs["out"])
        return _counted_call(getattr(ufunc, method), _plain(inputs), _plain(kwargs))

    def __array_function__(self, func, types, args, kwargs):
        return _counted_call(func, _plain(args), _plain(kwargs))

    def __getitem__(self, index):
        return _counted_call(np.ndarray.__getitem__, (_plain(self), index), {})

    @property
    def T(self):
        return _counted_call(np.transpose, (_plain(self),), {})


_METHODS = (
    "reshape transpose swapaxes squeeze sum max min mean prod all any astype "
    "copy diagonal clip dot take ravel flatten"
).split()


def _method(name):
    def method(self, *args, **kwargs):
        return _counted_call(getattr(np.ndarray, name), (_plain(self),) + args, kwargs)

    method.__name__ = name
    return method


for _name in _METHODS:
    setattr(_Counted, _name, _method(_name))


def _counted_call(fn, args, kwargs):
    if _Counted.depth == 0:
        _Counted.calls += 1
    _Counted.depth += 1
    try:
        return _wrap(fn(*args, **kwargs))
    finally:
        _Counted.depth -= 1


def _plain(value):
    if isinstance(value, _Counted):
        return value.view(np.ndarray)
    if isinstance(value, (list, tuple)):
        return _rebuild(value, [_plain(v) for v in value])
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _wrap(value):
    if isinstance(value, np.ndarray):
        return value.view(_Counted)
    if isinstance(value, np.generic):
        return np.asarray(value).view(_Counted)
    if isinstance(value, (list, tuple)):
        return _rebuild(value, [_wrap(v) for v in value])
    return value


def _rebuild(sequence, items):
    if hasattr(sequence, "_fields"):  # a named tuple (numpy's QRResult ...)
        return type(sequence)(*items)
    return type(sequence)(items)


def _count_numpy(fn, arrays):
    wrapped = {k: _wrap(v) for k, v in arrays.items()}
    fn(**wrapped)
    _Counted.calls = 0
    fn(**wrapped)
    return _Counted.calls


# ------------------------------------------------------------------ torch
def _count_torch(fn, arrays):
    from torch.overrides import TorchFunctionMode

    class Counting(TorchFunctionMode):
        calls = 0
        depth = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if self.depth == 0 and not _is_metadata_read(func):
                self.calls += 1
            self.depth += 1
            try:
                return func(*args, **(kwargs or {}))
            finally:
                self.depth -= 1

    fn(**arrays)
    with Counting() as mode:
        fn(**arrays)
    return mode.calls


# Reads of a tensor's metadata (a program's input checks) compute nothing.
_METADATA = {"dtype", "shape", "device", "requires_grad", "ndim"}


def _is_metadata_read(func):
    owner = getattr(func, "__self__", None)
    return func.__name__ == "__get__" and getattr(owner, "__name__", "") in _METADATA


# -------------------------------------------------------------------- jax
def _count_jax(fn, arrays):
    import jax

    fn(**arrays)
    return len(jax.make_jaxpr(lambda kw: fn(**kw))(arrays).jaxpr.eqns)


_COUNTERS = {"numpy": _count_numpy, "torch": _count_torch, "jax": _count_jax}
