"""``with_effects``: an operator with side effects, ordered by a token torch.export threads through.

torch.export wraps effectful operators (``_linalg_check_errors``, ``_print``, ops registered
with an effect) into ``with_effects(token, op, *args)`` returning ``(token, *outputs)``. The
token only orders side effects in torch; ONNX has none, so the token is ``None`` (the graph's
TOKEN inputs and outputs are dropped by :func:`fx2onnx.convert.api.convert_exported_program`)
and the wrapped operator is converted by its own converter.
"""

from __future__ import annotations

import torch

from ..errors import UnsupportedOpError
from ..registry import converter


@converter(torch.ops.higher_order.with_effects)
def convert_with_effects(ctx, node, token, op, *args, **kwargs):
    fn = ctx.interpreter.find_converter(op)
    if fn is None:
        raise UnsupportedOpError(op, node)
    result = fn(ctx, node, *args, **kwargs)
    if result is None:
        return (None,)
    return (None, *(result if isinstance(result, (list, tuple)) else (result,)))
