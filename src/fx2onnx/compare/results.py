"""Running an ONNX model while keeping every intermediate result."""

from __future__ import annotations

import ast
import dataclasses
import functools
from typing import Any

import numpy as np
import onnx

from fx2onnx.validation import run_session

_SHORT_DTYPES = {
    "float32": "f32",
    "float16": "f16",
    "float64": "f64",
    "bfloat16": "bf16",
    "int64": "i64",
    "int32": "i32",
    "int16": "i16",
    "int8": "i8",
    "uint8": "u8",
    "bool": "bool",
}


@dataclasses.dataclass
class ResultInfo:
    """One result of a model run: a model input or the output of a node.

    :param index: position in the sequence of results of the model
    :param op_type: the node's op type, ``"input"`` for a model input
    :param name: the result (value) name
    :param node: the name of the node producing it ("" for inputs)
    :param value: the computed array (None when it is not a tensor)
    :param module: the path of the torch module the node comes from, when the
        exporter left it in the node metadata ("" otherwise)
    """

    #: position in the sequence of results of the model
    index: int
    #: the node's op type, ``"input"`` for a model input
    op_type: str
    #: the result (value) name
    name: str
    #: the name of the node producing it (``""`` for inputs)
    node: str
    #: the computed array (None when it is not a tensor)
    value: np.ndarray | None
    #: the path of the torch module the node comes from, when the exporter recorded it
    module: str = ""

    @property
    def shape(self) -> tuple[int, ...] | None:
        """The shape of the value, None when it is not a tensor."""
        return None if self.value is None else tuple(self.value.shape)

    @property
    def dtype(self) -> str:
        """The element type, short (``f32``, ``i64``), ``?`` when it is not a tensor."""
        if self.value is None:
            return "?"
        return _SHORT_DTYPES.get(str(self.value.dtype), str(self.value.dtype))

    @property
    def shape_text(self) -> str:
        """The shape as text, ``2x8x16``, ``()`` for a scalar, ``?`` when unknown."""
        shape = self.shape
        if shape is None:
            return "?"
        return "x".join(str(d) for d in shape) if shape else "()"

    @functools.cached_property
    def flat(self) -> np.ndarray | None:
        """The values as a flat float64 array (cached, used to compare results)."""
        if self.value is None:
            return None
        try:
            return self.value.reshape(-1).astype(np.float64)
        except (TypeError, ValueError):
            return None

    @functools.cached_property
    def scale(self) -> float:
        """The largest finite absolute value (0 when there is none)."""
        flat = self.flat
        if flat is None or flat.size == 0:
            return 0.0
        finite = np.abs(flat[np.isfinite(flat)])
        return float(finite.max()) if finite.size else 0.0

    @property
    def summary(self) -> str:
        """A short summary of the values, a few of them or min / max / mean."""
        return summarize(self.value)


def summarize(value: np.ndarray | None) -> str:
    """Summarizes an array in a few characters: its values when small, else range and mean."""
    if value is None:
        return "?"
    if value.size == 0:
        return "empty"
    if value.size <= 4:
        flat = value.reshape(-1)
        if value.dtype.kind == "f":
            return "[" + ",".join(f"{float(v):.3g}" for v in flat) + "]"
        return "[" + ",".join(str(v) for v in flat.tolist()) + "]"
    if value.dtype.kind in "fc" or str(value.dtype) == "bfloat16":
        f = value.astype(np.float64)
        finite = f[np.isfinite(f)]
        if finite.size == 0:
            return "nan/inf"
        bad = "" if finite.size == f.size else " !nan/inf"
        return f"{finite.min():.3g}:{finite.max():.3g} m={finite.mean():.2g}{bad}"
    if value.dtype.kind in "iub":
        i = value.astype(np.int64)
        return f"{i.min()}:{i.max()} m={i.mean():.2g}"
    return str(value.dtype)


def node_module(node: onnx.NodeProto) -> str:
    """The torch module path an exporter recorded in the node metadata, "" if none.

    Reads the ``module`` key (:func:`fx2onnx.to_onnx`) or the name scopes
    ``torch.onnx.export`` writes (``pkg.torch.onnx.name_scopes``).
    """
    props = {p.key: p.value for p in node.metadata_props}
    if props.get("module"):
        return props["module"]
    scopes = props.get("pkg.torch.onnx.name_scopes")
    if scopes:
        try:
            names = ast.literal_eval(scopes)
        except (ValueError, SyntaxError):
            return ""
        # the last scope is the FX node itself
        if isinstance(names, list) and len(names) >= 2:
            return str(names[-2])
    return ""


def _with_all_outputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of the model where every node output of the main graph is a graph output.

    The added outputs carry only a name: onnxruntime infers their type.
    """
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    known = {o.name for o in copy.graph.output}
    for node in copy.graph.node:
        for name in node.output:
            if name and name not in known:
                copy.graph.output.append(onnx.ValueInfoProto(name=name))
                known.add(name)
    return copy


def _run_onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray], providers) -> dict[str, Any]:
    import onnxruntime

    opts = onnxruntime.SessionOptions()
    opts.log_severity_level = 3
    # the results must be those of the model's nodes, not of the fused graph
    opts.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = onnxruntime.InferenceSession(
        _with_all_outputs(model).SerializeToString(),
        opts,
        providers=list(providers or ["CPUExecutionProvider"]),
    )
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, run_session(sess, feeds)))


def _run_reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, Any]:
    from onnx.reference import ReferenceEvaluator

    ref = ReferenceEvaluator(model)
    return ref.run(None, feeds, intermediate=True)


def run_with_intermediate_results(
    model: onnx.ModelProto,
    feeds: dict[str, np.ndarray],
    *,
    runtime: str = "onnxruntime",
    include_constants: bool = False,
    providers: list[str] | None = None,
) -> list[ResultInfo]:
    """Runs ``model`` and returns its inputs and every node output, in execution order.

    :param model: the model (only the main graph's nodes are observed, not subgraphs)
    :param feeds: checked feeds (see :func:`fx2onnx.compare.feeds.check_feeds`)
    :param runtime: ``"onnxruntime"`` (every node output becomes a graph output of a
        copy of the model, graph optimizations disabled) or ``"reference"``
        (:class:`onnx.reference.ReferenceEvaluator`, slower, pure python)
    :param include_constants: keep the outputs of ``Constant`` nodes
    :return: a list of :class:`ResultInfo`
    """
    if runtime == "onnxruntime":
        values = _run_onnxruntime(model, feeds, providers)
    elif runtime == "reference":
        values = _run_reference(model, feeds)
    else:
        raise ValueError(f"runtime must be 'onnxruntime' or 'reference', not {runtime!r}.")
    results: list[ResultInfo] = []
    for name, value in feeds.items():
        results.append(ResultInfo(len(results), "input", name, "", np.asarray(value)))
    for node in model.graph.node:
        if node.op_type == "Constant" and not include_constants:
            continue
        for name in node.output:
            if not name:
                continue
            value = values.get(name)
            array = np.asarray(value) if isinstance(value, (np.ndarray, np.generic)) else None
            results.append(
                ResultInfo(len(results), node.op_type, name, node.name, array, node_module(node))
            )
    return results
