"""torch adapter."""

import funsor.torch  # noqa: F401  registers torch implementations of funsor.ops
import torch

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


BACKEND = TorchBackend()
