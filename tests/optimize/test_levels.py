"""optimize() and to_onnx(optimize=level) end to end: a tiny Llama with a kv cache,
exported at every level, checked against eager on a second input set of other batch,
sequence and cache lengths."""

from __future__ import annotations

import collections
import copy

import onnx
import onnx_ir as ir
import pytest
import torch

import fx2onnx
from fx2onnx.zoo import get_tiny_model
from fx2onnx.optimizer.api import LEVEL_NAMES

FUSED = {
    "default": {},
    "onnxruntime": {"Attention": 1, "RotaryEmbedding": 2, "SimplifiedLayerNormalization": 3,
                    "SkipSimplifiedLayerNormalization": 0},
    "opset23": {"Attention": 1, "RotaryEmbedding": 2, "RMSNormalization": 3},
}


@pytest.fixture(scope="module")
def tiny_llama():
    return get_tiny_model("llama", with_cache=True, attn_implementation="sdpa", num_hidden_layers=1)


@pytest.mark.parametrize(
    "level",  # the fast tier exports at the level with the most rewrites, the slow tier at the others
    [level if level == "onnxruntime" else pytest.param(level, marks=pytest.mark.slow) for level in LEVEL_NAMES],
)
def test_tiny_llama_with_cache(tiny_llama, level):
    with fx2onnx.torch_export_patches(patch_transformers=True):
        onx = fx2onnx.to_onnx(
            tiny_llama.model, (), copy.deepcopy(tiny_llama.inputs), dynamic_shapes=tiny_llama.dynamic_shapes,
            optimize=level,
        )
    ops = collections.Counter(n.op_type for n in onx.graph.node)
    for op_type, count in FUSED[level].items():
        assert ops[op_type] == count, (op_type, ops)
    if level != "default":
        # no score tensor, no repeated kv heads, no cache concatenation left
        assert not {"Softmax", "Neg", "Sqrt"} & set(ops), ops
        producers = {o: n.op_type for n in onx.graph.node for o in n.output}
        assert all(producers[o.name] == "Attention" for o in onx.graph.output if o.name.startswith("present")), producers
    # other batch, sequence and cache lengths than the export inputs
    for inputs in (tiny_llama.inputs, tiny_llama.inputs2):
        report = fx2onnx.validate(onx, tiny_llama.model, (), copy.deepcopy(inputs), atol=1e-4)
        assert report.ok, f"{level}: {report}"


@pytest.fixture(scope="module")
def unoptimized_llama(tiny_llama):
    """The tiny Llama exported at opset 23 without optimization."""
    with fx2onnx.torch_export_patches(patch_transformers=True):
        return fx2onnx.to_onnx(
            tiny_llama.model, (), copy.deepcopy(tiny_llama.inputs), dynamic_shapes=tiny_llama.dynamic_shapes,
            target_opset=23, optimize=False,
        )


def test_optimize_report_and_kinds(tiny_llama, unoptimized_llama):
    onx = unoptimized_llama
    # a ModelProto gives a ModelProto, an onnx_ir.Model an onnx_ir.Model
    fused, report = fx2onnx.optimize(onx, level="onnxruntime", report=True)
    assert isinstance(fused, onnx.ModelProto)
    assert report.matches("attention") == 1 and report.matches("rotary_embedding") == 2
    # the attention runs on [batch, seq, heads * head_size]: no Transpose into heads and back
    assert report.matches("attention_3d_layout") == 1 and report.op_types.get("Transpose", 0) <= 1
    assert report.nodes_after < report.nodes_before
    assert "attention" in str(report) and report.op_types["Attention"] == 1
    model = fx2onnx.optimize(ir.from_proto(onx), level="opset23")
    assert isinstance(model, ir.Model)
    assert fx2onnx.validate(fused, tiny_llama.model, (), copy.deepcopy(tiny_llama.inputs2)).ok


def test_optimize_enable_disable(tiny_llama, unoptimized_llama):
    """The rules off by default run when enabled, any rule can be disabled, unknown names are refused."""
    onx = unoptimized_llama
    _, report = fx2onnx.optimize(onx, level="onnxruntime", report=True)
    assert "enable=['matmul_packing'] runs it" in str(report) and report.matches("matmul_packing") == 0
    fused, report = fx2onnx.optimize(
        onx, level="onnxruntime", report=True, enable=["skip_rms_normalization", "matmul_packing"],
        disable=["rotary_embedding"],
    )
    assert report.op_types["SkipSimplifiedLayerNormalization"] == 2 and report.op_types["Split"] == 2
    assert "RotaryEmbedding" not in report.op_types and "skipped: disabled" in str(report)
    for inputs in (tiny_llama.inputs, tiny_llama.inputs2):
        assert fx2onnx.validate(fused, tiny_llama.model, (), copy.deepcopy(inputs), atol=1e-4).ok
    with pytest.raises(ValueError, match=r"Unknown rule\(s\) \['fast_gelu'\] in enable.*its rules are"):
        fx2onnx.optimize(onx, level="onnxruntime", enable=["fast_gelu"])
    with pytest.raises(TypeError, match="list of rule names"):
        fx2onnx.optimize(onx, level="opset23", disable="attention")


def test_levels_errors():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU())
    onx = fx2onnx.to_onnx(model, (torch.randn(2, 4),), target_opset=18)
    with pytest.raises(ValueError, match="Unknown optimization level 'fast'"):
        fx2onnx.optimize(onx, level="fast")
    with pytest.raises(ValueError, match="target_opset=23"):
        fx2onnx.optimize(onx, level="opset23")
    with pytest.raises(ValueError, match="Unknown optimization level"):
        fx2onnx.to_onnx(model, (torch.randn(2, 4),), optimize="O3")
    # the onnxruntime level on an opset-18 model: attention skipped, other fusions done
    fused, report = fx2onnx.optimize(onx, level="onnxruntime", report=True)
    assert "skipped: opset 18 < 23" in str(report)
    assert [n.op_type for n in fused.graph.node] == ["Gemm", "Gelu"]
    assert fx2onnx.validate(fused, model, (torch.randn(2, 4),)).ok


@pytest.mark.parametrize("level", [False, True, "onnxruntime"])
def test_cnn_every_level(level):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(64, 3)
    ).eval()
    onx = fx2onnx.to_onnx(model, (torch.randn(2, 3, 6, 6),), dynamic_shapes=({0: "batch"},), optimize=level)
    assert fx2onnx.validate(onx, model, (torch.randn(5, 3, 6, 6),)).ok


@pytest.mark.parametrize("level", [pytest.param("onnxruntime", marks=pytest.mark.slow), "opset23"])
@pytest.mark.slow
def test_tiny_phi_partial_rotary(level):
    """phi rotates 40% of each head: one RotaryEmbedding per query and key with rotary_embedding_dim,
    the attention on [batch, seq, hidden] (no Transpose into heads), right for other lengths."""
    tiny = get_tiny_model("phi", with_cache=True, attn_implementation="sdpa", num_hidden_layers=1,
                          hidden_size=64, num_attention_heads=4, num_key_value_heads=4, partial_rotary_factor=0.4)
    with fx2onnx.torch_export_patches(patch_transformers=True):
        onx = fx2onnx.to_onnx(tiny.model, (), copy.deepcopy(tiny.inputs), dynamic_shapes=tiny.dynamic_shapes, optimize=level)
    ops = collections.Counter(n.op_type for n in onx.graph.node)
    rotary = [n for n in onx.graph.node if n.op_type == "RotaryEmbedding"]
    heads = [n for n in onx.graph.node if n.op_type == "Transpose" and list(n.attribute[0].ints) == [0, 2, 1, 3]]
    # one Transpose into heads stays: the rotary caches read the batch size from its Shape
    assert len(rotary) == 2 and ops["Attention"] == 1 and len(heads) <= 1, ops
    assert all({a.name: a.i for a in n.attribute}["rotary_embedding_dim"] == 6 for n in rotary)
    for inputs in (tiny.inputs, tiny.inputs2):
        report = fx2onnx.validate(onx, tiny.model, (), copy.deepcopy(inputs), atol=1e-4)
        assert report.ok, f"{level}: {report}"


def test_heads_normalized_before_rotary_keep_the_3d_layout():
    """Qwen3 normalizes q and k per head before the rotary embedding: at the level onnxruntime the
    normalized heads are reshaped back to ``[batch, seq, heads * head_size]`` (a view) instead of
    transposed, the attention runs in 3D, and the model still equals eager on other sizes."""
    import transformers

    from fx2onnx.inputs.folder_inputs import task_inputs

    config = transformers.Qwen3Config(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
                                      num_key_value_heads=2, head_dim=16, vocab_size=384, tie_word_embeddings=False)
    inputs, inputs2, dynamic_shapes = task_inputs(config, "text-generation", with_cache=True, dtype=torch.float32)
    model = transformers.Qwen3ForCausalLM(config).eval()
    onx = fx2onnx.to_onnx(model, (), copy.deepcopy(inputs), dynamic_shapes=dynamic_shapes, optimize="onnxruntime")
    ops = collections.Counter(n.op_type for n in onx.graph.node)
    assert ops["Attention"] == 1 and ops["SimplifiedLayerNormalization"] == 5 and ops["Transpose"] == 0, ops
    for feeds in (inputs, inputs2):
        report = fx2onnx.validate(onx, model, (), copy.deepcopy(feeds), atol=1e-4)
        assert report.ok, report


class _DecoderLayer(torch.nn.Module):
    """A causal self-attention over a kv cache, then a cross-attention on the encoder's keys and values
    (inputs, of a static length, as in the decoder piece of a speech folder) with the mask transformers
    builds for it under torch.export when there is no encoder mask (``create_bidirectional_mask``:
    ``q_idx >= 0``, shape ``[1, 1, q, 1]``)."""

    def __init__(self, hidden: int = 32, heads: int = 4):
        super().__init__()
        self.heads, self.size = heads, hidden // heads
        self.qkv = torch.nn.Linear(hidden, 3 * hidden)
        self.cross_q = torch.nn.Linear(hidden, hidden)
        self.out = torch.nn.Linear(hidden, hidden)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], x.shape[1], self.heads, self.size).transpose(1, 2)

    def forward(self, x, past_key, past_value, cross_key, cross_value):
        b, s, hidden = x.shape
        q, k, v = (self._heads(t) for t in self.qkv(x).chunk(3, dim=-1))
        key, value = torch.cat([past_key, k], dim=2), torch.cat([past_value, v], dim=2)
        total = key.shape[2]
        causal = torch.arange(total)[None, :] <= (torch.arange(s) + total - s)[:, None]
        y = torch.nn.functional.scaled_dot_product_attention(q, key, value, attn_mask=causal[None, None])
        h = x + y.transpose(1, 2).reshape(b, s, hidden)
        every_key = (torch.arange(s) >= 0)[None, None, :, None]
        y = torch.nn.functional.scaled_dot_product_attention(self._heads(self.cross_q(h)), cross_key, cross_value,
                                                             attn_mask=every_key)
        return self.out(h + y.transpose(1, 2).reshape(b, s, hidden)), key, value


def test_cross_attention_without_mask_beside_a_cached_self_attention():
    """Both attentions fused at the level onnxruntime; the cross-attention's one-column mask is expanded
    to the encoder's length (onnxruntime refused it: "inconsistent total_sequence_length"); equal to
    eager on other batch, sequence and cache lengths."""
    torch.manual_seed(0)
    model = _DecoderLayer().eval()

    def inputs(batch, seq, past):
        return (torch.randn(batch, seq, 32), *(torch.randn(batch, 4, past, 8) for _ in range(2)),
                *(torch.randn(batch, 4, 6, 8) for _ in range(2)))

    cache, cross = {0: "batch", 2: "past"}, {0: "batch"}
    onx = fx2onnx.to_onnx(model, inputs(2, 3, 5), dynamic_shapes=({0: "batch", 1: "seq"}, cache, cache, cross, cross),
                          optimize="onnxruntime")
    ops = collections.Counter(n.op_type for n in onx.graph.node)
    assert ops["Attention"] == 2 and "Softmax" not in ops, ops
    for args in (inputs(2, 3, 5), inputs(3, 1, 7)):
        report = fx2onnx.validate(onx, model, args, atol=1e-4)
        assert report.ok, report
