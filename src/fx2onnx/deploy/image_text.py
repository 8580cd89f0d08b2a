"""The pieces of an image-text-to-text folder, chosen by family: LLaVA, Gemma 3 and Idefics 3
(:mod:`fx2onnx.deploy.vision`), Qwen-VL (:mod:`fx2onnx.deploy.qwen_vl`), Mistral 3 (:mod:`fx2onnx.deploy.pixtral`),
LFM2-VL (:mod:`fx2onnx.deploy.naflex`), LLaVA-OneVision (:mod:`fx2onnx.deploy.anyres`),
any other vision-language model through the generic split (:mod:`fx2onnx.deploy.image_text_generic`); and their
export into a folder.

.. code-block:: python

    from fx2onnx.deploy.image_text import has_own_pieces

    print(has_own_pieces("llava"), has_own_pieces("qwen2_vl"), has_own_pieces("blip-2"))  # True True False
"""

from __future__ import annotations

import copy
import os
import warnings
from typing import Any

import torch

from ..patches import torch_export_patches
from ..weights import to_onnx_from_checkpoint
from ..weights.empty import parameters_on_meta
from ..weights.save import load_without_weights
from .anyres import ANYRES_MODEL_TYPES, anyres_pieces
from .image_text_generic import generic_vision_pieces
from .naflex import NAFLEX_MODEL_TYPES, naflex_pieces
from .pixtral import PIXTRAL_MODEL_TYPES, pixtral_pieces
from .qwen_vl import QWEN_VL_MODEL_TYPES, qwen_vl_pieces
from .saved_model import name_presents, rename_external_data, rename_values, update_cache_in_place
from .speech import Piece
from .transformersjs import data_file_name, transformersjs_refusal
from .transformersjs_split import SPLIT_PIECES, with_transformersjs_split
from .vision import OWN_PIECES_MODEL_TYPES, VisionPiece, decoder_piece, image_tokens


def has_own_pieces(model_type: str) -> bool:
    """Whether the pieces of ``model_type`` are written for its family (LLaVA, Gemma 3, Idefics 3, Qwen-VL,
    Mistral 3, LightOnOCR, LFM2-VL and LLaVA-OneVision), not by :mod:`fx2onnx.deploy.image_text_generic`."""
    return model_type in (OWN_PIECES_MODEL_TYPES + QWEN_VL_MODEL_TYPES + PIXTRAL_MODEL_TYPES + NAFLEX_MODEL_TYPES
                          + ANYRES_MODEL_TYPES)


def vision_pieces(model: Any, config: Any, dtype: torch.dtype = torch.float32, seed: int = 0) -> list[Piece]:
    """The vision and decoder pieces of a LLaVA, Gemma 3, Idefics 3, Qwen-VL or Mistral 3 model
    (:func:`fx2onnx.deploy.qwen_vl.qwen_vl_pieces`), with example inputs of two shapes."""
    if config.model_type in QWEN_VL_MODEL_TYPES:
        return with_transformersjs_split(qwen_vl_pieces(model, config, dtype, seed), model, config, seed)
    if config.model_type in PIXTRAL_MODEL_TYPES:
        return with_transformersjs_split(pixtral_pieces(model, config, dtype, seed), model, config, seed)
    if config.model_type in NAFLEX_MODEL_TYPES:
        return naflex_pieces(model, config, dtype, seed)
    if config.model_type in ANYRES_MODEL_TYPES:
        return anyres_pieces(model, config, dtype, seed)
    if not has_own_pieces(config.model_type):
        return with_transformersjs_split(generic_vision_pieces(model, config, dtype, seed), model, config, seed)
    vision = config.vision_config
    g = torch.Generator().manual_seed(seed)

    def pixels(images):
        return {"pixel_values": torch.randn(images, 3, vision.image_size, vision.image_size, generator=g).to(dtype)}

    decoder = decoder_piece(model, config, dtype, g, image_tokens(config))
    encoder = Piece("vision", "vision.onnx", VisionPiece(model), pixels(2), pixels(3),
                    {"pixel_values": {0: "images"}}, ["pixel_values"], ["image_features"])
    return with_transformersjs_split([encoder, decoder], model, config, seed)


def export_vision_pieces(
    folder: str, out_dir: str, config: Any, dtype: torch.dtype, *, optimize: str, quantize: str | None,
    block_size: int, opset: int | None, progress: bool, say: Any, symmetric: bool = True,
    cache_in_place: bool = True, make_pieces: Any = None,
) -> list[Piece]:
    """Exports the pieces of an image-text folder (:func:`vision_pieces`, or ``make_pieces(model, config,
    dtype)``: a speech language model's, :mod:`fx2onnx.deploy.audio_text_generic`) into ``out_dir``; the decoder's cache
    outputs are named after their inputs (:func:`fx2onnx.deploy.saved_model.name_presents`). At
    ``optimize="onnxruntime"`` the decoder updates its cache in place when the rule applies
    (:func:`fx2onnx.deploy.saved_model.update_cache_in_place`: not for a mask read from the image tokens
    as Gemma 3's, nor for a sliding window), the image features fed unchanged at every step."""
    import transformers  # deferred: heavy

    # the parameters on the meta device, the buffers computed (CLIP's integer position ids)
    with parameters_on_meta():
        model = getattr(transformers, config.architectures[0])._from_config(config, dtype=dtype).eval()
    pieces = (make_pieces or vision_pieces)(model, config, dtype)
    if transformersjs_refusal(quantize, str(dtype)):  # transformers.js runs none of these weights (bfloat16)
        pieces = [p for p in pieces if p.name not in SPLIT_PIECES]
    for piece in pieces:
        say(f"exporting the {piece.name} of {config.architectures[0]} ({str(dtype).replace('torch.', '')}, "
            f"optimize={optimize}{', ' + quantize if quantize else ''})")
        path = os.path.join(out_dir, piece.filename)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with torch_export_patches(patch_transformers=True) as modificator, warnings.catch_warnings():
            # Qwen3-VL: the list of deepstack features becomes one input per feature, as intended
            warnings.filterwarnings("ignore", message=".*froze the length of input 'deepstack_features'.*")
            to_onnx_from_checkpoint(
                folder, (), modificator(copy.deepcopy(piece.inputs)), filename=path, model=piece.module, dtype=dtype,
                progress=progress, dynamic_shapes=piece.dynamic_shapes, target_opset=opset,
                optimize=False if optimize == "none" else optimize, quantize=quantize,
                quantize_block_size=block_size, quantize_symmetric=symmetric,
            )
        if piece.filename.startswith("onnx/"):  # transformers.js loads the weights' file as it names it
            rename_external_data(path, data_file_name(piece.filename))
        if piece is pieces[0] or piece.name in ("embed_tokens", "vision_encoder"):  # features (vision, audio), embeddings
            rename_values(path, piece.input_names, piece.output_names, {})
            continue
        if piece.name == "decoder_model_merged":  # transformers.js' decoder: optimum's names, the present fed back
            piece.input_names, piece.cache = name_presents(path, optimum_names=True)
            piece.output_names = [o.name for o in load_without_weights(path).graph.output]
            continue
        if cache_in_place and optimize == "onnxruntime":
            # the vision piece's outputs are the decoder's inputs fed unchanged at every step
            piece.in_place = update_cache_in_place(path, constant_inputs=pieces[0].output_names)
        inputs, pairs = name_presents(path)
        proto = load_without_weights(path)
        piece.input_names, piece.output_names = inputs, [o.name for o in proto.graph.output]
        piece.cache = pairs
    return pieces
