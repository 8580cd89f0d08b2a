"""onnxscript's default rewrite rules, with exact no-op rules instead of its tolerant ones.

onnxscript's ``x * 1``, ``x + 0``, ``x - 0`` and ``x / 1`` rules match a constant within
a tolerance, so ``(x + 1e-9) * 1.000001`` becomes ``Identity(x)``: a silent wrong model
(an epsilon added before a square root disappears the same way). The rules below remove
the operator only when the constant is exactly the neutral element and neither the
shape nor the type of ``x`` changes; ``x & True`` and ``x | False`` go the same way.

.. runpython::
    :showcode:

    from fx2onnx.optimizer.rules.no_op import default_rewrite_rules

    print(len(default_rewrite_rules()), "rules")
"""

from __future__ import annotations

import functools

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import _DEFAULT_REWRITE_RULES, RewriteRule, _basics, _matcher
from onnxscript.rewriter.rules.common import _basic_rules, _no_op


def _exactly(value: ir.Value, neutral: float) -> bool:
    array = ir.convenience.get_const_tensor(value) if value is not None else None
    if array is None:
        return False
    numbers = array.numpy()
    return numbers.size >= 1 and bool(np.all(numbers == neutral))


def _same_shape_and_type(x: ir.Value, out: ir.Value, constant: ir.Value) -> bool:
    """Removing the node keeps the output's shape and type (no broadcast, no promotion)."""
    if x.type is None or out.type is None or x.type != out.type:
        return False
    if x.shape is None or out.shape is None or x.shape != out.shape:
        return False
    const_shape = constant.shape
    return const_shape is not None and const_shape.rank() <= x.shape.rank()


def _condition(neutral: float):
    def check(context, x, c, **_) -> bool:
        out = context.root.outputs[0] if hasattr(context, "root") and context.root is not None else None
        if out is None:
            return False
        return _exactly(c, neutral) and _same_shape_and_type(x, out, c)

    return check


def _identity(op, x, c, **_):
    return op.Identity(x)


def _rules() -> list[RewriteRule]:
    patterns = [
        (lambda op, x, c: op.Mul(x, c), 1.0),
        (lambda op, x, c: op.Mul(c, x), 1.0),
        (lambda op, x, c: op.Add(x, c), 0.0),
        (lambda op, x, c: op.Add(c, x), 0.0),
        (lambda op, x, c: op.Sub(x, c), 0.0),
        (lambda op, x, c: op.Div(x, c), 1.0),
        # boolean masks (transformers' causal mask starts from all-true)
        (lambda op, x, c: op.And(x, c), 1.0),
        (lambda op, x, c: op.And(c, x), 1.0),
        (lambda op, x, c: op.Or(x, c), 0.0),
        (lambda op, x, c: op.Or(c, x), 0.0),
    ]
    return [RewriteRule(target, _identity, _condition(neutral)) for target, neutral in patterns]


class _SiblingSlicesMatcher(_matcher.SimplePatternMatcher):
    """onnxscript's matcher for ``SlicesSplit`` (``Slice(x, ...), Slice(x, ...)`` into a ``Split``) with
    its candidates taken among the consumers of ``x``.

    A pattern of two output nodes is matched by brute force: for every node of the graph, whatever its
    type, onnxscript lists the graph's nodes by type, then tries every ``Slice`` of the graph as the
    second one: quadratic in the size of the graph (Longformer-base: 727 s of optimization at 12 layers
    on a shared machine; 99 s of 107 s at 6 layers, 11 s now, the same graph). Both slices of the
    pattern take the same ``x``: the first one is the node given, the second one is among the
    consumers of its first input."""

    def match(self, model, graph_or_function, node, *, verbose=0, remove_nodes=True, tracer=None):  # noqa: ANN001
        first = self.pattern.output_nodes[0].op_identifier()
        if node.op_identifier() != first:
            return _basics.MatchResult().fail("Not the first node of the pattern.")
        if len(self.pattern.output_nodes) != 2 or not node.inputs or node.inputs[0] is None:
            return super().match(model, graph_or_function, node, verbose=verbose, remove_nodes=remove_nodes,
                                 tracer=tracer)
        self._tracer = tracer
        self._graph = graph_or_function if isinstance(graph_or_function, ir.Graph) else graph_or_function.graph
        match = None
        for other in [user for user, _ in node.inputs[0].uses() if user.op_identifier() == first]:
            self._init_match(verbose)
            match = self._multi_match((node, other), check_removable=remove_nodes)
            if match:
                return match
        return match if match is not None else _basics.MatchResult().fail("No match found.")


def _with_sibling_slices_matcher(rule: RewriteRule) -> RewriteRule:
    """``SlicesSplit``'s rule matched by :class:`_SiblingSlicesMatcher` (a new rule, onnxscript's stays)."""
    if rule.name != "SlicesSplit":
        return rule
    fast = _basic_rules.SlicesSplit.rule()
    fast._matcher = _SiblingSlicesMatcher(fast._target_pattern)  # noqa: SLF001 - onnxscript pinned
    return fast


@functools.cache
def default_rewrite_rules() -> tuple[RewriteRule, ...]:
    """onnxscript's default rules without the tolerant arithmetic no-ops, plus exact ones
    (``SlicesSplit`` matched among the consumers of the sliced tensor, see :class:`_SiblingSlicesMatcher`)."""
    tolerant = {id(rule) for rule in _no_op.rules.rules} - {
        id(_no_op.dropout_zero_rule),
        id(_no_op.dropout_inference_rule),
    }
    kept = [_with_sibling_slices_matcher(rule) for rule in _DEFAULT_REWRITE_RULES if id(rule) not in tolerant]
    return tuple(kept + _rules())
