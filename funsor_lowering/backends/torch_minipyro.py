"""``funsor.minipyro`` while tracing: an observed value that is a symbolic
array becomes a funsor as minipyro turns an observed ``torch.Tensor`` into
one (minipyro converts only ``torch.Tensor`` values, so a traced ``obs=``
would reach ``log_prob`` unconverted)."""

from collections import OrderedDict

import torch
from funsor import Bint, minipyro
from funsor.tensor import Tensor

from ..ops.symbolic import SymbolicArray


def traced_apply_stack(msg):
    """minipyro's ``apply_stack`` (each handler processes the message, the
    value is computed and converted to a funsor, the handlers below a
    stopping one post-process it), converting symbolic values too."""
    processed = []  # the handlers from the top of the stack down
    for handler in reversed(minipyro.PYRO_STACK):
        handler.process_message(msg)
        processed.append(handler)
        if msg.get("stop"):
            break
    if msg["value"] is None:
        msg["value"] = msg["fn"](*msg["args"])
    value = msg["value"]
    if isinstance(value, SymbolicArray):
        msg["value"] = _symbolic_to_funsor(
            value, msg["cond_indep_stack"], msg["output"], msg["name"]
        )
    elif isinstance(value, torch.Tensor):
        msg["value"] = minipyro.tensor_to_funsor(
            value, msg["cond_indep_stack"], msg["output"]
        )
    for handler in reversed(processed):
        handler.postprocess_message(msg)
    return msg


def _symbolic_to_funsor(value, cond_indep_stack, output, name):
    """A ``Tensor`` of ``value``: batch dims of size 1 dropped, the others
    named by the plate at that dim, as ``minipyro.tensor_to_funsor``."""
    batch_shape = tuple(value.shape[: len(value.shape) - len(output.shape)])
    inputs = OrderedDict()
    for dim, size in enumerate(batch_shape):
        if size == 1:
            continue
        frame = cond_indep_stack.get(dim - len(batch_shape))
        if frame is None or frame.size != size:
            raise ValueError(
                f"site {name!r}: value of shape {tuple(value.shape)} has a "
                f"batch dim {dim - len(batch_shape)} of size {size}, expected "
                f"{'a plate at that dim' if frame is None else frame.size}"
            )
        inputs[frame.name] = Bint[size]
    kept = tuple(size for size in batch_shape if size != 1)
    if len(kept) < len(batch_shape):
        value = value.reshape(kept + tuple(output.shape))
    return Tensor(value, inputs, output.dtype)
