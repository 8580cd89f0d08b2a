"""A checkpoint's multi-token-prediction head exported beside the folder's decoder.

DeepSeek V3, GLM-4-MoE, Step-3.7 (transformers' configs with ``num_mtp_layers``, ``num_nextn_predict_layers``
in config.json) ship layers after the model's last one, ``model.layers.<num_hidden_layers + k>.*``, which a
plain load ignores. transformers 5.23's ``generate(use_mtp=True)`` builds ``transformers.modeling_layers.MtpModel``
from them: the head ``k = 0`` takes the embedding of the token at position ``p + 1`` and the model's last hidden
state (after its final norm) at ``p``, normalizes both (``enorm``, ``hnorm``), projects their concatenation
(``eh_proj``), runs one decoder layer of the model's kind with its own cache, normalizes (``post_norm``) and
applies the model's head: the logits of the token at ``p + 2``, one candidate a run the model verifies.

onnxruntime-genai 0.18 runs the same mode (``og.MtpGenerator``) from a ``model.mtp`` section of
``genai_config.json`` and the decoder's ``hidden_states`` output: :func:`write_genai_mtp` writes both, the head's
cache named as the decoder's (``past_key_values.0.key`` -> ``present.0.key``); genai loads the head as a second
``og.Model`` of the same folder through :func:`genai_head_overlay`.

:func:`export_mtp` writes that head as ``onnx/mtp.onnx`` (inputs ``input_ids``, ``last_hidden_states``,
``attention_mask``, ``position_ids`` and its cache; outputs the logits of the last position and the cache;
its weights quantized as the decoder's) and adds the decoder's last hidden states of every position of a
run as an output, :data:`HIDDEN_OUTPUT` (:func:`add_hidden_output`); ``fx2onnx.json`` records it under
``"mtp"``. Only the first head is exported (Step-3.7 has 3): one candidate a run.
:class:`fx2onnx.runtime.speculative.MultiTokenPrediction` runs it.
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any

import onnx
import torch

from ..convert.api import to_onnx
from ..runtime.folder import FOLDER_METADATA
from ..runtime.mtp import HIDDEN_INPUT
from ..runtime.speculative import HIDDEN_OUTPUT, MTP_FILE, VERIFY_LOGITS
from .saved_model import name_presents


def mtp_layers(folder: str, config: Any) -> int:
    """The multi-token-prediction layers the checkpoint of ``folder`` holds (0: none, or the config names
    them and the weights are absent, as most released checkpoints converted for inference)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    count = getattr(text, "num_mtp_layers", None) or 0
    if not count:
        return 0
    prefix = f"layers.{text.num_hidden_layers}."
    return count if any(prefix in name for name in _checkpoint_names(folder)) else 0


def _checkpoint_names(folder: str) -> list[str]:
    """The tensor names of the safetensors files of ``folder``."""
    from safetensors import safe_open

    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index, encoding="utf-8") as f:
            return list(json.load(f)["weight_map"])
    names: list[str] = []
    for name in sorted(os.listdir(folder)):
        if name.endswith(".safetensors"):
            with safe_open(os.path.join(folder, name), framework="pt") as f:
                names += list(f.keys())
    return names


class MtpStep(torch.nn.Module):
    """The first head of an ``MtpModel`` as one run: the tokens after the positions of ``last_hidden_states``,
    their positions and the head's cache -> the logits of the last position and the cache. The mask is the
    causal one over the cache's entries (``MtpCache`` shifts positions and entries alike)."""

    def __init__(self, mtp: torch.nn.Module):
        super().__init__()
        self.mtp = mtp

    def forward(self, input_ids: torch.Tensor, last_hidden_states: torch.Tensor, attention_mask: torch.Tensor,
                position_ids: torch.Tensor, past_key_values: Any) -> dict[str, Any]:
        from transformers.masking_utils import create_causal_mask

        mtp = self.mtp
        embeds = mtp.embed_tokens(input_ids)
        mask = create_causal_mask(config=mtp.config, inputs_embeds=embeds, attention_mask=attention_mask,
                                  past_key_values=past_key_values, position_ids=position_ids)
        rotary = mtp.rotary_emb(embeds, position_ids=position_ids) if mtp.rotary_emb is not None else None
        hidden = mtp.layers[0](embeds, last_hidden_states, position_embeddings=rotary, attention_mask=mask,
                               position_ids=position_ids, past_key_values=past_key_values)
        if mtp.use_shared_post_norm:
            hidden = mtp.shared_post_norm(hidden)
        # a dict: the cache's outputs are paired with its inputs (metadata fx2onnx.cache)
        return {"logits": mtp._project_to_logits(hidden[:, -1:, :]), "past_key_values": past_key_values}


def mtp_module(folder: str, dtype: torch.dtype = torch.float32) -> tuple[torch.nn.Module, Any]:
    """(:class:`MtpStep` of the checkpoint of ``folder``, the main model) as transformers loads them for
    ``generate(use_mtp=True)``."""
    import transformers
    from transformers.modeling_layers import MtpModel

    config = transformers.AutoConfig.from_pretrained(folder)
    main = getattr(transformers, config.architectures[0]).from_pretrained(folder, dtype=dtype).eval()
    mtp = MtpModel.from_pretrained(main).eval()
    if len(mtp.layers) > 1:
        mtp.layers = mtp.layers[:1]
    return MtpStep(mtp), main


def export_mtp(folder: str, out_dir: str, decoder_path: str, dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    """Exports the first multi-token-prediction head of the checkpoint of ``folder`` to ``out_dir``/
    :data:`MTP_FILE`, adds :data:`HIDDEN_OUTPUT` to the decoder at ``decoder_path`` and records both in
    ``fx2onnx.json``; returns the record."""
    from transformers import DynamicCache

    step, main = mtp_module(folder, dtype)
    del main
    config = step.mtp.config
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    past, new = 3, 2
    cache = DynamicCache(config=_one_layer(config))
    cache.update(torch.randn(1, heads, past, head_dim, dtype=dtype), torch.randn(1, heads, past, head_dim, dtype=dtype),
                 0)
    kwargs = dict(input_ids=torch.randint(3, config.vocab_size, (1, new)),
                  last_hidden_states=torch.randn(1, new, config.hidden_size, dtype=dtype),
                  attention_mask=torch.ones(1, past + new, dtype=torch.int64),
                  position_ids=torch.arange(past + 1, past + 1 + new)[None], past_key_values=cache)
    dyn, seq = torch.export.Dim.DYNAMIC, torch.export.Dim("sequence_length", min=1)  # tokens and states: one length
    shapes = dict(input_ids={1: seq}, last_hidden_states={1: seq}, attention_mask={1: dyn}, position_ids={1: seq},
                  past_key_values=[{2: dyn}, {2: dyn}])
    path = os.path.join(out_dir, MTP_FILE)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    metadata_path = os.path.join(out_dir, FOLDER_METADATA)
    with open(metadata_path, encoding="utf-8") as f:
        metadata = json.load(f)
    quantize = metadata.get("quantize")  # the head quantized as the decoder (its vocabulary projection)
    with torch.no_grad():
        to_onnx(step, (), kwargs=copy.deepcopy(kwargs), dynamic_shapes=shapes, filename=path, quantize=quantize,
                optimize="onnxruntime" if quantize else True,
                quantize_block_size=metadata.get("block_size") or 32,
                quantize_symmetric=bool(metadata.get("symmetric")))
    name_presents(path, optimum_names=True)  # past_key_values.0.key -> present.0.key, as the decoder's
    add_hidden_output(decoder_path)
    record = {"file": MTP_FILE, "layers": 1, "checkpoint_layers": int(getattr(config, "num_hidden_layers", 1)),
              "hidden": HIDDEN_OUTPUT, "quantize": quantize}
    record["genai"] = write_genai_mtp(out_dir, metadata)
    metadata["mtp"] = record
    with open(metadata_path, "w", encoding="utf-8") as f:
        json.dump(metadata, f, indent=2)
    return record


def write_genai_mtp(out_dir: str, metadata: dict[str, Any]) -> str | None:
    """Adds onnxruntime-genai's ``model.mtp`` section (the head, its inputs and outputs) and the decoder's
    ``hidden_states`` output to ``genai_config.json`` in ``out_dir`` (its plain generator ignores both); returns
    None, or why genai's ``MtpGenerator`` cannot run this folder (the section is written all the same when
    the file exists):

    * it verifies the candidate with the logits of two positions: a folder exported with ``--all-logits``;
    * it runs the head with the decoder's search options, a buffer shared by past and present when the
      decoder updates its cache in place, which the head (a concatenated cache) cannot: ``--concatenated-cache``;
    * on CPU (0.18), it casts the decoder's logits to float32 before their argmax, and its CPU cast refuses
      a cast to the same type: float32 logits stop it (``Cast - input and output types are the same``).
    """
    path = os.path.join(out_dir, "genai_config.json")
    if not os.path.isfile(path):
        return f"no genai_config.json: {metadata.get('genai')}"
    with open(path, encoding="utf-8") as f:
        genai = json.load(f)
    decoder = genai["model"]["decoder"]
    decoder["outputs"]["hidden_states"] = HIDDEN_OUTPUT
    genai["model"]["mtp"] = {
        "filename": MTP_FILE,
        "num_hidden_layers": 1,
        "num_key_value_heads": decoder["num_key_value_heads"],
        "head_size": decoder["head_size"],
        "main_hidden_states": HIDDEN_OUTPUT,
        "inputs": {"input_ids": "input_ids", "hidden_states": HIDDEN_INPUT, "attention_mask": "attention_mask",
                   "position_ids": "position_ids", "past_key_names": "past_key_values.%d.key",
                   "past_value_names": "past_key_values.%d.value"},
        "outputs": {"logits": "logits", "present_key_names": "present.%d.key",
                    "present_value_names": "present.%d.value"},
    }
    with open(path, "w", encoding="utf-8") as f:
        json.dump(genai, f, indent=2)
    if metadata.get("logits") != "all":
        return ("onnxruntime-genai verifies the candidate with the logits of every position: export the folder "
                "with --all-logits")
    if metadata.get("cache") == "in_place":
        return ("onnxruntime-genai runs the head with the decoder's buffer shared by past and present (the "
                "decoder updates its cache in place), the head concatenates its cache: export the folder with "
                "--concatenated-cache")
    if metadata.get("dtype") == "float32":
        return ("onnxruntime-genai 0.18's MtpGenerator casts the decoder's float32 logits to float32 on CPU, "
                "which its CPU cast refuses ('Cast - input and output types are the same')")
    return None


def genai_head_overlay(folder: str | os.PathLike) -> str:
    """The overlay (``og.Config(folder).overlay(...)``) making the folder's ``model.mtp`` head a model of its
    own for ``og.MtpGenerator(main, head, params)``: genai refuses a ``..`` in a path, the head's own
    ``genai_config.json`` could not sit beside the folder's."""
    with open(os.path.join(os.fspath(folder), "genai_config.json"), encoding="utf-8") as f:
        mtp = json.load(f)["model"]["mtp"]
    inputs = {k: v for k, v in mtp["inputs"].items()}
    return json.dumps({"model": {"decoder": {
        "filename": mtp["filename"], "num_hidden_layers": mtp["num_hidden_layers"],
        "num_key_value_heads": mtp["num_key_value_heads"], "head_size": mtp["head_size"],
        "inputs": inputs, "outputs": dict(mtp["outputs"], hidden_states="")}}})


def _one_layer(config: Any) -> Any:
    one = copy.deepcopy(config)
    one.num_hidden_layers = 1
    return one


def add_hidden_output(model_path: str) -> None:
    """Adds :data:`HIDDEN_OUTPUT` to the decoder saved at ``model_path``: the input of its head (the last
    hidden states after the final norm) for every position of a run, taken before the slice keeping the last
    positions' (the weights' file is left as it is)."""
    proto = onnx.load(model_path, load_external_data=False)
    graph = proto.graph
    producers = {out: node for node in graph.node for out in node.output}
    outputs = [o.name for o in graph.output]
    if HIDDEN_OUTPUT in outputs:
        return
    head_output = VERIFY_LOGITS if VERIFY_LOGITS in producers else "logits"
    if head_output not in producers:
        raise ValueError(f"The decoder {model_path!r} has no {VERIFY_LOGITS!r} nor 'logits' to find its head.")
    hidden = producers[head_output].input[0]
    while hidden in producers and producers[hidden].op_type == "Slice":  # every position, not the kept ones
        hidden = producers[hidden].input[0]
    head = next(o for o in graph.output if o.name == head_output)
    dims = [d.dim_param or d.dim_value or None for d in head.type.tensor_type.shape.dim]
    graph.node.append(onnx.helper.make_node("Identity", [hidden], [HIDDEN_OUTPUT], name="fx2onnx_mtp_hidden"))
    graph.output.append(onnx.helper.make_tensor_value_info(
        HIDDEN_OUTPUT, head.type.tensor_type.elem_type, [dims[0], "sequence_length", None] if dims else None))
    onnx.save(proto, model_path)
