"""``optimize(model, level=...)``: the default clean-up, then the fusions of a level."""

from __future__ import annotations

import collections
import dataclasses
import time
from typing import Any, Sequence

import onnx
import onnx_ir as ir

from .default import optimize_model
from .rules import LEVELS
from .rules.quantize import (
    ACCURACY_LEVEL,
    QuantizedWeight,
    check_quantize_options,
    quantize_gathers,
    quantize_matmuls,
)

#: the accepted level names
LEVEL_NAMES = tuple(LEVELS)


@dataclasses.dataclass
class RuleResult:
    """What one rule did: how many times it applied and how long it took."""

    #: the name of the rule
    name: str
    #: how many times it rewrote the graph
    matches: int
    #: how long it took, in seconds
    time_s: float
    #: why it was skipped, or what it found, when it says
    note: str = ""


@dataclasses.dataclass
class OptimizationReport:
    """The rules run by :func:`optimize`, with the node counts before and after."""

    #: the optimization level which ran (``default``, ``onnxruntime``, ``opset23``)
    level: str
    #: what every rule did, in the order they ran
    rules: list[RuleResult] = dataclasses.field(default_factory=list)
    #: the number of nodes of the main graph before the optimization
    nodes_before: int = 0
    #: the number of nodes after it
    nodes_after: int = 0
    #: the number of nodes of each op type after the optimization
    op_types: dict[str, int] = dataclasses.field(default_factory=dict)
    #: the weights ``quantize=`` replaced by blocks (node, shape, bytes before and after)
    quantized: list[QuantizedWeight] = dataclasses.field(default_factory=list)

    def matches(self, name: str) -> int:
        """Total matches of the rules called ``name``."""
        return sum(r.matches for r in self.rules if r.name == name)

    def __str__(self) -> str:
        lines = [f"optimize(level={self.level!r}): {self.nodes_before} -> {self.nodes_after} nodes"]
        for r in self.rules:
            note = f"  ({r.note})" if r.note else ""
            lines.append(f"  {r.name:<24} {r.matches:>4} match(es) {r.time_s * 1000:8.1f} ms{note}")
        if self.quantized:
            before = sum(q.bytes_before for q in self.quantized) / 2**20
            after = sum(q.bytes_after for q in self.quantized) / 2**20
            lines.append(f"  quantized {len(self.quantized)} weight(s): {before:.2f} MiB -> {after:.2f} MiB")
            lines.extend(f"    {q}" for q in self.quantized)
        return "\n".join(lines)


def resolve_level(level: bool | str) -> str | None:
    """True -> ``"default"``, False -> None, a level name -> itself; raises ValueError otherwise."""
    if level is True:
        return "default"
    if level is False or level is None:
        return None
    if isinstance(level, str) and level in LEVELS:
        return level
    raise ValueError(f"Unknown optimization level {level!r}: use True, False or one of {list(LEVEL_NAMES)}.")


def optimize(
    model: onnx.ModelProto | ir.Model,
    level: bool | str = "default",
    report: bool = False,
    inline: bool = True,
    enable: Sequence[str] = (),
    disable: Sequence[str] = (),
    quantize: str | None = None,
    block_size: int = 32,
    quantize_embeddings: bool = False,
    symmetric: bool = False,
) -> Any:
    """Optimizes an ONNX model: constant folding, onnxscript's rewrite rules and dead
    code elimination (level ``"default"``), then the fusions of the level.

    * ``"default"``: standard ONNX only, plus Transpose / Reshape / Cast clean-ups;
    * ``"onnxruntime"``: onnxruntime's fused operators (``SimplifiedLayerNormalization``,
      ``com.microsoft.RotaryEmbedding``, ``Gelu`` / ``FastGelu`` / ``BiasGelu``) and, on a
      model of opset >= 23, the standard ``Attention`` with the kv cache;
      ``SkipSimplifiedLayerNormalization`` and packed MatMuls only when enabled
      (``enable=["skip_rms_normalization", "matmul_packing"]``: slower on onnxruntime's CPU);
    * ``"opset23"``: standard operators only: ``Attention``, ``RMSNormalization``,
      ``RotaryEmbedding``, ``Gelu`` (the model must be of opset >= 23).

    :param model: a ``onnx.ModelProto`` or an ``onnx_ir.Model`` (modified in place)
    :param level: a level name, True (``"default"``)
    :param report: also return an :class:`OptimizationReport`
    :param inline: inline the local functions first
    :param enable: rules of the level off by default to run too (the names of the report)
    :param disable: rules of the level not to run (to find which one changes a result)
    :param quantize: ``"int4"`` or ``"int8"``: weight-only quantization, after the fusions, of
        every MatMul / Gemm by a constant 2D weight (lm_head included) into onnxruntime's
        ``com.microsoft.MatMulNBits`` (asymmetric blocks along K, as onnxruntime's
        ``MatMulNBitsQuantizer`` does by default; ``accuracy_level=4``: the kernel may quantize
        the activations to int8 by block, much faster on CPU); level ``"onnxruntime"`` only; the
        report lists the weights (``report.quantized``)
    :param block_size: the values of K sharing one scale and zero point (a power of two >= 16)
    :param symmetric: with ``quantize``, symmetric blocks: one scale, no zero point stored (as
        onnxruntime-genai's model builder quantizes); onnxruntime's int4 kernels are faster on them
        (``bench/bench_quantize.py`` gives the accuracy of both)
    :param quantize_embeddings: with ``quantize``, the embedding tables too (a ``Gather`` of a
        constant 2D table into ``com.microsoft.GatherBlockQuantized``): smaller, not faster; a
        table shared with the head (tied embeddings) is always quantized with it
    :return: the optimized model, of the same kind as ``model``
        (``(model, report)`` when ``report`` is True)

    .. code-block:: python

        onx = fx2onnx.to_onnx(model, args, target_opset=23, optimize=False)
        onx, rep = fx2onnx.optimize(onx, level="onnxruntime", report=True)
        print(rep)
    """
    name = resolve_level(level)
    if name is None:
        raise ValueError("optimize(level=False) does nothing: call it with a level name or True.")
    bits = None
    if quantize_embeddings and quantize is None:
        raise ValueError("quantize_embeddings=True needs quantize='int4' or 'int8'.")
    if quantize is not None:
        bits = check_quantize_options(quantize, block_size)
        if name != "onnxruntime":
            raise ValueError(
                f"quantize={quantize!r} writes onnxruntime's com.microsoft.MatMulNBits, level {name!r} keeps to "
                f"standard ONNX: use level='onnxruntime'."
            )
    is_proto = isinstance(model, onnx.ModelProto)
    if not is_proto and not isinstance(model, ir.Model):
        raise TypeError(f"model must be an onnx.ModelProto or an onnx_ir.Model, got {type(model).__name__}.")
    ir_model = ir.from_proto(model) if is_proto else model
    opset = ir_model.graph.opset_imports.get("", ir_model.opset_imports.get("", 0))
    if name == "opset23" and opset < 23:
        raise ValueError(
            f"Level 'opset23' needs a model of opset >= 23, this one has opset {opset}: "
            f"export it with to_onnx(..., target_opset=23) or use level 'onnxruntime'."
        )
    chosen = _chosen_rules(name, enable, disable)
    rep = OptimizationReport(name, nodes_before=_count(ir_model.graph))
    begin = time.perf_counter()
    optimize_model(ir_model, inline=inline)
    rep.rules.append(RuleResult("onnxscript", 0, time.perf_counter() - begin, "fold, rewrite, fold, dead code"))
    later = []
    for rule in LEVELS[name]:
        if rule.after_quantize and bits is not None and rule.name in chosen:
            later.append(rule)  # on the quantized nodes
            continue
        if rule.name not in chosen:
            why = "disabled" if rule.name in disable else f"off by default: enable=[{rule.name!r}] runs it"
            rep.rules.append(RuleResult(rule.name, 0, 0.0, f"skipped: {why}"))
            continue
        if opset < rule.min_opset:
            rep.rules.append(RuleResult(rule.name, 0, 0.0, f"skipped: opset {opset} < {rule.min_opset}"))
            continue
        begin = time.perf_counter()
        matches = rule.fn(ir_model)
        if matches:
            _remove_unused(ir_model)
        rep.rules.append(RuleResult(rule.name, int(matches), time.perf_counter() - begin))
    if bits is not None:
        begin = time.perf_counter()
        heads: dict = {}
        matches = quantize_matmuls(
            ir_model, bits=bits, block_size=block_size, accuracy_level=ACCURACY_LEVEL, report=rep.quantized, heads=heads,
            symmetric=symmetric,
        )
        # a tied head's table is quantized for the head: its embedding's Gather too, or the float
        # table stays in the file beside the codes (the largest tensor of a small LLM)
        tied = None if quantize_embeddings else {q.weight for q in rep.quantized if q.op_type == "MatMulNBits"}
        matches += quantize_gathers(ir_model, bits=bits, block_size=block_size, report=rep.quantized, tables=tied,
                                    symmetric=symmetric,
                                    heads=heads)
        _remove_unused(ir_model)
        rep.rules.append(RuleResult(f"quantize_{quantize}", matches, time.perf_counter() - begin, f"block {block_size}"))
    for rule in later:
        begin = time.perf_counter()
        matches = rule.fn(ir_model)
        if matches:
            _remove_unused(ir_model)
        rep.rules.append(RuleResult(rule.name, int(matches), time.perf_counter() - begin))
    _finalize(ir_model)
    rep.nodes_after = _count(ir_model.graph)
    rep.op_types = dict(collections.Counter(n.op_type for n in ir_model.graph))
    result = ir.to_proto(ir_model) if is_proto else ir_model
    return (result, rep) if report else result


def _chosen_rules(level: str, enable: Sequence[str], disable: Sequence[str]) -> set[str]:
    """The names of the rules of ``level`` to run; an unknown name is an error listing the known ones."""
    known = {rule.name for rule in LEVELS[level]}
    for option, names in (("enable", enable), ("disable", disable)):
        if isinstance(names, str):
            raise TypeError(f"{option} takes a list of rule names, got the string {names!r}.")
        unknown = sorted(set(names) - known)
        if unknown:
            raise ValueError(f"Unknown rule(s) {unknown} in {option} for level {level!r}: its rules are {sorted(known)}.")
    return {rule.name for rule in LEVELS[level] if (rule.default or rule.name in enable) and rule.name not in disable}


def _count(graph: ir.Graph) -> int:
    return sum(1 for _ in graph)


def _remove_unused(model: ir.Model) -> None:
    from onnx_ir.passes import common

    common.RemoveUnusedNodesPass()(model)


def _finalize(model: ir.Model) -> None:
    from onnx_ir.passes import common

    model.graph.sort()
    ir.passes.Sequential(
        common.RemoveUnusedNodesPass(),
        common.RemoveUnusedOpsetsPass(),
        common.NameFixPass(),
    )(model)
