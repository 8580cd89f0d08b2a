"""Encoder-decoder folders in the layout transformers.js and optimum read: Whisper and the text encoder-decoders
(T5, BART, Marian, M2M100...: transformers' seq2seq LM classes).

* ``onnx/encoder_model.onnx``: the encoder's inputs (``input_ids`` and ``attention_mask`` for a text model,
  ``input_features`` for Whisper) -> ``last_hidden_state``;
* ``onnx/decoder_model_merged.onnx``: ``input_ids`` (the decoder's tokens), ``encoder_attention_mask`` (a text
  model), ``encoder_hidden_states``, ``use_cache_branch`` and, per layer ``i``, ``past_key_values.i.decoder.key`` /
  ``.value`` (the self-attention cache) and ``past_key_values.i.encoder.key`` / ``.value`` (the cross-attention keys
  and values) -> ``logits`` and the same names with ``present``. An ``If`` on ``use_cache_branch`` chooses where the
  cross keys and values come from: false (the first step, an empty cache), projected from ``encoder_hidden_states``;
  true, the past ones passed through. transformers.js and optimum name, size and feed these values by themselves;
  our loop (:class:`fx2onnx.runtime.OnnxGenerator`) feeds ``use_cache_branch`` false at its first step.

Three wrappers around the transformers model are exported (weights streamed from the checkpoint): the encoder, the
cross keys and values (the model's forward on its start token with an empty cache, the cross part of the cache
read: only the projections remain in the graph) and one decoder step with both caches given; the last two are
merged into the one decoder file (:func:`merge_decoder`). The encoder and the merged decoder, each of its branches
on two input sets, are checked against the same wrappers in eager float32.

.. code-block:: python

    from fx2onnx.deploy.seq2seq import is_text_seq2seq
    print(is_text_seq2seq(config))  # True for a T5 config
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from typing import Any

import onnx
import torch

from ..formats import CACHE_METADATA_KEY, FOLDER_METADATA
from .check import check_against_eager, eager_float32
from .files import copy_folder_files
from .result import FolderExport, peak_rss
from .saved_model import rename_external_data
from .speech import Piece, export_piece
from .speech_generic import example_features, meta_model_with_buffers, start_token
from .transformersjs import data_file_name, transformersjs_dtype, variant_file, write_transformersjs_config

#: the files transformers.js and optimum load for an encoder-decoder
ENCODER_FILE, DECODER_FILE = "onnx/encoder_model.onnx", "onnx/decoder_model_merged.onnx"
#: the input choosing the decoder's branch (false: the cross keys and values are computed)
CACHE_BRANCH = "use_cache_branch"
#: the dimensions, as optimum names them (transformers.js sizes its empty cache from ``batch_size``, the others 0)
BATCH, ENCODER_SEQ, DECODER_SEQ, PAST = ("batch_size", "encoder_sequence_length", "decoder_sequence_length",
                                         "past_decoder_sequence_length")


def past_name(i: int, part: str, kind: str, prefix: str = "past_key_values") -> str:
    """``past_key_values.3.decoder.key`` (``prefix`` ``present``: the output)."""
    return f"{prefix}.{i}.{part}.{kind}"


def merged_decoder_names(layers: int, encoder_mask: bool) -> tuple[list[str], list[str], list[str]]:
    """The merged decoder's input and output names and the cross branch's outputs, as optimum names them:
    the decoder reads ``input_ids``, the encoder's states (and mask) and both caches, returns the logits and
    its self-attention cache."""
    cross_names = [past_name(i, "encoder", k, "present") for i in range(layers) for k in ("key", "value")]
    inputs = (["input_ids", "encoder_hidden_states"] + ["encoder_attention_mask"] * encoder_mask
              + [past_name(i, "decoder", "key") for i in range(layers)]
              + [past_name(i, "decoder", "value") for i in range(layers)]
              + [past_name(i, "encoder", "key", "present") for i in range(layers)]
              + [past_name(i, "encoder", "value", "present") for i in range(layers)])
    outputs = ["logits"] + [past_name(i, "decoder", k, "present") for i in range(layers) for k in ("key", "value")]
    return inputs, outputs, cross_names


def is_text_seq2seq(config: Any) -> bool:
    """Whether ``config`` is an encoder-decoder reading token ids (T5, BART, Marian...)."""
    return bool(getattr(config, "is_encoder_decoder", False)) and not any(
        hasattr(config, a) for a in ("num_mel_bins", "feature_size", "image_size"))


class _Wrapper(torch.nn.Module):
    """``self.model`` is the full model: the parameters keep the checkpoint's names once ``model.`` is removed."""

    def __init__(self, model: Any):
        super().__init__()
        self.model = model
        self.base_model_prefix = "model"

    def _init_weights(self, module: torch.nn.Module) -> None:
        self.model._init_weights(module)

    def _step(self, hidden: torch.Tensor, mask: torch.Tensor | None, ids: torch.Tensor, cache: Any) -> Any:
        from transformers.modeling_outputs import BaseModelOutput

        kwargs = {"attention_mask": mask} if mask is not None else {}
        return self.model(encoder_outputs=BaseModelOutput(last_hidden_state=hidden), decoder_input_ids=ids,
                          past_key_values=cache, use_cache=True, **kwargs)


class EncoderPiece(_Wrapper):
    """The encoder: its inputs -> ``last_hidden_state``."""

    def forward(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                input_features: torch.Tensor | None = None) -> torch.Tensor:
        kwargs = {k: v for k, v in (("input_ids", input_ids), ("attention_mask", attention_mask),
                                    ("input_features", input_features)) if v is not None}
        return self.model.get_encoder()(**kwargs, return_dict=True).last_hidden_state


class CrossPiece(_Wrapper):
    """The cross-attention keys and values of every decoder layer (``k0, v0, k1, v1...``) from the encoder's output."""

    def __init__(self, model: Any, start: int):
        super().__init__(model)
        self.start = start

    def forward(self, encoder_hidden_states: torch.Tensor,
                encoder_attention_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        from transformers.cache_utils import DynamicCache, EncoderDecoderCache

        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        ids = torch.full((encoder_hidden_states.shape[0], 1), self.start, dtype=torch.int64,
                         device=encoder_hidden_states.device)
        self._step(encoder_hidden_states, encoder_attention_mask, ids, cache)
        return tuple(t for layer in cache.cross_attention_cache.layers for t in (layer.keys, layer.values))


class DecoderPiece(_Wrapper):
    """One decoder step, both caches given: -> the logits and the new self-attention cache (``k0, v0, k1...``)."""

    def forward(self, input_ids: torch.Tensor, encoder_hidden_states: torch.Tensor,
                encoder_attention_mask: torch.Tensor | None = None, past_keys: list[torch.Tensor] | None = None,
                past_values: list[torch.Tensor] | None = None, cross_keys: list[torch.Tensor] | None = None,
                cross_values: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, ...]:
        from transformers.cache_utils import DynamicCache, EncoderDecoderCache

        cache = EncoderDecoderCache(DynamicCache(list(zip(past_keys, past_values))),
                                    DynamicCache(list(zip(cross_keys, cross_values))))
        for i in range(len(cross_keys)):  # given: the model reads them
            cache.is_updated[i] = True
        out = self._step(encoder_hidden_states, encoder_attention_mask, input_ids, cache)
        return (out.logits, *(t for layer in cache.self_attention_cache.layers for t in (layer.keys, layer.values)))


class MergedReference(torch.nn.Module):
    """The merged decoder in eager, its inputs named as the ONNX file's: the reference of the check."""

    def __init__(self, cross: CrossPiece, decoder: DecoderPiece, layers: int):
        super().__init__()
        self.cross, self.decoder, self.layers = cross, decoder, layers

    def forward(self, **inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        hidden, mask = inputs["encoder_hidden_states"], inputs.get("encoder_attention_mask")
        if bool(inputs[CACHE_BRANCH].reshape(-1)[0]):
            cross = [inputs[past_name(i, "encoder", k)] for i in range(self.layers) for k in ("key", "value")]
        else:
            cross = list(self.cross(hidden, mask))
        tokens = inputs["inputs_embeds"] if "inputs_embeds" in inputs else inputs["input_ids"]
        out = self.decoder(tokens, hidden, mask,
                           [inputs[past_name(i, "decoder", "key")] for i in range(self.layers)],
                           [inputs[past_name(i, "decoder", "value")] for i in range(self.layers)],
                           cross[0::2], cross[1::2])
        result = [out[0]]
        for i in range(self.layers):
            result += [out[1 + 2 * i], out[2 + 2 * i], cross[2 * i], cross[2 * i + 1]]
        return tuple(result)


def _layers_heads(model: Any, hidden: torch.Tensor, mask: torch.Tensor | None, start: int) -> list[tuple[int, ...]]:
    """The shapes of the cross keys and values (one decoder step on CPU storage of the meta model)."""
    from ..weights.empty import empty_weights

    meta = any(p.is_meta for p in model.parameters())
    with torch.no_grad(), (empty_weights(model) if meta else contextlib.nullcontext()):
        return [tuple(t.shape) for t in CrossPiece(model, start)(hidden, mask)]


#: the (batch, length) of the two text input sets of an encoder's check
TEXT_SIZES = ((2, 5), (3, 7))


def padded_text_sets(vocab: int, generator: torch.Generator) -> list[dict[str, torch.Tensor]]:
    """Two sets of random ``input_ids`` and their ``attention_mask`` of the sizes :data:`TEXT_SIZES`, the last row of
    each padded by two tokens."""
    sets = []
    for batch, length in TEXT_SIZES:
        mask = torch.ones(batch, length, dtype=torch.int64)
        mask[-1, length - 2:] = 0  # a padded row
        sets.append({"input_ids": torch.randint(0, vocab, (batch, length), generator=generator),
                     "attention_mask": mask})
    return sets


def seq2seq_pieces(model: Any, config: Any, folder: str | None, dtype: torch.dtype,
                   seed: int = 0) -> tuple[list[Piece], dict[str, Any]]:
    """The encoder, cross and decoder pieces of ``model`` with two input sets each, and the facts of the merge
    (``layers``, ``mask``: the decoder takes the encoder's mask, ``speech``)."""
    g = torch.Generator().manual_seed(seed)
    text = is_text_seq2seq(config)
    start = start_token(model, config)
    if start is None:
        raise ValueError(f"{config.model_type}: its generation config names no decoder_start_token_id nor "
                         "bos_token_id.")
    d_model = int(getattr(config, "d_model", None) or config.hidden_size)
    vocab = int(config.vocab_size)
    if text:
        sizes = list(TEXT_SIZES)
        encoder_sets = padded_text_sets(vocab, g)
        encoder_dims = {"input_ids": {0: BATCH, 1: ENCODER_SEQ}, "attention_mask": {0: BATCH, 1: ENCODER_SEQ}}
        hidden_dims: dict[int, str] = {0: BATCH, 1: ENCODER_SEQ}
    else:  # Whisper: the feature extractor's features, a static number of frames
        features = example_features(folder, model, config, dtype, seed)
        encoder_sets = [{"input_features": f["input_features"]} for f in features]
        sizes = [(f["input_features"].shape[0], config.max_source_positions) for f in encoder_sets]
        encoder_dims = {"input_features": {0: BATCH}}
        hidden_dims = {0: BATCH}

    def hidden_and_mask(s: int) -> dict[str, torch.Tensor]:
        batch, length = sizes[s]
        inputs = {"encoder_hidden_states": torch.randn(batch, length, d_model, generator=g).to(dtype)}
        if text:
            inputs["encoder_attention_mask"] = encoder_sets[s]["attention_mask"]
        return inputs

    probe = hidden_and_mask(0)
    shapes = _layers_heads(model, probe["encoder_hidden_states"], probe.get("encoder_attention_mask"), start)
    layers = len(shapes) // 2
    heads, head_dim = shapes[0][1], shapes[0][3]
    cross_dims = {"encoder_hidden_states": hidden_dims}
    if text:
        cross_dims["encoder_attention_mask"] = {0: BATCH, 1: ENCODER_SEQ}
    cross_sets = [hidden_and_mask(0), hidden_and_mask(1)]

    def step(s: int, seq: int, past: int) -> dict[str, Any]:
        batch, length = sizes[s]
        inputs: dict[str, Any] = {"input_ids": torch.randint(0, vocab, (batch, seq), generator=g),
                                  **hidden_and_mask(s)}

        def kv(n: int) -> list[torch.Tensor]:
            return [torch.randn(batch, heads, n, head_dim, generator=g).to(dtype) for _ in range(layers)]

        inputs.update(past_keys=kv(past), past_values=kv(past), cross_keys=kv(length), cross_values=kv(length))
        return inputs

    cross_axis = {0: BATCH, 2: ENCODER_SEQ} if text else {0: BATCH}
    decoder_dims = {"input_ids": {0: BATCH, 1: DECODER_SEQ}, **cross_dims,
                    "past_keys": [{0: BATCH, 2: PAST}] * layers, "past_values": [{0: BATCH, 2: PAST}] * layers,
                    "cross_keys": [cross_axis] * layers, "cross_values": [cross_axis] * layers}
    decoder_inputs, decoder_outputs, cross_names = merged_decoder_names(layers, bool(text))
    pieces = [
        Piece("encoder", ENCODER_FILE, EncoderPiece(model), encoder_sets[0], encoder_sets[1], encoder_dims,
              list(encoder_sets[0]), ["last_hidden_state"]),
        Piece("cross", "onnx/cross.onnx", CrossPiece(model, start), cross_sets[0], cross_sets[1], cross_dims,
              list(cross_sets[0]), [f"cross_branch/{n}" for n in cross_names]),
        Piece("decoder", "onnx/decoder_step.onnx", DecoderPiece(model), step(0, 3, 4), step(1, 1, 6), decoder_dims,
              decoder_inputs, decoder_outputs),
    ]
    return pieces, {"layers": layers, "mask": text, "speech": not text, "heads": heads, "head_dim": head_dim,
                    "start": start}


def computed_positions(model: Any, dtype: torch.dtype) -> Any:
    """``model`` whose sinusoidal position tables kept as parameters no checkpoint holds (Marian's
    ``embed_positions``: a module with ``create_weight()``) are computed on the CPU, as buffers."""
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if callable(getattr(module, "create_weight", None)) and isinstance(weight, torch.nn.Parameter) and \
                weight.is_meta:
            value = module.create_weight().to(dtype)
            del module.weight
            module.register_buffer("weight", value, persistent=False)
    return model


def _ordered(inputs: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """The flat inputs of a piece (its lists one tensor per name), keyed by the names of ``names``, in order."""
    flat: list[Any] = []
    for value in inputs.values():
        flat.extend(value if isinstance(value, (list, tuple)) else [value])
    return dict(zip(names, flat))


def merge_decoder(decoder_path: str, cross_path: str, out_path: str, facts: dict[str, Any]) -> None:
    """Writes ``out_path``: the decoder step whose cross keys and values come from an ``If`` on
    ``use_cache_branch`` (false: the cross piece's graph, its weights moved to the main graph; true: the past ones),
    inputs and outputs in optimum's order, the weights in ``<name>_data`` beside it."""
    helper = onnx.helper
    decoder = onnx.load(decoder_path)
    cross = onnx.load(cross_path)
    layers, prefix = facts["layers"], "cross_branch/"
    present_cross = [past_name(i, "encoder", k, "present") for i in range(layers) for k in ("key", "value")]
    # the else branch: the cross graph, its names prefixed, its inputs read from the outer graph
    outer = {i.name for i in cross.graph.input}
    keep = outer | {o.name for o in cross.graph.output}

    def rename(name: str) -> str:
        return name if not name or name in keep else prefix + name

    for node in cross.graph.node:
        node.name = prefix + node.name if node.name else node.name
        node.input[:] = [rename(n) for n in node.input]
        node.output[:] = [rename(n) for n in node.output]
        if any(a.HasField("g") or a.graphs for a in node.attribute):
            raise ValueError(f"{cross_path}: a node with a subgraph ({node.op_type}) cannot be moved into a branch.")
    initializers = []
    for tensor in cross.graph.initializer:
        tensor.name = rename(tensor.name)
        initializers.append(tensor)
    for value in cross.graph.value_info:
        value.name = rename(value.name)
    else_outputs = list(cross.graph.output)
    else_graph = helper.make_graph(list(cross.graph.node), "compute_cross", [], else_outputs,
                                   value_info=list(cross.graph.value_info))
    then_nodes, then_outputs = [], []
    past_cross = []
    for out, name in zip(else_outputs, present_cross):
        i, _, kind = name.split(".")[1:]
        past = past_name(int(i), "encoder", kind)
        elem = out.type.tensor_type.elem_type
        past_cross.append(helper.make_tensor_value_info(
            past, elem, [BATCH, facts["heads"], "past_encoder_sequence_length", facts["head_dim"]]))
        then_nodes.append(helper.make_node("Identity", [past], [f"cache_branch/{name}"]))
        then_outputs.append(helper.make_tensor_value_info(f"cache_branch/{name}", elem, None))
    then_graph = helper.make_graph(then_nodes, "reuse_cross", [], then_outputs)
    branch = helper.make_node("If", [CACHE_BRANCH], present_cross, name="use_cache_branch_if",
                              then_branch=then_graph, else_branch=else_graph)
    graph = decoder.graph
    inputs = {i.name: i for i in graph.input}
    outputs = {o.name: o for o in graph.output}
    # the decoder's tokens, or their embeddings (a decoder fed by embed_tokens.onnx: Florence-2's)
    tokens = "inputs_embeds" if "inputs_embeds" in inputs else "input_ids"
    new_inputs = [inputs[tokens]] + ([inputs["encoder_attention_mask"]] if facts["mask"] else [])
    new_inputs += [inputs["encoder_hidden_states"],
                   helper.make_tensor_value_info(CACHE_BRANCH, onnx.TensorProto.BOOL, [1])]
    new_outputs = [outputs["logits"]]
    for i in range(layers):
        new_inputs += [inputs[past_name(i, "decoder", "key")], inputs[past_name(i, "decoder", "value")],
                       past_cross[2 * i], past_cross[2 * i + 1]]
        new_outputs += [outputs[past_name(i, "decoder", "key", "present")],
                        outputs[past_name(i, "decoder", "value", "present")]]
        for kind in ("key", "value"):
            info = onnx.ValueInfoProto()
            info.CopyFrom(inputs[past_name(i, "encoder", kind, "present")])
            new_outputs.append(info)
    nodes = [branch] + list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.input[:]
    graph.input.extend(new_inputs)
    del graph.output[:]
    graph.output.extend(new_outputs)
    graph.initializer.extend(initializers)
    # the opsets and local functions of both
    domains = {o.domain: o.version for o in decoder.opset_import}
    for o in cross.opset_import:
        if domains.setdefault(o.domain, o.version) != o.version:
            raise ValueError(f"The decoder and the cross piece import {o.domain or 'ai.onnx'} at two versions.")
    del decoder.opset_import[:]
    decoder.opset_import.extend(helper.make_opsetid(d, v) for d, v in domains.items())
    known = {(f.domain, f.name) for f in decoder.functions}
    decoder.functions.extend(f for f in cross.functions if (f.domain, f.name) not in known)
    pairs = {past_name(i, part, kind): past_name(i, part, kind, "present")
             for i in range(layers) for part in ("decoder", "encoder") for kind in ("key", "value")}
    props = {p.key: p.value for p in decoder.metadata_props}
    props[CACHE_METADATA_KEY] = json.dumps(pairs)
    del decoder.metadata_props[:]
    onnx.helper.set_model_props(decoder, props)
    data = os.path.basename(out_path) + "_data"
    if os.path.exists(os.path.join(os.path.dirname(out_path), data)):
        os.remove(os.path.join(os.path.dirname(out_path), data))
    onnx.save_model(decoder, out_path, save_as_external_data=True, all_tensors_to_one_file=True, location=data,
                    size_threshold=1024)


def _remove(path: str) -> None:
    for name in (path, path + ".data", path + "_data"):
        if os.path.exists(name):
            os.remove(name)


def export_seq2seq_pieces(folder: str, out_dir: str, config: Any, dtype: torch.dtype, *, optimize: str,
                          quantize: str | None, block_size: int, opset: int | None, progress: bool, say: Any,
                          symmetric: bool = True, make: Any = None,
                          **_: Any) -> tuple[list[Piece], dict[str, Any]]:
    """Exports the encoder and the merged decoder of an encoder-decoder folder into ``out_dir/onnx`` and returns
    the pieces (encoder, cross, decoder: their example inputs serve the check) and the facts of the merge;
    ``make(model)``: the pieces and facts of the meta model (default :func:`seq2seq_pieces`; the generic split's:
    :mod:`fx2onnx.deploy.seq2seq_generic`)."""
    model = computed_positions(meta_model_with_buffers(config, dtype), dtype)
    pieces, facts = make(model) if make is not None else seq2seq_pieces(model, config, folder, dtype)
    # the names transformers.js selects for these weights (encoder_model_q4.onnx for int4 matrices)
    pieces[0].filename = variant_file(ENCODER_FILE, quantize, str(dtype))
    for piece in pieces[3:]:
        piece.filename = variant_file(piece.filename, quantize, str(dtype))
    facts["decoder_file"] = variant_file(DECODER_FILE, quantize, str(dtype))
    os.makedirs(os.path.join(out_dir, "onnx"), exist_ok=True)
    for piece in pieces:
        export_piece(folder, out_dir, piece, config, dtype, optimize=optimize, quantize=quantize,
                     block_size=block_size, opset=opset, progress=progress, say=say, symmetric=symmetric, cache={})
    encoder, cross, step = pieces[:3]
    for piece in [encoder, *pieces[3:]]:  # the pieces after the decoder's: Florence-2's vision and embeddings
        rename_external_data(os.path.join(out_dir, piece.filename), data_file_name(piece.filename))
    merge_decoder(os.path.join(out_dir, step.filename), os.path.join(out_dir, cross.filename),
                  os.path.join(out_dir, facts["decoder_file"]), facts)
    _remove(os.path.join(out_dir, step.filename))
    _remove(os.path.join(out_dir, cross.filename))
    return pieces, facts


def merged_input_sets(pieces: list[Piece], facts: dict[str, Any]) -> list[dict[str, Any]]:
    """The input sets of the merged decoder: each decoder set with the cross keys and values given
    (``use_cache_branch`` true), and with an empty past computed from the encoder's output (false)."""
    step = pieces[2]
    layers = facts["layers"]
    sets = []
    for inputs in (step.inputs, step.inputs2):
        flat = _ordered(inputs, step.input_names)
        for use_cache in (True, False):
            tokens = "inputs_embeds" if "inputs_embeds" in flat else "input_ids"
            merged: dict[str, Any] = {tokens: flat[tokens]}
            if facts["mask"]:
                merged["encoder_attention_mask"] = flat["encoder_attention_mask"]
            merged["encoder_hidden_states"] = flat["encoder_hidden_states"]
            merged[CACHE_BRANCH] = torch.tensor([use_cache])
            for i in range(layers):
                for kind in ("key", "value"):
                    past = flat[past_name(i, "decoder", kind)]
                    merged[past_name(i, "decoder", kind)] = past if use_cache else past[:, :, :0]
                for kind in ("key", "value"):
                    cross = flat[past_name(i, "encoder", kind, "present")]
                    merged[past_name(i, "encoder", kind)] = cross if use_cache else cross[:, :, :0]
            sets.append(merged)
    return sets


def check_seq2seq_pieces(folder: str, out_dir: str, pieces: list[Piece], facts: dict[str, Any],
                         dtype: torch.dtype, atol: float, rtol: float) -> tuple[list[Any], list[str]]:
    """The encoder on its two input sets and the merged decoder on four (two sets, each branch) against the same
    wrappers around the eager float32 model."""
    eager = eager_float32(folder)
    encoder = pieces[0]
    checks = check_against_eager(os.path.join(out_dir, encoder.filename), EncoderPiece(eager),
                                 [encoder.inputs, encoder.inputs2], dtype, atol=atol, rtol=rtol)
    eager.to(torch.float32)
    reference = MergedReference(CrossPiece(eager, facts["start"]), DecoderPiece(eager), facts["layers"])
    checks += check_against_eager(os.path.join(out_dir, facts["decoder_file"]), reference,
                                  merged_input_sets(pieces, facts),
                                  dtype, atol=atol, rtol=rtol)
    names = ["encoder, first input set", "encoder, second input set"]
    names += [f"decoder_model_merged, {s} input set, {b}" for s in ("first", "second")
              for b in ("use_cache_branch true", "use_cache_branch false (cross keys computed)")]
    return checks, names


def write_seq2seq_folder(folder: str, out_dir: str, filename: str, config: Any, task: str, dtype: torch.dtype,
                         begin: float, say: Any, **options: Any) -> FolderExport:
    """Writes the export of the encoder-decoder of ``folder`` into ``out_dir`` (the temporary folder of
    :func:`fx2onnx.deploy.export.export_folder`; ``filename`` is not used: the files are those transformers.js and
    optimum load), the folder's files copied, ``config.json``'s ``transformers.js_config`` and ``fx2onnx.json``
    written; checked against eager float32 when ``validate``."""
    pieces, facts = export_seq2seq_pieces(folder, out_dir, config, dtype, say=say, **options)
    return finish_merged_folder(folder, out_dir, config, task, dtype, begin, say, pieces, facts, {},
                                check_seq2seq_pieces, family="encoder-decoder", **options)


def finish_merged_folder(folder: str, out_dir: str, config: Any, task: str, dtype: torch.dtype, begin: float,
                         say: Any, pieces: list[Piece], facts: dict[str, Any], extra: dict[str, Any], check: Any, *,
                         family: str, optimize: str, quantize: str | None, block_size: int, symmetric: bool,
                         validate: bool, atol: float, rtol: float, **_: Any) -> FolderExport:
    """The rest of a folder whose encoder and merged decoder are written: the folder's files copied,
    ``config.json``'s ``transformers.js_config``, ``fx2onnx.json`` (``extra`` in it), the check
    (``check(folder, out_dir, pieces, facts, dtype, atol, rtol)``) when ``validate``."""
    copy_folder_files(folder, out_dir)
    encoder, decoder_file = pieces[0], facts["decoder_file"]
    for name in (encoder.filename, decoder_file):
        write_transformersjs_config(out_dir, name, os.path.isfile(os.path.join(out_dir, name + "_data")),
                                    transformersjs_dtype(quantize, str(dtype)))
    merged = onnx.load(os.path.join(out_dir, decoder_file), load_external_data=False)
    cache = json.loads({p.key: p.value for p in merged.metadata_props}[CACHE_METADATA_KEY])
    genai = "onnxruntime-genai runs decoder-only models: an encoder-decoder folder has no genai_config.json"
    with open(os.path.join(out_dir, FOLDER_METADATA), "w", encoding="utf-8") as f:
        json.dump({"task": task, **extra, "layout": "encoder_model + decoder_model_merged",
                   "pieces": {"encoder": {"file": encoder.filename, "inputs": encoder.input_names,
                                          "outputs": encoder.output_names},
                              "decoder": {"file": decoder_file, "inputs": [i.name for i in merged.graph.input],
                                          "outputs": [o.name for o in merged.graph.output], "cache": cache,
                                          "cache_update": "concatenated"}},
                   "dtype": str(dtype).replace("torch.", ""), "optimize": optimize, "quantize": quantize,
                   "block_size": block_size if quantize else None, "symmetric": symmetric if quantize else None,
                   "source": os.path.basename(os.path.abspath(folder)), "genai": genai}, f, indent=2)
    checks, names = [], None
    if validate:
        say("checking the encoder and the merged decoder (both branches) against eager float32")
        checks, names = check(folder, out_dir, pieces, facts, dtype, atol, rtol)
        if quantize:
            checks = [dataclasses.replace(c, ok=True, held=False) for c in checks]
    files = sorted(os.path.relpath(os.path.join(root, n), out_dir).replace(os.sep, "/")
                   for root, _, found in os.walk(out_dir) for n in found)
    nbytes = sum(os.path.getsize(os.path.join(out_dir, f)) for f in files)
    return FolderExport(out_dir, task, dtype, files, nbytes, time.perf_counter() - begin, peak_rss(), checks, genai,
                        names, family=family, quantize=quantize)
