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
from onnxscript.rewriter import _DEFAULT_REWRITE_RULES, RewriteRule
from onnxscript.rewriter.rules.common import _no_op


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


@functools.cache
def default_rewrite_rules() -> tuple[RewriteRule, ...]:
    """onnxscript's default rules without the tolerant arithmetic no-ops, plus exact ones."""
    tolerant = {id(rule) for rule in _no_op.rules.rules} - {
        id(_no_op.dropout_zero_rule),
        id(_no_op.dropout_inference_rule),
    }
    kept = [rule for rule in _DEFAULT_REWRITE_RULES if id(rule) not in tolerant]
    return tuple(kept + _rules())
