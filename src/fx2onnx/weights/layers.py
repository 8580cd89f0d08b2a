"""Validation of a saved model larger than memory, one decoder layer at a time.

:func:`fx2onnx.validate` holds the eager model and the onnxruntime session at once: twice the
weights. :func:`validate_by_layers` holds about one layer twice:

* the saved ONNX file is cut into consecutive parts along the module each node comes from
  (``metadata_props["module"]``, ``model.layers.<i>...``); each part is written as a small
  model next to the file, whose initializers refer to the same ``.data`` file (nothing is
  copied), and run by onnxruntime on what the previous parts computed;
* the eager model is built on the meta device; the tensors outside the layers are read
  from the checkpoint, and each layer's are read before it runs and dropped after;
* every layer's output (the hidden states) is compared with the ONNX value its part
  produces for the next one, and the model's outputs with the graph's outputs.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Sequence

import numpy as np
import onnx
import torch

from ..validation import flatten_inputs, flatten_outputs, to_numpy
from .checkpoint import _aliases, _candidates, checkpoint_files
from .empty import empty_weights
from .export import _torch_dtype, model_from_checkpoint_config


@dataclasses.dataclass
class LayerReport:
    """The comparison of one layer (or of the model's outputs: ``name="outputs"``)."""

    name: str
    max_abs: float
    max_rel: float
    ok: bool

    def __str__(self) -> str:
        return f"{self.name}: {'OK' if self.ok else 'MISMATCH'} max abs {self.max_abs:.2e}, max rel {self.max_rel:.2e}"


def _layer_list(model: torch.nn.Module) -> str:
    """The name of the largest ``ModuleList`` of ``model`` (the decoder layers)."""
    best, size = "", 0
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) > size:
            best, size = name, len(module)
    if not best:
        raise ValueError("The model has no ModuleList of layers to validate one at a time.")
    return best


def _layer_of(module: str, prefix: str) -> int | None:
    if not module.startswith(prefix + "."):
        return None
    head = module[len(prefix) + 1 :].split(".", 1)[0]
    return int(head) if head.isdigit() else None


def _used_names(node: onnx.NodeProto) -> set[str]:
    """The values a node reads, those its subgraphs read from the outer scope included."""
    names = {n for n in node.input if n}
    for attr in node.attribute:
        graphs = list(attr.graphs) + ([attr.g] if attr.HasField("g") else [])
        for graph in graphs:
            inner = {o for n in graph.node for o in n.output} | {i.name for i in graph.input}
            inner |= {i.name for i in graph.initializer}
            for sub in graph.node:
                names |= _used_names(sub) - inner
    return names


def split_by_layers(proto: onnx.ModelProto, prefix: str) -> list[tuple[int | None, list[onnx.NodeProto]]]:
    """The nodes of ``proto`` in runs of consecutive nodes of the same layer (``prefix.<i>``), the
    nodes of no layer in runs of their own (key None)."""
    runs: list[tuple[int | None, list[onnx.NodeProto]]] = []
    for node in proto.graph.node:
        module = next((p.value for p in node.metadata_props if p.key == "module"), "")
        key = _layer_of(module, prefix)
        if runs and runs[-1][0] == key:
            runs[-1][1].append(node)
        else:
            runs.append((key, [node]))
    return runs


def _part_model(proto: onnx.ModelProto, nodes, inputs: dict[str, np.ndarray], outputs: list[str]) -> onnx.ModelProto:
    """A model made of ``nodes``, its inputs typed from the arrays given, its initializers the
    original ones (external references to the same data file)."""
    from onnx import helper

    used = set().union(*(_used_names(n) for n in nodes))
    initializers = [t for t in proto.graph.initializer if t.name in used]
    infos = {v.name: v for v in list(proto.graph.value_info) + list(proto.graph.output)}
    graph_inputs = [
        helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(array.dtype), array.shape)
        for name, array in inputs.items()
    ]
    graph_outputs = [infos.get(name) or onnx.ValueInfoProto(name=name) for name in outputs]
    graph = helper.make_graph(nodes, "part", graph_inputs, graph_outputs, initializer=initializers)
    model = helper.make_model(graph, opset_imports=proto.opset_import, ir_version=proto.ir_version)
    model.functions.extend(proto.functions)
    return model


def _compare(expected: np.ndarray, got: np.ndarray, atol: float, rtol: float) -> tuple[float, float, bool]:
    expected = expected.astype(np.float64)
    got = got.astype(np.float64)
    if expected.shape != got.shape:
        return float("inf"), float("inf"), False
    diff = np.abs(expected - got)
    max_abs = float(diff.max()) if diff.size else 0.0
    max_rel = float((diff / (np.abs(expected) + 1e-12)).max()) if diff.size else 0.0
    return max_abs, max_rel, bool(np.all(diff <= atol + rtol * np.abs(expected)))


class _LazyLayers:
    """Reads the tensors of a layer from the checkpoint before it runs, drops them after."""

    def __init__(self, model: torch.nn.Module, checkpoint: str, prefix: str, dtype: torch.dtype | None):
        self.model, self.dtype = model, dtype
        files = checkpoint_files(checkpoint)
        aliases = _aliases(model)
        base = getattr(model, "base_model_prefix", "") or ""
        self.keys: dict[str, tuple[str, str]] = {}
        for name in aliases:
            key = next((c for a in aliases[name] for c in _candidates(a, base) if c in files), None)
            if key is not None:
                self.keys[name] = (files[key], key)
        self.prefix = prefix
        self.outputs: dict[int, np.ndarray] = {}
        #: the tensors kept (outside the layers), by checkpoint key: a tied weight is read once
        self.kept: dict[tuple[str, str], torch.Tensor] | None = None

    def read(self, name: str) -> torch.Tensor:
        from safetensors import safe_open

        path, key = self.keys[name]
        if self.kept is not None and (path, key) in self.kept:
            return self.kept[path, key]
        with safe_open(path, framework="pt") as f:
            tensor = f.get_tensor(key)
        if self.dtype is not None and tensor.is_floating_point():
            tensor = tensor.to(self.dtype)
        if self.kept is not None:
            self.kept[path, key] = tensor
        return tensor

    def load(self, module: torch.nn.Module, prefix: str, only: str | None = None) -> list[tuple[torch.nn.Module, str, torch.Tensor]]:
        """Replaces every tensor of ``module`` the checkpoint holds (or the one named ``only``);
        returns what to restore."""
        saved = []
        for name, param in list(module.named_parameters(recurse=True)) + list(module.named_buffers(recurse=True)):
            full = f"{prefix}.{name}" if prefix else name
            if full not in self.keys or (only is not None and full != only):
                continue
            path, _, attr = name.rpartition(".")
            owner = module.get_submodule(path) if path else module
            is_param = attr in owner._parameters
            saved.append((owner, attr, param))
            value = self.read(full)
            if is_param:
                owner._parameters[attr] = torch.nn.Parameter(value, requires_grad=False)
            else:
                owner._buffers[attr] = value
        return saved

    @staticmethod
    def restore(saved) -> None:
        for owner, attr, tensor in reversed(saved):
            (owner._parameters if attr in owner._parameters else owner._buffers)[attr] = tensor

    def hooks(self) -> list[Any]:
        layers = self.model.get_submodule(self.prefix)
        handles = []
        for i, layer in enumerate(layers):
            state: dict[str, Any] = {}

            def pre(module, args, kwargs, i=i, state=state):
                state["saved"] = self.load(module, f"{self.prefix}.{i}")

            def post(module, args, kwargs, output, i=i, state=state):
                first = output[0] if isinstance(output, (tuple, list)) else output
                self.outputs[i] = first.detach().float().numpy().copy()
                self.restore(state.pop("saved"))

            handles.append(layer.register_forward_pre_hook(pre, with_kwargs=True))
            handles.append(layer.register_forward_hook(post, with_kwargs=True))
        return handles


def _eager_by_layers(model, checkpoint, prefix, dtype, args, kwargs):
    """The outputs of ``model`` (on the meta device) and of each of its layers, with about one
    layer's weights in memory at a time."""

    lazy = _LazyLayers(model, checkpoint, prefix, dtype)
    with empty_weights(model):
        outside = [n for n in lazy.keys if _layer_of(n, prefix) is None]
        saved = []
        lazy.kept = {}
        for name in outside:
            path = name.rpartition(".")[0]
            saved += lazy.load(model.get_submodule(path), path, only=name)
        lazy.kept = None
        handles = lazy.hooks()
        try:
            with torch.no_grad():
                outputs = [t.detach().float().numpy() for t in flatten_outputs(model(*args, **kwargs))]
        finally:
            for handle in handles:
                handle.remove()
            lazy.restore(saved)
    return outputs, lazy.outputs


def validate_by_layers(
    filename: str | os.PathLike,
    checkpoint: str | os.PathLike,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    *,
    model: torch.nn.Module | None = None,
    dtype: torch.dtype | str | None = None,
    atol: float = 1e-4,
    rtol: float = 1e-3,
) -> list[LayerReport]:
    """Compares the ONNX model saved in ``filename`` (weights in external data) with the eager
    model of the ``save_pretrained`` folder ``checkpoint``, layer by layer, holding about one
    layer's weights twice instead of the whole model.

    :param model: the model on the meta device (default: built from the checkpoint's config)
    :param dtype: the type of the weights of the eager model (default: the checkpoint's)
    :return: one :class:`LayerReport` per layer (``model.layers.<i>``) and one for the outputs
    """
    import onnxruntime

    filename, checkpoint = os.fspath(filename), os.fspath(checkpoint)
    kwargs = dict(kwargs or {})
    if model is None:
        model = model_from_checkpoint_config(checkpoint, dtype)
    target = _torch_dtype(dtype) if dtype is not None else None
    prefix = _layer_list(model)
    expected_outputs, expected_layers = _eager_by_layers(model, checkpoint, prefix, target, args, kwargs)

    proto = onnx.load(filename, load_external_data=False)
    runs = split_by_layers(proto, prefix)
    produced = [{o for n in nodes for o in n.output if o} for _, nodes in runs]
    needed_later = [set() for _ in runs]  # values each run needs from the runs before it
    for k, (_, nodes) in enumerate(runs):
        needed_later[k] = set().union(*(_used_names(n) for n in nodes)) - produced[k]
    final = [o.name for o in proto.graph.output]
    values: dict[str, np.ndarray] = {}
    names = [i.name for i in proto.graph.input]
    flat = [to_numpy(x) for x in flatten_inputs(args, kwargs)]
    values.update(dict(zip(names, flat)))
    initializers = {t.name for t in proto.graph.initializer}
    reports: list[LayerReport] = []
    folder = os.path.dirname(os.path.abspath(filename))
    part_file = os.path.join(folder, f".{os.path.basename(filename)}.part.onnx")
    try:
        for k, (key, nodes) in enumerate(runs):
            inputs = {n: values[n] for n in sorted(needed_later[k]) if n not in initializers and n in values}
            later = set(final).union(*needed_later[k + 1 :])
            outputs = [o for n in nodes for o in n.output if o and o in later]
            onnx.save(_part_model(proto, nodes, inputs, outputs), part_file)
            session = onnxruntime.InferenceSession(part_file, providers=["CPUExecutionProvider"])
            results = session.run(outputs, inputs)
            del session
            values.update(zip(outputs, results))
            # drop what no later run reads
            for name in list(values):
                if name not in later:
                    del values[name]
            last_of_layer = key is not None and all(other != key for other, _ in runs[k + 1 :])
            if last_of_layer and key in expected_layers:
                expected = expected_layers.pop(key)
                candidates = [(n, r) for n, r in zip(outputs, results) if np.shape(r) == expected.shape]
                if candidates:
                    max_abs, max_rel, ok = _compare(expected, candidates[-1][1], atol, rtol)
                else:
                    max_abs, max_rel, ok = float("inf"), float("inf"), False
                reports.append(LayerReport(f"{prefix}.{key}", max_abs, max_rel, ok))
    finally:
        if os.path.exists(part_file):
            os.remove(part_file)
    worst = [_compare(e, values[n], atol, rtol) for e, n in zip(expected_outputs, final)]
    reports.append(LayerReport("outputs", max(w[0] for w in worst), max(w[1] for w in worst), all(w[2] for w in worst)))
    return reports
