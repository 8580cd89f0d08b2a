"""Initializer tensors which refer to the memory they come from: no weight is copied."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir
import torch

__all__ = ["initializer_tensor", "onnx_dtype", "weights_nbytes"]


def onnx_dtype(dtype: torch.dtype) -> ir.DataType:
    """The ONNX type of a torch type (bfloat16 and float16 included)."""
    return ir.tensor_adapters.from_torch_dtype(dtype)


def initializer_tensor(name: str, value: Any) -> ir.TensorProtocol:
    """An onnx_ir tensor named ``name`` over ``value``'s memory.

    A torch tensor becomes an :class:`onnx_ir.tensor_adapters.TorchTensor` sharing its
    storage (float16 and bfloat16 keep their type); it is copied only when it is not
    contiguous or is complex (carried as a real pair, trailing dimension 2). A numpy array
    is wrapped as it is; an onnx_ir tensor (a lazy one reading a checkpoint) is kept.
    """
    if isinstance(value, torch.Tensor):
        t = value.detach()
        if t.is_meta:
            raise ValueError(
                f"The weight {name!r} is on the meta device: it has no values. Give them with "
                "to_onnx(..., weights=fx2onnx.weights.checkpoint_weights(folder, model)) or export "
                "with fx2onnx.weights.to_onnx_from_checkpoint."
            )
        if t.is_complex():
            t = torch.view_as_real(t.resolve_conj().resolve_neg())
        if not t.is_contiguous():
            t = t.contiguous()
        return ir.tensor_adapters.TorchTensor(t, name=name)
    if isinstance(value, np.ndarray):
        return ir.tensor(np.ascontiguousarray(value), name=name)
    if isinstance(value, ir.TensorProtocol):
        return value
    raise TypeError(f"The weight {name!r} must be a torch tensor, a numpy array or an onnx_ir tensor, not {type(value).__name__}.")


def weights_nbytes(model: ir.Model) -> int:
    """The bytes of the initializers of the main graph."""
    return sum(v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value is not None)
