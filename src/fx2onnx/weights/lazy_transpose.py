"""``Transpose`` of a lazy weight folded into a lazy weight: the checkpoint is still read when saved.

torch.export writes a linear layer as ``MatMul(x, Transpose(weight))``. onnxscript's constant
folding folds such a ``Transpose`` whatever the size of the weight (it is its only reader): it
evaluates the lazy tensor reading the checkpoint and keeps the transposed view, so after the
optimization every weight of the model is in memory in the exported type (29 GB for a 7B model
in float32). :func:`fold_lazy_transposes` runs before it: the ``Transpose`` of a lazy initializer
read by nothing else becomes a lazy initializer of the same name which reads the tensor and
transposes it when its bytes are needed (a strided view, written in blocks when saved).
"""

from __future__ import annotations

from typing import Sequence

import onnx_ir as ir
import torch

from .save import _StridedTorchTensor


def _transposed(source: ir.LazyTensor, perm: tuple[int, ...], name: str) -> ir.TensorProtocol:
    """The values of ``source`` transposed by ``perm``: a strided view of the tensor read."""

    tensor = source.raw()  # the function reading the checkpoint, not a cached value
    raw = getattr(tensor, "raw", None)
    if isinstance(raw, torch.Tensor):
        return _StridedTorchTensor(raw.permute(perm), name=name)
    return ir.tensor(tensor.numpy().transpose(perm), name=name)


def _perm(node: ir.Node, rank: int) -> tuple[int, ...]:
    attribute = node.attributes.get("perm")
    if attribute is None:
        return tuple(reversed(range(rank)))
    values: Sequence[int] = attribute.as_ints()
    return tuple(int(p) % rank for p in values)


def fold_lazy_transposes(model: ir.Model) -> int:
    """Replaces every ``Transpose`` (main graph) of a lazy initializer (:class:`onnx_ir.LazyTensor`,
    a checkpoint read on demand) read by that node alone by a lazy initializer named after the
    node's output, as onnxscript's folding names it; returns how many."""
    graph = model.graph
    count = 0
    for node in list(graph):
        if node.op_type != "Transpose" or node.domain not in ("", "ai.onnx") or len(node.inputs) != 1:
            continue
        source = node.inputs[0]
        tensor = source.const_value if source is not None else None
        if not isinstance(tensor, ir.LazyTensor) or not source.is_initializer() or len(source.uses()) != 1:
            continue
        out = node.outputs[0]
        if out.is_graph_output():
            continue
        perm = _perm(node, len(tensor.shape))
        shape = ir.Shape([tensor.shape[p] for p in perm])
        name = out.name

        def read(tensor: ir.LazyTensor = tensor, perm: tuple[int, ...] = perm, name: str | None = name):
            return _transposed(tensor, perm, name or "")

        lazy = ir.LazyTensor(read, dtype=tensor.dtype, shape=shape, name=name)
        folded = ir.Value(shape=shape, type=ir.TensorType(tensor.dtype), const_value=lazy)
        ir.convenience.replace_all_uses_with(out, folded)
        graph.remove(node, safe=True)
        del graph.initializers[source.name]
        folded.name = name
        graph.register_initializer(folded)
        count += 1
    return count
