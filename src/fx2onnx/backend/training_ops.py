"""Converters the backend adds to the built-in ones: operators met when training.

:func:`fx2onnx.to_onnx` exports a model for inference: it refuses a dropout in
training mode (the exported model would be random) and leaves the custom
operators of transformers to its patches. A training step through
:func:`torch.compile` needs both, so the backend looks these converters up
before the built-in ones (a user's dispatcher still comes first):

* ``aten.native_dropout`` in training mode: the mask comes from onnxruntime's
  ``RandomUniformLike``, a new one at every call. It follows the same
  distribution as torch's but not torch's generator: a training step with
  dropout is not bitwise reproducible with :func:`torch.manual_seed`.
* ``aten.mm`` of a transposed first operand, a weight's gradient ``dY^T @ X``
  (``dY`` [K, M], ``X`` [K, N]): onnxruntime transposes the first operand while it
  multiplies, which costs more the larger it is; when ``M > N`` the product is computed
  as ``(X^T @ dY)^T`` (the smaller operand transposed, the result [N, M] transposed
  back). The lm head's gradient of a Llama with hidden 512 and a vocabulary of 4096
  (M = 4096, N = 512, K = 512 tokens): 30.4 -> 27.8 ms with one thread.
* ``transformers::grouped_mm_fallback`` and its backward, the experts' matmul of
  the mixture-of-experts layers in float32 on CPU: each row (the tokens are
  sorted by expert, ``offs`` the cumulative counts) is multiplied by the weight
  of its expert; rows past the last offset stay zero as in transformers' loop.
"""

from __future__ import annotations

from typing import Any

import torch

from ..convert import registry
from ..convert.builder import onnx_dtype
from ..convert.complex_values import involves_complex
from ..convert.dispatcher import Dispatcher
from ..convert.ops._common import fake_of

aten = torch.ops.aten


def convert_native_dropout_training(ctx, node, x, p, train=None):
    """``(x * keep / (1 - p), keep)`` with ``keep`` drawn by onnxruntime; the identity when not training."""
    if not train or not p:
        return ctx.op.Identity(x), ctx.op.Expand(ctx.const(True, torch.bool), ctx.op.Shape(x))
    dtype = ctx.out_dtype(0)
    if p >= 1:
        return ctx.op.Mul(x, ctx.const(0.0, dtype)), ctx.op.Expand(ctx.const(False, torch.bool), ctx.op.Shape(x))
    draw = dtype if dtype in (torch.float32, torch.float64) else torch.float32
    uniform = ctx.op.RandomUniformLike(x, dtype=onnx_dtype(draw), low=0.0, high=1.0)
    keep = ctx.op.GreaterOrEqual(uniform, ctx.const(float(p), draw))  # kept with probability 1 - p
    scaled = ctx.op.Mul(ctx.op.Mul(x, ctx.cast(keep, dtype)), ctx.const(1.0 / (1.0 - p), dtype))
    return scaled, keep


def _expert_of_rows(ctx, rows_like, offs, experts: int):
    """(expert index clamped to the last one, row has an expert) for every row of ``rows_like``."""
    rows = ctx.op.Range(ctx.const(0, torch.int64), ctx.dim_size(rows_like, 0), ctx.const(1, torch.int64))
    offs = ctx.cast(offs, torch.int64)
    passed = ctx.op.GreaterOrEqual(ctx.op.Unsqueeze(rows, ctx.const([1], torch.int64)), ctx.op.Unsqueeze(offs, ctx.const([0], torch.int64)))
    expert = ctx.op.ReduceSum(ctx.cast(passed, torch.int64), ctx.const([1], torch.int64), keepdims=0)
    valid = ctx.op.Less(expert, ctx.const(experts, torch.int64))
    return ctx.op.Min(expert, ctx.const(experts - 1, torch.int64)), valid


def _zero_rows(ctx, values, valid, dtype):
    """``values`` [S, N] with the rows where ``valid`` is false set to zero."""
    return ctx.op.Where(ctx.op.Unsqueeze(valid, ctx.const([1], torch.int64)), values, ctx.const(0.0, dtype))


def convert_grouped_mm_fallback(ctx, node, x, weight, offs):
    """``out[r] = x[r] @ weight[expert(r)]``: the weight of each row's expert gathered, one batched MatMul."""
    experts = int(fake_of(node.args[1]).shape[0])
    dtype = ctx.out_dtype()
    expert, valid = _expert_of_rows(ctx, x, offs, experts)
    rows = ctx.op.Unsqueeze(ctx.cast(x, dtype), ctx.const([1], torch.int64))  # [S, 1, in]
    out = ctx.op.Squeeze(ctx.op.MatMul(rows, ctx.op.Gather(weight, expert, axis=0)), ctx.const([1], torch.int64))
    return _zero_rows(ctx, out, valid, dtype)


def convert_grouped_mm_fallback_backward(ctx, node, x, weight, offs, grad):
    """``grad_x[r] = grad[r] @ weight[e]^T``, ``grad_weight[e] = sum over the rows r of e of x[r]^T grad[r]``."""
    experts = int(fake_of(node.args[1]).shape[0])
    dtype = ctx.out_dtype(0)
    expert, valid = _expert_of_rows(ctx, x, offs, experts)
    rows = ctx.op.Unsqueeze(grad, ctx.const([1], torch.int64))  # [S, 1, out]
    chosen = ctx.op.Transpose(ctx.op.Gather(weight, expert, axis=0), perm=[0, 2, 1])  # [S, out, in]
    grad_x = _zero_rows(ctx, ctx.op.Squeeze(ctx.op.MatMul(rows, chosen), ctx.const([1], torch.int64)), valid, dtype)
    # one-hot [E, S] of the valid rows: x masked per expert [E, S, in], then x_e^T @ grad
    one_hot = ctx.op.Equal(
        ctx.op.Unsqueeze(ctx.op.Range(ctx.const(0, torch.int64), ctx.const(experts, torch.int64), ctx.const(1, torch.int64)), ctx.const([1], torch.int64)),
        ctx.op.Unsqueeze(expert, ctx.const([0], torch.int64)),
    )
    one_hot = ctx.cast(ctx.op.And(one_hot, ctx.op.Unsqueeze(valid, ctx.const([0], torch.int64))), dtype)
    masked = ctx.op.Mul(ctx.op.Unsqueeze(one_hot, ctx.const([2], torch.int64)), ctx.op.Unsqueeze(x, ctx.const([0], torch.int64)))
    grad_weight = ctx.op.MatMul(ctx.op.Transpose(masked, perm=[0, 2, 1]), grad)  # [E, in, out]
    return grad_x, grad_weight


def convert_mm_transposed_first(ctx, node, a, b):
    """``a @ b`` where ``a = Transpose(source)``: ``Transpose(Transpose(b) @ source)`` when ``a``'s
    rows outnumber ``b``'s columns (static shapes, float); the built-in converters otherwise."""

    producer = getattr(a, "producer", lambda: None)()
    first, second = (fake_of(arg) for arg in node.args[:2])
    if (
        producer is not None
        and producer.op_type == "Transpose"
        and list(producer.attributes.get_ints("perm", [])) == [1, 0]
        and isinstance(first, torch.Tensor)
        and isinstance(second, torch.Tensor)
        and first.dim() == second.dim() == 2
        and first.dtype.is_floating_point
        and all(isinstance(d, int) for d in (*first.shape, *second.shape))
        and first.shape[0] > second.shape[1]
    ):
        source = producer.inputs[0]
        return ctx.op.Transpose(ctx.op.MatMul(ctx.op.Transpose(b, perm=[1, 0]), source), perm=[1, 0])
    fn = registry.lookup_complex(node.target) if involves_complex(node) else registry.lookup(node.target)
    return fn(ctx, node, a, b)


def training_converters() -> dict[Any, Any]:
    """The converters of this module, by operator."""
    return {
        aten.native_dropout.default: convert_native_dropout_training,
        aten.mm.default: convert_mm_transposed_first,
        # strings: transformers registers these operators when its moe module is imported
        "transformers::grouped_mm_fallback": convert_grouped_mm_fallback,
        "transformers::grouped_mm_fallback_backward": convert_grouped_mm_fallback_backward,
    }


def backend_dispatcher(user: Dispatcher | None = None) -> Dispatcher:
    """A dispatcher with the training converters, then the user's ones (which win on a shared operator)."""
    dispatcher = Dispatcher(training_converters())
    if user is not None:
        for key, fn in user._by_key.items():
            dispatcher.register(key, fn)
    return dispatcher
