"""The default level of the optimizer: constant folding, onnxscript's rewrite rules (ours for the exact
ones), removal of unused nodes, what :func:`fx2onnx.to_onnx` runs with ``optimize=True``.

.. code-block:: python

    import onnx_ir as ir
    from fx2onnx.optimizer.default import optimize_model

    model = optimize_model(ir.load("model.onnx"))
"""

from __future__ import annotations

import logging

import onnx_ir as ir
import onnxscript.optimizer
import onnxscript.rewriter
from onnx_ir.passes import common

from ..weights.lazy_transpose import fold_lazy_transposes
from .rules.no_op import default_rewrite_rules


def _fold_constants(model: ir.Model) -> None:
    """onnxscript's constant folding, without its warning for the multi-output nodes it leaves (a ``TopK`` of
    constant lengths): the node stays, nothing a user can act on. A ``Transpose`` of a weight read from a
    checkpoint is folded first into a weight read when saved (:mod:`fx2onnx.weights.lazy_transpose`)."""
    fold_lazy_transposes(model)

    folding_logger = logging.getLogger("onnxscript.optimizer._constant_folding")
    level = folding_logger.level
    folding_logger.setLevel(logging.ERROR)
    try:
        onnxscript.optimizer.fold_constants(model, onnx_shape_inference=False)
    finally:
        folding_logger.setLevel(level)


def optimize_model(model: ir.Model, inline: bool = True) -> ir.Model:
    """Constant folding, onnxscript's default rewrite rules, removal of unused nodes.

    The same passes as ``onnxscript.optimizer.optimize_ir`` in a cheaper order: the
    shapes are already known from torch (no ONNX shape inference) and the rewrite
    rules, the costly part, run once between two constant foldings. Tests on the
    tiny transformers models give the same graphs in half the time.
    """
    by_output = {o.name: dict(n.metadata_props) for n in model.graph for o in n.outputs if n.metadata_props}
    output_types = [(o.type, o.shape) for o in model.graph.outputs]
    if inline:
        common.InlinePass()(model)
    _fold_constants(model)
    # onnxscript's default rules, its tolerant x*1 / x+0 replaced by exact ones (see no_op.py);
    # also removes unused nodes, functions and opsets
    onnxscript.rewriter.rewrite(model, pattern_rewrite_rules=list(default_rewrite_rules()))
    register_orphan_constants(model)
    _fold_constants(model)
    ir.passes.Sequential(
        common.RemoveUnusedNodesPass(),
        common.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0),
        common.LiftSubgraphInitializersToMainGraphPass(),
        common.DeduplicateInitializersPass(),
        common.CommonSubexpressionEliminationPass(),
        common.OutputFixPass(),
        common.NameFixPass(),
    )(model)
    # a pass may replace an output by an equivalent value built without type (CSE)
    for out, (type_, shape) in zip(model.graph.outputs, output_types):
        if out.type is None and type_ is not None:
            out.type, out.shape = type_, shape
    # a node the optimizer rebuilt (a folded shape) takes the metadata of the node it replaces
    for node in model.graph:
        if "fx_node" not in node.metadata_props:
            for out in node.outputs:
                if out.name in by_output:
                    node.metadata_props.update(by_output[out.name])
                    break
    return model


def register_orphan_constants(model: ir.Model) -> int:
    """Registers as initializers the constant values nodes take but no graph holds; returns how many.

    onnxscript's rewriter creates the bounds of a fused ``Clip`` as initializers named
    ``x_min``/``x_max``; a second fusion on the same input gets ``x_min_1`` and the value is
    left unregistered (measured with onnxscript 0.6: ``x.clamp_min(1).clamp_max(3) +
    x.clamp_min(2).clamp_max(5)`` gave a model onnxruntime refuses to load).
    """
    count = 0
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        graph = node.graph
        for value in node.inputs:
            if value is None or value.producer() is not None or value.is_graph_input():
                continue
            if value.is_initializer() or value.const_value is None or graph is None:
                continue
            base, k = value.name or "constant", 1
            while value.name is None or value.name in graph.initializers:
                value.name = f"{base}_{k}"
                k += 1
            graph.register_initializer(value)
            count += 1
    return count
