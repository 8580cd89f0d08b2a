"""Edits of a saved piece's graph, its weights' file untouched: values renamed (a piece's input and output
names, the cache outputs named after their inputs), the cache updated in place.

.. code-block:: python

    from fx2onnx.deploy.saved_model import name_presents

    inputs, pairs = name_presents("model.onnx")  # {"past_key_values.0.key": "present.0.key", ...}
"""

from __future__ import annotations

import json
import os
from typing import Iterator, Sequence

import onnx
import onnx_ir as ir

from ..formats import CACHE_METADATA_KEY
from ..optimizer.rules.cache_in_place import cache_in_place
from ..weights.save import load_without_weights
from .cache_names import state_names, state_present_name
from .genai_config import optimum_name, present_name


def _rename_outputs(proto: onnx.ModelProto, names: dict[str, str]) -> None:
    """Renames values of the main graph (graph outputs, the nodes producing and reading them)."""
    def rename(graph: onnx.GraphProto) -> None:
        for node in graph.node:
            for i, name in enumerate(node.input):
                if name in names:
                    node.input[i] = names[name]
            for i, name in enumerate(node.output):
                if name in names:
                    node.output[i] = names[name]
            for attr in node.attribute:
                for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                    rename(sub)
        for value in list(graph.output) + list(graph.value_info):
            if value.name in names:
                value.name = names[value.name]

    rename(proto.graph)


def _rename_dim(graph: onnx.GraphProto, old: str, new: str) -> bool:
    """Renames the dimension ``old`` into ``new`` in the types of ``graph`` (transformers.js sizes the empty cache
    it feeds from the names of its dimensions: ``batch_size``, the others 0); False when ``new`` is taken or
    ``old`` is absent."""
    values = list(graph.input) + list(graph.output) + list(graph.value_info)
    dims = [d for v in values for d in v.type.tensor_type.shape.dim if d.HasField("dim_param")]
    if any(d.dim_param == new for d in dims) or not any(d.dim_param == old for d in dims):
        return False
    for d in dims:
        if d.dim_param == old:
            d.dim_param = new
    return True


def update_cache_in_place(filename: str, constant_inputs: Sequence[str] = ()) -> bool:
    """Rewrites the saved model ``filename`` so that it updates its cache in place
    (:func:`fx2onnx.optimizer.rules.cache_in_place.cache_in_place`; the weights' file is
    untouched); False when the rule does not apply (the model is left as it is).
    ``constant_inputs``: inputs fed the same value at every step (an image-text decoder's features)."""
    model = ir.from_proto(load_without_weights(filename))
    if not cache_in_place(model, constant_inputs):
        return False
    onnx.save(ir.to_proto(model), filename)
    return True


def name_presents(filename: str, optimum_names: bool = False, mamba: bool = False) -> tuple[list[str], dict[str, str]]:
    """Renames the cache outputs of the saved model ``filename`` after their inputs
    (:func:`fx2onnx.deploy.genai_config.present_name`), rewrites the graph (the weights' file
    is untouched) and returns ``(input names, cache pairs)``. With ``optimum_names``, the keys and
    values of the cache are first named as optimum and transformers.js name them
    (``past_key_values_key_3`` -> ``past_key_values.3.key``, the output ``present.3.key``); the other
    states of a cache take transformers.js' names (``past_conv.3``, ``past_recurrent.3``, ``past_ssm.3`` for the
    Mamba layers of a config where ``mamba``: :mod:`fx2onnx.deploy.cache_names`)."""
    proto = load_without_weights(filename)
    metadata = {p.key: p for p in proto.metadata_props}
    inputs = [i.name for i in proto.graph.input]
    if CACHE_METADATA_KEY not in metadata:
        return inputs, {}
    pairs: dict[str, str] = json.loads(metadata[CACHE_METADATA_KEY].value)
    taken = {o.name for o in proto.graph.output} | set(inputs)
    changed = False
    if optimum_names:
        changed = _rename_dim(proto.graph, "batch", "batch_size")
        folder_name = {past: (state_names(past, mamba) or (optimum_name(past),))[0] for past in pairs}
        new_inputs = {past: name for past, name in folder_name.items() if name != past}
        if new_inputs and not set(new_inputs.values()) & taken:
            for value in proto.graph.input:
                value.name = new_inputs.get(value.name, value.name)
            _rename_outputs(proto, new_inputs)  # the nodes reading them
            pairs = {new_inputs.get(past, past): out for past, out in pairs.items()}
            inputs = [new_inputs.get(name, name) for name in inputs]
            taken = {o.name for o in proto.graph.output} | set(inputs)
            changed = True
    present = {past: state_present_name(past) or present_name(past) for past in pairs}
    renames = {out: present[past] for past, out in pairs.items() if present[past] not in taken}
    if len(renames) == len(pairs):
        _rename_outputs(proto, renames)
        pairs = {past: renames[out] for past, out in pairs.items()}
        changed = True
    if changed:
        metadata[CACHE_METADATA_KEY].value = json.dumps(pairs)
        onnx.save(proto, filename)
    return inputs, pairs


def rename_values(filename: str, inputs: list[str], outputs: list[str], cache: dict[str, str]) -> None:
    """Gives the inputs and outputs of the saved model ``filename`` the names of a piece (in
    order) and writes its cache pairs as the ``fx2onnx.cache`` metadata (the weights' file is
    untouched)."""
    proto = load_without_weights(filename)
    old_inputs, old_outputs = [i.name for i in proto.graph.input], [o.name for o in proto.graph.output]
    if len(old_inputs) != len(inputs) or len(old_outputs) != len(outputs):
        raise ValueError(f"{filename}: inputs {old_inputs} and outputs {old_outputs}, expected {inputs} and {outputs}.")
    names = {a: b for a, b in zip(old_inputs + old_outputs, inputs + outputs) if a != b}
    taken = set(old_inputs + old_outputs) - set(names)
    if taken & set(names.values()):
        raise ValueError(f"{filename}: cannot rename {names}, the names {taken & set(names.values())} are taken.")
    for value in proto.graph.input:
        value.name = names.get(value.name, value.name)
    _rename_outputs(proto, names)
    # the wrapper's metadata replaced by the piece's names, but for the dimensions the export narrowed
    # (fx2onnx.frozen_inputs: by input position, which the names do not change; the runtime checks them)
    kept = [(p.key, p.value) for p in proto.metadata_props if p.key == "fx2onnx.frozen_inputs"]
    del proto.metadata_props[:]
    for key, value in kept:
        proto.metadata_props.add(key=key, value=value)
    if cache:
        proto.metadata_props.add(key=CACHE_METADATA_KEY, value=json.dumps(cache))
    onnx.save(proto, filename)


def _tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """The initializers and the tensors of the attributes of ``graph`` and its subgraphs."""
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                yield from _tensors(sub)


def rename_external_data(filename: str, location: str) -> bool:
    """Moves the weights' file of the saved model ``filename`` to ``location`` (a name beside it: transformers.js
    loads ``model.onnx_data`` beside ``model.onnx``) and points the graph at it; False when the weights are in the
    model (nothing changed). One weights' file only (a ValueError otherwise)."""
    proto = load_without_weights(filename)
    entries = [entry for tensor in _tensors(proto.graph) if tensor.data_location == onnx.TensorProto.EXTERNAL
               for entry in tensor.external_data if entry.key == "location"]
    old = {entry.value for entry in entries}
    if not old:
        return False
    if len(old) > 1:
        raise ValueError(f"{filename}: the weights are in {len(old)} files {sorted(old)}, one expected.")
    (previous,) = old
    if previous != location:
        folder = os.path.dirname(os.path.abspath(filename))
        os.replace(os.path.join(folder, previous), os.path.join(folder, location))
        for entry in entries:
            entry.value = location
        onnx.save(proto, filename)
    return True
