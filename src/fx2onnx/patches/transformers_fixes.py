"""Methods of transformers replaced, while exporting, by versions torch.export captures.

Each one fixes a failure met with the installed transformers and tiny models:

* ``DynamicLayer.lazy_initialization`` creates its empty tensors with
  ``torch.tensor([])``: once exported, those become lifted constants which
  torch.onnx.export's decomposition step rejects (``Constant tensor
  lifted_tensor_0 is not in the constants dictionary``), and a 1-D empty tensor
  concatenated on dimension -2 only works through a legacy rule of ``cat``.
  The patch slices the incoming states to length 0 instead: same rank, no
  constant.
* the rotary embeddings decorated by ``dynamic_rope_update`` (rope type
  ``dynamic``) test ``if seq_len > max_seq_len_cached:`` on a tensor computed from
  ``position_ids``: a data-dependent branch torch.export cannot capture. The
  patch computes the frequencies from ``seq_len`` without a branch (the
  transformers formula gives the original frequencies when ``seq_len`` is below
  ``max_position_embeddings``). It matches eager for a model whose cached
  frequencies were not grown by a previous longer call.
* ``DynamicSlidingWindowLayer.get_mask_sizes`` tests ``cumulative_length >=
  sliding_window`` (``is_full``) and takes a ``max``: once exported, the count of
  tokens seen is a symbolic dimension (see :mod:`fx2onnx.patches.caches`) and
  the branch would be frozen on the example's cache length, wrong for a cache
  on the other side of the window. The patch computes the same sizes without a
  branch: the length of the cached states plus the query, and the offset
  ``cumulative_length - cached``.
* CPM-Ant's ``_prepare_attention_mask`` builds the positions of its padding mask
  with ``torch.tensor(list(range(seqlen - prompt_length))[::-1])``: a Python list
  of the sequence length, which torch.export freezes. The patch computes the same
  positions with ``arange``.
* Funnel's ``get_position_embeds`` pools Python lists of positions
  (see :mod:`fx2onnx.patches.funnel`).
* LLaVA's ``get_image_features`` splits the image features into a list per image,
  which specializes the number of images (see :mod:`fx2onnx.patches.llava`).
* Idefics 3's ``get_image_features`` splits the features per prompt with ``tolist()``,
  which specialized the batch (see :mod:`fx2onnx.patches.idefics3`).
* Qwen2-VL's vision attention (the same code in Qwen2.5-VL and Qwen3-VL) splits the images by
  ``lengths.tolist()`` and runs one attention per image; the patch runs one attention over all the
  patches with a block-diagonal mask built from ``cu_seqlens`` as tensors (see
  :mod:`fx2onnx.patches.qwen_vl`).
* Wav2Vec2-Conformer's relative positions (and Wav2Vec2-BERT's, SeamlessM4T's) are sliced from a table grown
  by a branch on the number of frames (see :mod:`fx2onnx.patches.relative_positions`).
* RT-DETR's forward (and its copies: RT-DETR v2, D-FINE, DEIMv2, PP-DocLayout) reads the
  batch with ``len(source_flatten)``, which specialized it (see :mod:`fx2onnx.patches.detr_batch`).
* FSMT's ``make_padding_mask`` returns ``None`` when no token is padding
  (``if not padding_mask.any()``): a branch on the data. The patch always returns
  the mask; an all-false mask masks nothing, so the outputs are the same.
* SigLIP 2's position embeddings are resized image by image to sizes read with ``tolist()``
  (see :mod:`fx2onnx.patches.siglip2`).
* CANINE's local attention loops over chunks of the sequence (see :mod:`fx2onnx.patches.canine`).
* Gemma, Gemma 2 and PaliGemma build causal masks for attention modules that are not causal
  (``use_bidirectional_attention=True``, PaliGemma's default): eager SDPA skips the mask when
  nothing is padded and attends to every token, torch.export always keeps the causal mask. The
  mask functions of these modules return the mask OR eager's skip condition (see
  :mod:`fx2onnx.patches.sdpa_skip`).
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from .canine import _make_block_attention, _make_downsample_attention_mask
from .detr_batch import (
    DETR_BATCH_FORWARDS,
    guard_symbolic_len_forward,
    make_symbolic_len_forward,
)
from .funnel import _make_get_position_embeds
from .idefics3 import IMAGE_FEATURES, _make_image_features, guard_image_features
from .llava import _guard_llava_image_features as guard
from .llava import _make_llava_image_features as make
from .longformer import (
    _make_chunk_by_unfold,
    _make_dense_global_forward,
    _make_pad_to_window_size,
    _make_unpadded_encoder,
)
from .qwen_vl import (
    SPLIT_ATTENTIONS,
    SPLIT_FEATURES,
    guard_split_attention,
    guard_unsplit_image_features,
    make_block_diagonal_attention,
    make_unsplit_image_features,
)
from .reformer import _make_axial_position_forward
from .relative_positions import RELATIVE_POSITION_TABLES, guard_relative_positions, make_relative_positions
from .registry import Patch, patch_if_imported, source_guard
from .sdpa_skip import MASK_FUNCTIONS, guard_mask_function, make_mask_with_eager_skip
from .siglip2 import _make_resize_positional_embeddings


def _make_lazy_initialization(original: Any) -> Any:
    def lazy_initialization(self: Any, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        self.keys = key_states[..., :0, :]
        self.values = value_states[..., :0, :]
        self.is_initialized = True

    lazy_initialization.__wrapped__ = original  # type: ignore[attr-defined]
    return lazy_initialization


_guard_lazy_initialization = source_guard(
    "DynamicLayer.lazy_initialization", "torch.tensor([]",
    absent="DynamicLayer.lazy_initialization does not create torch.tensor([]) in this version", unwrap=False,
)


def _make_sliding_get_mask_sizes(original: Any) -> Any:
    def get_mask_sizes(self: Any, query_length: int) -> tuple[int, int]:
        if getattr(self, "record_past", False) or not self.is_initialized or self.keys is None:
            return original(self, query_length)
        # the layer keeps min(cumulative_length, sliding_window - 1) positions
        cached = self.keys.shape[-2]
        return cached + query_length, self.cumulative_length - cached

    get_mask_sizes.__wrapped__ = original  # type: ignore[attr-defined]
    return get_mask_sizes


_guard_sliding_get_mask_sizes = source_guard(
    "DynamicSlidingWindowLayer.get_mask_sizes", "cumulative_length", "sliding_window",
    absent="DynamicSlidingWindowLayer.get_mask_sizes does not use cumulative_length in this version", unwrap=False,
)


def _is_dynamic_rope_wrapper(function: Any) -> Any:
    """Returns the ``dynamic_rope_update`` wrapper inside a forward method, or None."""
    seen = 0
    while function is not None and seen < 5:
        code = getattr(function, "__code__", None)
        if code is not None and getattr(code, "co_qualname", "").startswith("dynamic_rope_update."):
            return function
        function = getattr(function, "__wrapped__", None)
        seen += 1
    return None


class _Overrides:
    """Reads attributes from ``overrides`` first, then from ``module``."""

    def __init__(self, module: Any, overrides: dict[str, Any]):
        object.__setattr__(self, "_module", module)
        object.__setattr__(self, "_overrides", overrides)

    def __getattr__(self, name: str) -> Any:
        overrides = object.__getattribute__(self, "_overrides")
        if name in overrides:
            return overrides[name]
        return getattr(object.__getattribute__(self, "_module"), name)


def _make_dynamic_rope_forward(original: Any) -> Any:
    wrapper = _is_dynamic_rope_wrapper(original)
    rope_forward = wrapper.__wrapped__

    @torch.no_grad()
    def forward(self: Any, x: torch.Tensor, position_ids: torch.Tensor, layer_type: str | None = None) -> Any:
        rope_type = self.rope_type if layer_type is None else self.rope_type[layer_type]
        kwargs = {"layer_type": layer_type} if layer_type is not None else {}
        if "dynamic" not in rope_type:
            return rope_forward(self, x, position_ids, **kwargs)
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

        seq_len = torch.max(position_ids) + 1
        inv_freq, _ = ROPE_INIT_FUNCTIONS[rope_type](self.config, x.device, seq_len=seq_len, **kwargs)
        prefix = f"{layer_type}_" if layer_type is not None else ""
        proxy = _Overrides(self, {f"{prefix}inv_freq": inv_freq.to(x.device)})
        return rope_forward(proxy, x, position_ids, **kwargs)

    forward.__wrapped__ = original  # type: ignore[attr-defined]
    return forward


def dynamic_rope_targets() -> list[str]:
    """Dotted paths of the ``forward`` methods decorated by ``dynamic_rope_update``
    in the modeling modules already imported."""
    targets = []
    for module_name, module in list(sys.modules.items()):
        if not module_name.startswith("transformers.models.") or module is None:
            continue
        for name, value in list(vars(module).items()):
            if (
                isinstance(value, type)
                and value.__module__ == module_name
                and "forward" in value.__dict__
                and _is_dynamic_rope_wrapper(value.__dict__["forward"]) is not None
            ):
                targets.append(f"{module_name}.{name}.forward")
    return sorted(targets)


def _make_padding_mask_always(original: Any) -> Any:
    def make_padding_mask(input_ids: torch.Tensor, padding_idx: int = 1) -> torch.Tensor:
        return input_ids.eq(padding_idx)

    return make_padding_mask


def _make_cpmant_attention_mask(original: Any) -> Any:
    def _prepare_attention_mask(
        self: Any, input_ids: torch.Tensor, span: torch.Tensor, context: torch.Tensor, length: torch.Tensor
    ) -> torch.Tensor:
        batch, seqlen = input_ids.shape[:2]
        device = input_ids.device
        directional_mask_2d = torch.arange(seqlen, device=device) <= torch.arange(seqlen, device=device).view(-1, 1)
        attention_mask = context[:, None, :] | (
            context[:, :, None].logical_not() & directional_mask_2d.view(1, seqlen, seqlen)
        )
        attention_mask = attention_mask & (span[:, None, :] == span[:, :, None])
        # left padding: positions n-1, ..., 0 of the text (eager builds them from a Python list)
        text = seqlen - self.prompt_length
        positions = (text - 1) - torch.arange(text, device=device)
        mask_1d = positions[None, :].repeat(batch, 1) < length[:, None]
        mask_1d = torch.cat((torch.ones(batch, self.prompt_length, device=device).bool(), mask_1d), dim=1)
        return mask_1d.view(batch, seqlen, 1) & mask_1d.view(batch, 1, seqlen) & attention_mask

    _prepare_attention_mask.__wrapped__ = original  # type: ignore[attr-defined]
    return _prepare_attention_mask


def _make_funnel_position_embeds(original: Any) -> Any:
    return _make_get_position_embeds(original)


def _make_reformer_axial_positions(original: Any) -> Any:
    return _make_axial_position_forward(original)


def _make_longformer_attention(original: Any) -> Any:
    return _make_dense_global_forward(original)


def _make_longformer_chunk(original: Any) -> Any:
    return _make_chunk_by_unfold(original)


def _make_longformer_padding(original: Any) -> Any:
    return _make_pad_to_window_size(original)


def _make_longformer_encoder(original: Any) -> Any:
    return _make_unpadded_encoder(original)


def _make_llava_image_features(original: Any) -> Any:
    return make(original)


def _guard_llava_image_features(original: Any) -> str | None:
    return guard(original)


def _make_moonshine_output_lengths(original: Any) -> Any:
    def _get_feat_extract_output_lengths(self: Any, input_lengths: Any) -> Any:
        # int((L - 127) / 64 + 1) truncates a float: torch.export specializes the length of a dynamic
        # audio (the encoder's mask kept the example's length); for the lengths a convolution
        # accepts (every numerator >= 0) the floor division is the same number, kept symbolic
        length = (input_lengths - 127) // 64 + 1
        length = (length - 7) // 3 + 1
        return (length - 3) // 2 + 1

    _get_feat_extract_output_lengths.__wrapped__ = original  # type: ignore[attr-defined]
    return _get_feat_extract_output_lengths


def transformers_patches() -> list[Patch]:
    """Returns the transformers patches (rotary embeddings of the modeling modules imported so far)."""
    patches = [
        Patch(
            name="DynamicLayer.lazy_initialization",
            kind="transformers",
            target="transformers.cache_utils.DynamicLayer.lazy_initialization",
            make=_make_lazy_initialization,
            expected_args=("self", "key_states", "value_states"),
            guard=_guard_lazy_initialization,
            doc="empty cache tensors sliced from the new states, no torch.tensor([]) constant",
        ),
        Patch(
            name="DynamicSlidingWindowLayer.get_mask_sizes",
            kind="transformers",
            target="transformers.cache_utils.DynamicSlidingWindowLayer.get_mask_sizes",
            make=_make_sliding_get_mask_sizes,
            expected_args=("self", "query_length"),
            guard=_guard_sliding_get_mask_sizes,
            doc="mask sizes of sliding layers without a branch on the number of tokens seen",
        ),
    ]
    patches.extend(patch_if_imported(
        "transformers.models.fsmt.modeling_fsmt", "make_padding_mask",
        name="fsmt.make_padding_mask",
        make=_make_padding_mask_always,
        expected_args=("input_ids", "padding_idx"),
        doc="the padding mask of FSMT returned even when nothing is padding, no data-dependent branch",
    ))
    patches.extend(patch_if_imported(
        "transformers.models.funnel.modeling_funnel", "FunnelAttentionStructure.get_position_embeds",
        name="FunnelAttentionStructure.get_position_embeds",
        make=_make_funnel_position_embeds,
        expected_args=("self", "seq_len", "dtype", "device"),
        doc="Funnel's relative positions from the sequence length and the pooling strides instead of "
        "Python lists of positions, which torch.export froze",
    ))
    patches.extend(patch_if_imported(
        "transformers.models.cpmant.modeling_cpmant", "CpmAntModel._prepare_attention_mask",
        name="CpmAntModel._prepare_attention_mask",
        make=_make_cpmant_attention_mask,
        expected_args=("self", "input_ids", "span", "context", "length"),
        doc="CPM-Ant's left-padding mask from a reversed arange instead of a Python list of the "
        "sequence length, which torch.export froze",
    ))
    patches.extend(patch_if_imported(
        "transformers.models.reformer.modeling_reformer", "AxialPositionEmbeddings.forward",
        name="AxialPositionEmbeddings.forward",
        make=_make_reformer_axial_positions,
        expected_args=("self", "position_ids"),
        doc="Reformer's axial position embeddings indexed for the whole batch instead of a Python loop "
        "over it, which torch.export froze",
    ))
    patches.extend(patch_if_imported(
        "transformers.models.llava.modeling_llava", "LlavaModel.get_image_features",
        name="LlavaModel.get_image_features",
        make=_make_llava_image_features,
        expected_args=("self", "pixel_values", "vision_feature_layer", "vision_feature_select_strategy",
                       "image_sizes"),
        guard=_guard_llava_image_features,
        doc="LLaVA's image features returned as one tensor instead of a list per image, which made "
        "torch.export specialize the number of images (see fx2onnx.patches.llava)",
    ))
    patches.extend(patch_if_imported(
        "transformers.models.longformer.modeling_longformer", "LongformerModel._pad_to_window_size",
        name="LongformerModel._pad_to_window_size",
        make=_make_longformer_padding,
        expected_args=("self", "input_ids", "attention_mask", "token_type_ids", "position_ids", "inputs_embeds",
                       "pad_token_id"),
        doc="the sequence padded to window * ceil(seq / window) without a branch, the mask's length checked equal "
        "to the ids': sizes torch sees as multiples of the window, one symbol for the sequence (see "
        "fx2onnx.patches.longformer)",
    ))
    patches.extend(patch_if_imported(
        "transformers.models.longformer.modeling_longformer", "LongformerEncoder.forward",
        name="LongformerEncoder.forward",
        make=_make_longformer_encoder,
        expected_args=("self", "hidden_states", "attention_mask", "padding_len", "output_attentions",
                       "output_hidden_states", "return_dict"),
        doc="the layers run on the sequence without the window padding (the self-attention pads inside the "
        "sliding window only): sizes of one symbol in every layer (see fx2onnx.patches.longformer)",
    ))
    for module, attention in (("longformer", "LongformerSelfAttention"), ("led", "LEDEncoderSelfAttention")):
        patches.extend(patch_if_imported(
            f"transformers.models.{module}.modeling_{module}", f"{attention}.forward",
            name=f"{attention}.forward",
            make=_make_longformer_attention,
            expected_args=("self", "hidden_states", "attention_mask", "is_index_masked", "is_index_global_attn",
                           "is_global_attn", "output_attentions"),
            doc="global attention computed densely (any number of global tokens) instead of a branch on "
            "is_global_attn and tensors sized by nonzero(), which torch.export cannot capture",
        ))
        patches.extend(patch_if_imported(
            f"transformers.models.{module}.modeling_{module}", f"{attention}._chunk",
            name=f"{attention}._chunk",
            make=_make_longformer_chunk,
            expected_args=("hidden_states", "window_overlap", "onnx_export"),
            doc="overlapping chunks taken with unfold (the model's onnx_export path), not as_strided of a view",
        ))
    for module, model_class in IMAGE_FEATURES:
        patches.extend(patch_if_imported(
            module, f"{model_class}.get_image_features",
            name=f"{model_class}.get_image_features",
            make=_make_image_features,
            expected_args=("self", "pixel_values", "pixel_attention_mask"),
            guard=guard_image_features,
            doc="the image features returned as one tensor instead of a list per prompt split with tolist(), "
            "which made torch.export specialize the batch (see fx2onnx.patches.idefics3)",
        ))
    for module, attention in SPLIT_ATTENTIONS:
        patches.extend(patch_if_imported(
            module, f"{attention}.forward",
            name=f"{attention}.forward",
            make=make_block_diagonal_attention,
            expected_args=("self", "hidden_states", "cu_seqlens", "position_embeddings"),
            guard=guard_split_attention,
            doc="one attention over the patches of every image with a block-diagonal mask built from cu_seqlens "
            "as tensors, instead of one attention per image split by lengths.tolist() (see fx2onnx.patches.qwen_vl)",
        ))
    for module, model_class in SPLIT_FEATURES:
        patches.extend(patch_if_imported(
            module, f"{model_class}.get_image_features",
            name=f"{model_class}.get_image_features",
            make=make_unsplit_image_features,
            expected_args=("self", "pixel_values", "image_grid_thw"),
            guard=guard_unsplit_image_features,
            doc="every image's features as one entry instead of a split per image by sizes read with tolist(), "
            "which made torch.export fix the number of images (see fx2onnx.patches.qwen_vl)",
        ))
    for module, function in MASK_FUNCTIONS:
        sliding = function == "create_sliding_window_causal_mask"
        patches.extend(patch_if_imported(
            module, function,
            name=f"{module.rsplit('.', 1)[-1]}.{function}",
            make=lambda original, sliding=sliding: make_mask_with_eager_skip(original, sliding),
            guard=guard_mask_function,
            doc="the causal mask OR the condition under which eager SDPA skips it, for attention modules "
            "that are not causal (use_bidirectional_attention): eager attends to every token when nothing "
            "is padded, torch.export kept the causal mask (see fx2onnx.patches.sdpa_skip)",
        ))
    patches.extend(patch_if_imported(
        "transformers.models.moonshine.modeling_moonshine", "MoonshinePreTrainedModel._get_feat_extract_output_lengths",
        name="MoonshinePreTrainedModel._get_feat_extract_output_lengths",
        make=_make_moonshine_output_lengths,
        expected_args=("self", "input_lengths"),
        guard=source_guard("MoonshinePreTrainedModel._get_feat_extract_output_lengths",
                           "int((input_lengths - 127) / 64 + 1)", "(output_conv2_length - 3) / 2 + 1",
                           absent="not the float divisions of transformers 5's Moonshine"),
        doc="Moonshine's subsampled lengths by floor divisions (the same numbers): int() of a float division "
        "made torch.export freeze the length of the encoder's attention mask to the example's",
    ))
    for module, table in RELATIVE_POSITION_TABLES:
        patches.extend(patch_if_imported(
            module, f"{table}.forward",
            name=f"{table}.forward",
            make=make_relative_positions,
            expected_args=("self", "hidden_states"),
            guard=guard_relative_positions,
            doc="the conformer's relative positions computed for the frames given instead of sliced from a table "
            "grown by a branch on their number, which torch.export narrowed to the table's (see "
            "fx2onnx.patches.relative_positions)",
        ))
    patches.extend(patch_if_imported(
        "transformers.models.canine.modeling_canine", "CanineAttention.forward",
        name="CanineAttention.forward",
        make=_make_block_attention,
        expected_args=("self", "hidden_states", "attention_mask", "output_attentions"),
        guard=source_guard("CanineAttention.forward", "for chunk_start in range(",
                           absent="CANINE's local attention is not cut into chunks by a Python loop"),
        doc="CANINE's local attention over blocks of characters as one attention with a block-diagonal mask, "
        "instead of Python loops over the chunks which torch.export unrolled for the example's length (see "
        "fx2onnx.patches.canine)",
    ))
    patches.extend(patch_if_imported(
        "transformers.models.canine.modeling_canine", "CanineModel._downsample_attention_mask",
        name="CanineModel._downsample_attention_mask",
        make=_make_downsample_attention_mask,
        expected_args=("self", "char_attention_mask", "downsampling_rate"),
        guard=source_guard("CanineModel._downsample_attention_mask", "MaxPool1d",
                           absent="CANINE's molecule mask is not pooled by MaxPool1d"),
        doc="CANINE's molecule mask as a max over reshaped groups of characters instead of MaxPool1d, which "
        "froze the sequence length (see fx2onnx.patches.canine)",
    ))
    patches.extend(patch_if_imported(
        "transformers.models.siglip2.modeling_siglip2", "Siglip2VisionEmbeddings.resize_positional_embeddings",
        name="Siglip2VisionEmbeddings.resize_positional_embeddings",
        make=_make_resize_positional_embeddings,
        expected_args=("positional_embeddings", "spatial_shapes", "max_length"),
        guard=source_guard("Siglip2VisionEmbeddings.resize_positional_embeddings", ".tolist()",
                           absent="SigLIP 2's position embeddings are not resized from sizes read with tolist()"),
        doc="SigLIP 2's position embeddings resized for every image at once by antialiased bilinear weights "
        "computed from spatial_shapes as tensors, instead of a loop over the batch reading each size with "
        "tolist(), which torch.export cannot capture (see fx2onnx.patches.siglip2)",
    ))
    for module, model_class in DETR_BATCH_FORWARDS:
        patches.extend(patch_if_imported(
            f"transformers.models.{module}.modeling_{module}", f"{model_class}.forward",
            name=f"{model_class}.forward",
            make=make_symbolic_len_forward,
            guard=guard_symbolic_len_forward,
            doc="len(source_flatten) read as source_flatten.shape[0], which torch.export kept dynamic instead "
            "of specializing the batch (see fx2onnx.patches.detr_batch)",
        ))
    for target in dynamic_rope_targets():
        class_name = target.split(".")[-2]
        patches.append(
            Patch(
                name=f"{class_name}.forward",
                kind="transformers",
                target=target,
                make=_make_dynamic_rope_forward,
                expected_args=("self", "x", "position_ids"),
                guard=lambda f: (
                    None if _is_dynamic_rope_wrapper(f) else "not decorated by dynamic_rope_update"
                ),
                doc="dynamic rope frequencies computed without a data-dependent branch",
            )
        )
    return patches
