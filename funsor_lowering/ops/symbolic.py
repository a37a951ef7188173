"""Symbolic arrays: the values a traced function runs on.

A :class:`SymbolicArray` is known by its shape and dtype only, like jax's
tracers and torch.fx's proxies. Every ``funsor.ops`` call on one is recorded
by the active :class:`~funsor_lowering.tracing.tracer.OpRecorder`, which
infers the result's shape and dtype (:func:`abstract_result`) without
computing anything. Python operators are ``funsor.ops`` calls too. A Python
branch or conversion (``bool()``, ``float()``, ``int()``, ``.item()``, ``if``
on a comparison) or a backend call on one has no value to use: it raises
:class:`~funsor_lowering.ops.concretization.ConcretizationError`, naming
the user's source line.

Example::

    >>> import numpy as np
    >>> x = SymbolicArray((2, 3), np.dtype("float64"))
    >>> x
    SymbolicArray(shape=(2, 3), dtype=float64)
    >>> bool(x)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    funsor_lowering.ops.concretization.ConcretizationError: bool() of a traced ...
"""

import numpy as np
from funsor import ops
from funsor.tensor import tensor_to_funsor
from funsor.terms import to_funsor

from .concretization import refuse
from .dtypes import dtype_kind
from .extra_ops import getslice_op, imag_part, real_part, relu, take


class SymbolicArray:
    """An array of ``shape`` and backend ``dtype`` whose values are not
    known while tracing. Unhashable, as numpy arrays are (funsor keys its
    terms' arrays by identity)."""

    __slots__ = ("shape", "dtype", "__weakref__")
    __hash__ = None
    # numpy defers binary operators with an array on the left to us
    __array_priority__ = 1000

    def __init__(self, shape, dtype):
        self.shape = tuple(int(n) for n in shape)
        self.dtype = dtype

    def __repr__(self):
        return f"SymbolicArray(shape={self.shape}, dtype={self.dtype})"

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d traced value")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d traced value")
        return (self[i] for i in range(self.shape[0]))

    def __getitem__(self, index):
        if not isinstance(index, tuple):
            index = (index,)
        arrays = [k for k, part in enumerate(index) if _is_index_array(part)]
        for k, part in enumerate(index):
            if k in arrays or part is None or part is Ellipsis:
                continue
            if not isinstance(part, (int, slice)):
                raise TypeError(
                    f"indexing a traced value by {type(part).__name__}: only ints, "
                    f"slices, None, ... and one integer index array are "
                    f"supported; index arrays with funsor.ops (ops.take of "
                    f"funsor_lowering.ops.extra_ops, funsor Tensors)"
                )
        if not arrays:  # never a one-item tuple op: see extra_ops.getslice_op
            return getslice_op(index)(self)
        mixed = len(arrays) > 1 or any(isinstance(p, int) for p in index)
        if mixed and len(index) == self.ndim:
            if all(k in arrays or isinstance(p, int) for k, p in enumerate(index)):
                return _take_elements(self, index)
        if mixed:
            raise TypeError(
                "indexing a traced value by an index array together with ints or "
                "other index arrays (numpy's mixed advanced indexing) is supported "
                "only where every dim is indexed so; otherwise index with one "
                "integer array and slices"
            )
        return _take_along(self, index, arrays[0])

    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = shape[0]
        return ops.ReshapeOp(shape=tuple(shape))(self)

    @property
    def T(self):
        return ops.permute(self, tuple(reversed(range(self.ndim))))

    # conversions: no value to use
    def __bool__(self):
        refuse(self, "bool")

    def __float__(self):
        refuse(self, "float")

    def __int__(self):
        refuse(self, "int")

    def __index__(self):
        refuse(self, "index")

    def __complex__(self):
        refuse(self, "complex")

    def item(self, *args):
        refuse(self, "item")

    def tolist(self):
        refuse(self, "tolist")

    def __array__(self, *args, **kwargs):
        refuse(self, "numpy.asarray")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        refuse(self, f"numpy.{ufunc.__name__}")

    def __array_function__(self, func, types, args, kwargs):
        refuse(self, f"numpy.{func.__name__}")

    def dim(self):
        """The number of dims (torch's spelling of ``ndim``)."""
        return len(self.shape)

    def logsumexp(self, dim, keepdim=False):
        return ops.logsumexp(self, dim, keepdim)

    @property
    def real(self):
        return real_part(self)

    @property
    def imag(self):
        return imag_part(self)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        equivalent = BACKEND_FUNCTIONS.get(func)
        if equivalent is not None:
            result = equivalent(*args, **(kwargs or {}))
            if result is not NotImplemented:  # else no exact equivalent
                return result
        value = next(a for a in _leaves(args) if isinstance(a, SymbolicArray))
        refuse(value, f"torch.{getattr(func, '__name__', func)}")


#: Backend functions with an exact ``funsor.ops`` equivalent, recorded as it
#: when called on a symbolic array (as Pyro's funsor code calls them):
#: backend function -> a function of the same arguments calling funsor.ops.
#: Filled in by the backends (``backends/torch_backend.py``).
BACKEND_FUNCTIONS = {}

# array methods with an exact funsor.ops equivalent (torch's and jax's)
_UNARY_METHODS = {
    "exp": ops.exp,
    "log": ops.log,
    "log1p": ops.log1p,
    "sqrt": ops.sqrt,
    "sigmoid": ops.sigmoid,
    "tanh": ops.tanh,
    "abs": ops.abs,
    "detach": ops.detach,
    "relu": relu,
}
for _name, _op in _UNARY_METHODS.items():
    setattr(SymbolicArray, _name, lambda self, _op=_op: _op(self))


def _leaves(args):
    for arg in args:
        if isinstance(arg, (tuple, list)):
            yield from _leaves(arg)
        else:
            yield arg


def _binary(op, reflected=False):
    if reflected:
        return lambda self, other: op(other, self)
    return lambda self, other: op(self, other)


_BINARY = {
    "add": ops.add,
    "sub": ops.sub,
    "mul": ops.mul,
    "truediv": ops.truediv,
    "floordiv": ops.floordiv,
    "mod": ops.mod,
    "pow": ops.pow,
    "matmul": ops.matmul,
    "and": ops.and_,
    "or": ops.or_,
    "xor": ops.xor,
}
for _name, _op in _BINARY.items():
    setattr(SymbolicArray, f"__{_name}__", _binary(_op))
    setattr(SymbolicArray, f"__r{_name}__", _binary(_op, reflected=True))
for _name in ("lt", "le", "gt", "ge", "eq", "ne"):
    setattr(SymbolicArray, f"__{_name}__", _binary(getattr(ops, _name)))


def _reduction(op):
    def method(self, axis=None, keepdims=False):
        return op(self, axis, keepdims)

    method.__name__ = op.__name__
    return method


# numpy's reduction methods (torch's ``dim`` spelling is not accepted)
_REDUCTIONS = {
    "sum": ops.sum,
    "prod": ops.prod,
    "mean": ops.mean,
    "max": ops.amax,
    "min": ops.amin,
    "all": ops.all,
    "any": ops.any,
}
for _name, _op in _REDUCTIONS.items():
    setattr(SymbolicArray, _name, _reduction(_op))
SymbolicArray.__neg__ = lambda self: ops.neg(self)
SymbolicArray.__abs__ = lambda self: ops.abs(self)
SymbolicArray.__invert__ = lambda self: ops.invert(self)
SymbolicArray.__pos__ = lambda self: self


def _is_index_array(part):
    """A traced integer array, or a constant one of the backend (e.g. the
    ``torch.tensor(0)`` state a funsor ``Tensor`` is indexed by)."""
    if isinstance(part, SymbolicArray):
        return dtype_kind(part.dtype) == "int"
    if not (hasattr(part, "shape") and hasattr(part, "dtype")):
        return False
    try:
        return dtype_kind(part.dtype) == "int"
    except (TypeError, ValueError, KeyError):
        return False


def _take_elements(x, index):
    """``x[index]`` where every dim is indexed by an integer array or an int,
    the arrays broadcasting together (funsor's ``Tensor[Tensor]`` indexes
    every dim so): the elements at the arrays' flat positions, taken from
    ``x`` flattened. A negative int counts from the end; array entries are
    taken as non-negative (funsor's ``Bint`` values are)."""
    strides, total = [], 1
    for size in reversed(x.shape):
        strides.append(total)
        total *= size
    position = None
    for part, stride, size in zip(index, reversed(strides), x.shape):
        if isinstance(part, int):
            if not -size <= part < size:
                raise IndexError(f"index {part} is out of bounds for size {size}")
            part %= size
        term = ops.mul(part, stride) if stride != 1 else part
        position = term if position is None else ops.add(position, term)
    return take(ops.ReshapeOp(shape=(total,))(x), position)


def _take_along(x, index, k):
    """``x[index]`` where ``index[k]`` is an integer index array and the other
    parts are slices, ``None`` or ``...``: the slices first, then the array
    indexes its axis (``extra_ops.take`` on that axis moved to the front)."""
    consumed = sum(1 for p in index if p is not None and p is not Ellipsis)
    axis = 0  # the array's axis in the output: ... spans the dims no other
    for part in index[:k]:  # part consumes, None and a slice give one each
        axis += x.ndim - consumed if part is Ellipsis else 1
    basic = index[:k] + (slice(None),) + index[k + 1 :]
    if any(p is not Ellipsis and p != slice(None) for p in basic):
        x = getslice_op(basic)(x)
    order = (axis,) + tuple(d for d in range(x.ndim) if d != axis)
    moved = ops.permute(x, order) if axis else x
    taken = take(moved, index[k])
    n = len(index[k].shape)
    rest = list(range(n, taken.ndim))
    back = rest[:axis] + list(range(n)) + rest[axis:]
    return ops.permute(taken, tuple(back)) if axis else taken


def map_symbolic(fn, value):
    """``value`` (an argument: nested tuples, lists and dicts) with ``fn``
    applied to its symbolic arrays."""
    if isinstance(value, SymbolicArray):
        return fn(value)
    if isinstance(value, (tuple, list)):
        return type(value)(map_symbolic(fn, v) for v in value)
    if isinstance(value, dict):
        return {k: map_symbolic(fn, v) for k, v in value.items()}
    return value


def has_symbolic(args):
    """Whether ``args`` (a tuple, possibly nested in tuples and lists)
    holds a :class:`SymbolicArray`."""
    return any(isinstance(a, SymbolicArray) for a in _leaves(args))


@ops.is_numeric_array.register(SymbolicArray)
def _is_numeric_array(x):
    return True


# funsor's to_funsor of a symbolic array is a Tensor, as of a backend array
to_funsor.register(SymbolicArray)(tensor_to_funsor)
