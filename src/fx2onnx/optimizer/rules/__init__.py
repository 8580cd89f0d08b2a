"""The rewrite rules of each optimization level, in the order they run.

A rule is a name and a function ``fn(model: onnx_ir.Model) -> int`` returning how many
times it applied. One file per fusion family.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import onnx_ir as ir

from .activation import fuse_bias_gelu, fuse_gelu
from .attention import attention_3d_layout, drop_full_masks, fuse_attention
from .cache_in_place import cache_in_place
from .cleanup import broadcast_expands, fold_reshapes, fold_transposes, remove_identities
from .encoder import residual_sums, split_key_transposes
from .matmul_packing import pack_matmuls, pack_projections
from .nbits_packing import pack_matmul_nbits
from .normalization import fuse_rms_normalization, fuse_skip_rms_normalization, group_norm_to_instance_norm
from .rotary import fuse_rotary_embedding


@dataclasses.dataclass(frozen=True)
class Rule:
    """A named graph rewrite; ``min_opset``: the main-domain opset the model needs;
    ``default``: False for a rule that runs only when asked (``optimize(enable=[name])``),
    one measured not to pay on onnxruntime's CPU kernels."""

    #: the name of the rule, as ``optimize(enable=..., disable=...)`` takes it
    name: str
    #: rewrites the model in place, returns the number of rewrites
    fn: Callable[[ir.Model], int]
    #: the main-domain opset the model needs (0 for any)
    min_opset: int = 0
    #: False for a rule which runs only when asked
    default: bool = True
    #: True for a rule on quantized nodes: with ``optimize(quantize=...)`` it runs after the quantization
    after_quantize: bool = False


CLEANUP = [
    Rule("remove_identities", remove_identities),
    Rule("fold_transposes", fold_transposes),
    Rule("fold_reshapes", fold_reshapes),
    Rule("broadcast_expands", broadcast_expands),
]

ONNXRUNTIME = [
    # an encoder's key transposed once ([0, 2, 3, 1]) split back for the fusion (the clean-ups refold the others)
    Rule("attention_key_transposes", split_key_transposes, min_opset=23),
    Rule("attention", fuse_attention, min_opset=23),
    Rule("attention_full_masks", drop_full_masks, min_opset=23),
    Rule("rotary_embedding", fuse_rotary_embedding),
    Rule("attention_3d_layout", attention_3d_layout, min_opset=23),
    Rule("rms_normalization", fuse_rms_normalization),
    # again: the heads normalized before the rotary embedding (Qwen3's q/k norms) are fused now; the
    # 3D layout keeps them on a view (Reshape) where they were transposed (Qwen3-0.6B: 112 Transposes less)
    Rule("attention_3d_layout", attention_3d_layout, min_opset=23),
    # slower than Add + SimplifiedLayerNormalization in onnxruntime 1.31 (CPU): 116 us against 73 us
    # on 128 tokens of 512, equal on one token
    Rule("skip_rms_normalization", fuse_skip_rms_normalization, default=False),
    Rule("gelu", fuse_gelu),
    Rule("bias_gelu", fuse_bias_gelu),
    # onnxruntime expands the standard GroupNormalization (no kernel): its InstanceNormalization is 3-5x faster
    Rule("group_norm", group_norm_to_instance_norm),
    # a post-norm residual Add written as Sum: onnxruntime fuses Add + LayerNormalization into its
    # SkipLayerNormalization, 3x slower on CPU (1.31): MiniLM-L6 7 % slower with it (encoder.py)
    Rule("residual_sums", residual_sums),
    # q, k, v of an input of width >= 1024 in one MatMul and a Split: one token of Qwen3-0.6B (1024),
    # 1 thread, int4: MatMulNBits 58.9 -> 51.6 ms a step (onnxruntime-genai's builder packs them too);
    # float32 not slower. At width 512 (float32) the separate MatMuls were faster: 1.60 ms against
    # 1.51 ms on 128 tokens, 58 us against 56 us on one token (the Split copies)
    Rule("pack_projections", pack_projections),
    # every group, gate and up included (no faster at width 1024 in int4: 53.2 ms against 51.6)
    Rule("matmul_packing", pack_matmuls, default=False),
    # the kv cache in a buffer updated in place (GroupQueryAttention): the standard Attention copies the
    # whole cache at each step (28 layers of Qwen3-0.6B, one token, 1 thread: 2.5 -> 1.8 ms a step at a
    # past of 24-88 tokens, 40.8 -> 19.5 ms at 1000); only for a caller binding past and present to one
    # buffer (the generation loop, onnxruntime-genai): on by default in the checkpoint folders
    Rule("cache_in_place", cache_in_place, min_opset=23, default=False),
    # the MatMulNBits of one input (q, k, v, packed N at most 4x K) in one and a Split, after quantization:
    # bit-identical; not faster on the trained benchmark Llama (width 512, int4, one token, 1 thread, 29 -> 21
    # MatMulNBits): 1.79 ms against 1.81 ms of CPU time a decoding step (median of 20 alternating rounds)
    Rule("nbits_packing", lambda m: pack_matmul_nbits(m, max_width_ratio=4.0), default=False, after_quantize=True),
]

OPSET23 = [
    Rule("attention_key_transposes", split_key_transposes, min_opset=23),
    Rule("attention", fuse_attention, min_opset=23),
    Rule("attention_full_masks", drop_full_masks, min_opset=23),
    Rule("rotary_embedding", lambda m: fuse_rotary_embedding(m, standard=True), min_opset=23),
    Rule("attention_3d_layout", attention_3d_layout, min_opset=23),
    Rule("rms_normalization", lambda m: fuse_rms_normalization(m, op_type="RMSNormalization"), min_opset=23),
    Rule("gelu", lambda m: fuse_gelu(m, standard=True), min_opset=20),
    Rule("residual_sums", residual_sums),
    Rule("matmul_packing", pack_matmuls, default=False),
]

#: level name -> the rules run after the default optimization
LEVELS: dict[str, list[Rule]] = {
    "default": CLEANUP,
    "onnxruntime": CLEANUP + ONNXRUNTIME + CLEANUP,
    "opset23": CLEANUP + OPSET23 + CLEANUP,
}

__all__ = ["LEVELS", "Rule"]
