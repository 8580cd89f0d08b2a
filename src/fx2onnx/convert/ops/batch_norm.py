"""The batch-norm overloads torch.export leaves besides ``batch_norm`` (training and eval).

``_native_batch_norm_legit`` (running statistics), ``_batch_norm_with_update`` and its
functional form, ``_batch_norm_no_update``. They share the formulas of
:mod:`.vision` (eval) and :mod:`.backward` (training, updated running statistics).
Unused saved statistics are the empty tensors torch returns.
"""

from __future__ import annotations

import numpy as np
import torch

from ..registry import converter
from .backward import convert_native_batch_norm_functional
from .vision import _batch_norm_eval, _batch_norm_input_stats

aten = torch.ops.aten


def _empty(ctx, index: int):
    return ctx.const(np.zeros((0,), dtype=np.float32), ctx.out_dtype(index))


@converter(aten._native_batch_norm_legit.default)
def convert_native_batch_norm_legit(ctx, node, x, weight, bias, running_mean, running_var, training, momentum, eps):
    """Training: batch statistics (functionalization moves the running-stat update to
    ``_native_batch_norm_legit_functional``); eval: running statistics."""
    if training:
        y, mean, rstd, _, _ = convert_native_batch_norm_functional(
            ctx, node, x, weight, bias, running_mean, running_var, True, momentum, eps
        )
        return y, mean, rstd
    return _batch_norm_eval(ctx, x, weight, bias, running_mean, running_var, eps), _empty(ctx, 1), _empty(ctx, 2)


@converter(aten._batch_norm_with_update_functional.default)
def convert_batch_norm_with_update_functional(ctx, node, x, weight, bias, running_mean, running_var, momentum, eps):
    y, mean, rstd, new_mean, new_var = convert_native_batch_norm_functional(
        ctx, node, x, weight, bias, running_mean, running_var, True, momentum, eps
    )
    return y, mean, rstd, _empty(ctx, 3), new_mean, new_var


@converter(aten._batch_norm_with_update.default)
def convert_batch_norm_with_update(ctx, node, x, weight, bias, running_mean, running_var, momentum, eps):
    y, mean, rstd, _, _ = convert_native_batch_norm_functional(
        ctx, node, x, weight, bias, running_mean, running_var, True, momentum, eps
    )
    return y, mean, rstd, _empty(ctx, 3)


@converter(aten._batch_norm_no_update.default)
def convert_batch_norm_no_update(ctx, node, x, weight, bias, running_mean, running_var, momentum, eps):
    if running_mean is None:
        y = _batch_norm_input_stats(ctx, x, weight, bias, eps)
    else:
        y = _batch_norm_eval(ctx, x, weight, bias, running_mean, running_var, eps)
    return y, _empty(ctx, 1), _empty(ctx, 2), _empty(ctx, 3)
