"""The logits of the last positions in a second output, for a loop verifying several tokens per run.

A folder's decoder is exported with ``logits_to_keep=16`` (:func:`fx2onnx.deploy.text_generation.last_logits_only`):
its head runs on the last 16 positions of a run at most (one for a decoding step, 16 for a prompt
instead of every position). :func:`split_verify_logits` then renames that output
:data:`~fx2onnx.runtime.speculative.VERIFY_LOGITS` and adds ``logits``, its last position,
``(batch, 1, vocabulary)``: what plain generation and onnxruntime-genai read (genai allocates an
output of dynamic length as long as the input, and reads a static length of 1 as the last position),
while a speculative loop (:mod:`fx2onnx.runtime.speculative`) reads the logits of a pending token
and up to 15 candidates from one run. The metadata key
:data:`~fx2onnx.runtime.speculative.VERIFY_METADATA_KEY` records the count.
"""

from __future__ import annotations

import os

import onnx

from ..runtime.speculative import VERIFY_LOGITS, VERIFY_METADATA_KEY


def split_verify_logits(model_path: str | os.PathLike, kept: int, logits: str = "logits") -> None:
    """Rewrites the model saved at ``model_path`` (its weights' file left as it is): the output
    ``logits`` (the last ``kept`` positions) becomes :data:`VERIFY_LOGITS`, the last output, and
    ``logits`` its last position, at the same place among the outputs."""
    model_path = os.fspath(model_path)
    proto = onnx.load(model_path, load_external_data=False)
    graph = proto.graph
    names = [o.name for o in graph.output]
    if logits not in names or VERIFY_LOGITS in names:
        raise ValueError(f"The model has no output {logits!r} or already has {VERIFY_LOGITS!r} (outputs: {names}).")
    for node in graph.node:
        for i, name in enumerate(node.output):
            if name == logits:
                node.output[i] = VERIFY_LOGITS
        for i, name in enumerate(node.input):
            if name == logits:
                node.input[i] = VERIFY_LOGITS
    index = names.index(logits)
    rows = onnx.ValueInfoProto()
    rows.CopyFrom(graph.output[index])
    rows.name = VERIFY_LOGITS
    last = onnx.ValueInfoProto()
    last.CopyFrom(graph.output[index])
    last.type.tensor_type.shape.dim[1].Clear()
    last.type.tensor_type.shape.dim[1].dim_value = 1
    prefix = "fx2onnx_verify_"
    graph.initializer.extend([
        onnx.helper.make_tensor(prefix + "start", onnx.TensorProto.INT64, [1], [-1]),
        onnx.helper.make_tensor(prefix + "end", onnx.TensorProto.INT64, [1], [2**62]),
        onnx.helper.make_tensor(prefix + "axis", onnx.TensorProto.INT64, [1], [1]),
    ])
    graph.node.append(onnx.helper.make_node(
        "Slice", [VERIFY_LOGITS, prefix + "start", prefix + "end", prefix + "axis"], [logits], name=prefix + "last"))
    outputs = list(graph.output)
    outputs[index] = last
    outputs.append(rows)
    del graph.output[:]
    graph.output.extend(outputs)
    entry = proto.metadata_props.add()
    entry.key, entry.value = VERIFY_METADATA_KEY, str(kept)
    onnx.save(proto, model_path)
