"""torch adapter."""

import typing

import funsor.torch  # noqa: F401  registers torch implementations of funsor.ops
import torch

from ..extra_ops import categorical_sample
from .base import ArrayBackend, python_literal


class TorchBackend(ArrayBackend):
    name = "torch"
    array_type_name = "torch.Tensor"

    def is_array(self, value):
        return isinstance(value, torch.Tensor)

    def dtype_kind(self, value):
        if value.dtype == torch.bool:
            return "bool"
        if value.dtype.is_floating_point:
            return "real"
        if value.dtype.is_complex:
            return str(value.dtype)
        return "int"

    def array_literal(self, value):
        dtype = str(value.dtype)  # e.g. "torch.float32"
        data = value.detach().cpu()
        if data.numel() == 0:
            source = f"torch.zeros({tuple(data.shape)!r}, dtype={dtype})"
        else:
            source = f"torch.tensor({python_literal(data.tolist())}, dtype={dtype})"
        return source, ("import torch",)

    def to_numpy(self, array):
        return array.detach().cpu().numpy()

    def from_numpy(self, array):
        if array.dtype.kind == "f":
            return torch.as_tensor(array, dtype=torch.get_default_dtype())
        return torch.as_tensor(array)


@categorical_sample.register(typing.Tuple[torch.Tensor, ...])  # noqa: UP006
def _categorical_sample(args, sample_shape=(), keyed=False):
    dist = torch.distributions.Categorical(logits=args[0])
    return dist.sample(tuple(sample_shape))


BACKEND = TorchBackend()
