"""Ops our lowering emits that ``funsor.ops`` lacks, written with backend-
neutral array syntax, with shape rules. Funsor evaluates them like any op.

- ``take(x, index)``: ``x[index]``, rows of ``x`` picked by an integer array
  (the one gather a lowered program needs; funsor's ``GetitemOp`` means a
  scalar index whose batch dims are named, so it cannot express this).

Example::

    >>> import numpy as np
    >>> take(np.array([[1, 2], [3, 4], [5, 6]]), np.array([2, 0]))
    array([[5, 6],
           [1, 2]])
"""

from funsor import ops
from funsor.domains import Array, find_domain


@ops.BinaryOp.make(module_name="funsor_lowering.extra_ops")
def take(x, index):
    return x[index]


TakeOp = type(take)  # module-level, so programs holding the op pickle


@find_domain.register(TakeOp)
def find_domain_take(op, x, index):
    return Array[x.dtype, tuple(index.shape) + tuple(x.shape[1:])]


__all__ = ["TakeOp", "take"]
