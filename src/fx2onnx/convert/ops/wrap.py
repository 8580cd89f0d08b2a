"""Higher-order operators which only group nodes: their body is inlined.

``torch.no_grad()`` or ``torch.enable_grad()`` blocks inside a model become
``wrap_with_set_grad_enabled(enabled, body, *inputs)`` in the graph torch.export
returns (when the graph is not functionalized). Gradients do not exist in ONNX:
the body is converted in place.
"""

from __future__ import annotations

import torch

from ..registry import converter

hop = torch.ops.higher_order


@converter(hop.wrap_with_set_grad_enabled)
def convert_wrap_with_set_grad_enabled(ctx, node, enabled, body, *inputs):
    placeholders = [n for n in body.graph.nodes if n.op == "placeholder"]
    env = dict(zip(placeholders, inputs))
    outputs = ctx.interpreter.run_nodes(ctx.builder, body.graph, env, owner=body)
    # the node returns a tuple when the body has several outputs, a value otherwise
    return outputs if isinstance(ctx.val(), (list, tuple)) else (outputs[0] if isinstance(outputs, (list, tuple)) else outputs)


# a body computing complex values (DeepSeek V2's rotary embedding under no_grad) converts them as real pairs itself
convert_wrap_with_set_grad_enabled.supports_complex = True
