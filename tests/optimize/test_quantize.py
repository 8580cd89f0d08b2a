"""Weight-only quantization (optimizer/rules/quantize.py): the rule alone on one MatMul / Gemm,
checked against the dequantized weight and against the float model within the error the
blocks allow; the tiny Llama quantized end to end, compared with float32 and with
onnxruntime's own MatMulNBitsQuantizer."""

from __future__ import annotations

import copy

import numpy as np
import onnx
import pytest
import torch
from onnx import helper as oh
from optimize_helpers import FLOAT, apply_rule, make_model, op_types, run

import fx2onnx
from fx2onnx.optimizer.rules.quantize import (
    dequantize_matmul_weight,
    pack_codes,
    quantize_blocks,
    quantize_gathers,
    quantize_matmuls,
)

RNG = np.random.default_rng(0)
K, N = 80, 24  # K is not a multiple of the block: padded to 96


def randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


W, BIAS = randn(K, N), randn(N)


def _matmul_model(bias: bool, gemm: bool = False) -> onnx.ModelProto:
    if gemm:  # torch's Linear on 2D inputs: Gemm(x, W^T, b, transB=1)
        nodes = [oh.make_node("Gemm", ["x", "Wt"] + (["b"] if bias else []), ["y"], transB=1)]
        return make_model(nodes, [("x", FLOAT, ["a", K])], [("y", FLOAT, ["a", N])], [("Wt", W.T.copy()), ("b", BIAS)])
    nodes = [oh.make_node("MatMul", ["x", "W"], ["mm" if bias else "y"])]
    if bias:
        nodes.append(oh.make_node("Add", ["mm", "b"], ["y"]))
    return make_model(nodes, [("x", FLOAT, ["a", "s", K])], [("y", FLOAT, ["a", "s", N])], [("W", W), ("b", BIAS)])


def _step(bits: int, symmetric: bool = False) -> np.ndarray:
    """The bound of |w - dequantized w| per block: half a step (asymmetric); a symmetric block
    maps its largest magnitude m onto -2**(bits-1) steps and clips -m to 2**(bits-1) - 1 steps: a step."""
    _, scales, _ = quantize_blocks(W, bits, 32, symmetric)
    return np.abs(scales) * (1.0 if symmetric else 0.5)


@pytest.mark.parametrize("gemm", [False, True])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("bits", [4, 8])
def test_matmul_nbits(bits, bias, gemm):
    model = _matmul_model(bias, gemm)
    report = []
    quantized, count = apply_rule(model, lambda m: quantize_matmuls(m, bits=bits, block_size=32, report=report))
    assert count == 1 and op_types(quantized) == {"MatMulNBits": 1}, op_types(quantized)
    node = quantized.graph.node[0]
    assert node.domain == "com.microsoft" and len(node.input) == (6 if bias else 4)
    # [N, n_blocks, blob]: K padded to 3 blocks of 32
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in quantized.graph.initializer}
    packed, scales, zero = (inits[name] for name in node.input[1:4])
    assert packed.shape == (N, 3, 32 * bits // 8) and scales.shape == (N, 3) and zero.shape == (N, 3 if bits == 8 else 2)
    # every weight within half a step of its block
    dequantized = dequantize_matmul_weight(packed, scales, zero, bits, K)
    assert np.all(np.abs(dequantized - W) <= np.repeat(_step(bits), 32, axis=1)[:, :K].T * (1 + 1e-5) + 1e-7)
    (entry,) = report
    assert entry.shape == (K, N) and entry.bytes_before == K * N * 4
    assert entry.bytes_after == packed.nbytes + scales.nbytes + zero.nbytes < entry.bytes_before * 96 / K / (3 if bits == 8 else 5)
    for shape in ((2, 3, K), (1, 7, K)):
        x = randn(*shape)[:, 0] if gemm else randn(*shape)
        (got,) = run(quantized, {"x": x})
        # onnxruntime multiplies by the dequantized weight...
        np.testing.assert_allclose(got, x @ dequantized + (BIAS if bias else 0), atol=1e-4, rtol=1e-4)
        # ... and stays within the error the blocks allow of the float model
        (expected,) = run(model, {"x": x})
        bound = np.abs(x) @ np.repeat(_step(bits), 32, axis=1)[:, :K].T
        assert np.all(np.abs(got - expected) <= bound * (1 + 1e-4) + 1e-4)


@pytest.mark.parametrize("bits", [4, 8])
def test_symmetric_blocks(bits):
    model = _matmul_model(bias=False)
    quantized, count = apply_rule(model, lambda m: quantize_matmuls(m, bits=bits, symmetric=True))
    node = quantized.graph.node[0]
    assert count == 1 and len(node.input) == 3  # no zero points: onnxruntime's default 2**(bits-1)
    codes, scales, zero = quantize_blocks(W, bits, 32, symmetric=True)
    assert zero is None
    dequantized = dequantize_matmul_weight(pack_codes(codes, bits), scales, None, bits, K)
    assert np.all(np.abs(dequantized - W) <= np.repeat(_step(bits, True), 32, axis=1)[:, :K].T * (1 + 1e-5))
    x = randn(2, 3, K)
    np.testing.assert_allclose(run(quantized, {"x": x})[0], x @ dequantized, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("bits", [4, 8])
def test_same_bytes_as_onnxruntime(bits, symmetric):
    """Codes, scales and zero points equal onnxruntime's own block quantization (its C++ kernels)."""
    from onnxruntime.capi import _pybind_state as ort_c

    n_blocks = 3
    padded = np.pad(W, ((0, n_blocks * 32 - K), (0, 0)))
    packed = np.zeros((N, n_blocks, 32 * bits // 8), np.uint8)
    zero = np.zeros((N, -(-n_blocks * bits // 8)), np.uint8)
    scales = np.zeros((N, n_blocks), np.float32)
    fn = ort_c.quantize_matmul_4bits if bits == 4 else ort_c.quantize_matmul_8bits
    fn(packed, padded, scales, zero, 32, N, n_blocks * 32, symmetric)
    codes, our_scales, our_zero = quantize_blocks(W, bits, 32, symmetric)
    np.testing.assert_array_equal(pack_codes(codes, bits), packed)
    np.testing.assert_array_equal(our_scales, scales)
    if not symmetric:
        np.testing.assert_array_equal(pack_codes(our_zero, bits, pad=1 << (bits - 1)), zero)


@pytest.mark.parametrize("bits", [4, 8])
def test_gather_block_quantized(bits):
    """An embedding table [50, 80] (80: two blocks and a half) gathered by rows."""
    table = randn(50, K)
    nodes = [oh.make_node("Gather", ["table", "ids"], ["y"], axis=0)]
    model = make_model(nodes, [("ids", onnx.TensorProto.INT64, ["b", "s"])], [("y", FLOAT, ["b", "s", K])],
                       [("table", table)])
    report = []
    quantized, count = apply_rule(model, lambda m: quantize_gathers(m, bits=bits, report=report))
    assert count == 1 and op_types(quantized) == {"GatherBlockQuantized": 1}
    codes, scales, zero = quantize_blocks(table, bits, 32, axis=1)
    dequantized = ((codes - zero[..., None].astype(np.float32)) * scales[..., None]).reshape(50, -1)[:, :K]
    assert np.all(np.abs(dequantized - table) <= np.repeat(scales / 2, 32, axis=1)[:, :K] * (1 + 1e-5) + 1e-7)
    ids = np.array([[0, 49, 7], [7, 3, 3]], np.int64)
    (got,) = run(quantized, {"ids": ids})
    np.testing.assert_allclose(got, dequantized[ids], atol=1e-6)
    (entry,) = report
    assert entry.op_type == "GatherBlockQuantized" and entry.bytes_before == table.nbytes
    assert entry.bytes_after == 50 * K * bits // 8 + scales.nbytes + 50 * 3 * bits // 8 + (50 * 3 * bits // 4) % 2


def test_what_is_not_quantized():
    """A weight computed at run time, a 1D input or a float64 weight stay MatMuls."""
    nodes = [oh.make_node("MatMul", ["x", "w_in"], ["y"]), oh.make_node("MatMul", ["v", "W"], ["z"]),
             oh.make_node("MatMul", ["d", "W64"], ["t"])]
    model = make_model(
        nodes,
        [("x", FLOAT, ["a", K]), ("w_in", FLOAT, [K, N]), ("v", FLOAT, [K]), ("d", onnx.TensorProto.DOUBLE, ["a", K])],
        [("y", FLOAT, ["a", N]), ("z", FLOAT, [N]), ("t", onnx.TensorProto.DOUBLE, ["a", N])],
        [("W", W), ("W64", W.astype(np.float64))],
    )
    _, count = apply_rule(model, quantize_matmuls)
    assert count == 0


def test_options_errors():
    model = _matmul_model(bias=False)
    with pytest.raises(ValueError, match="Unknown quantize='int3'"):
        fx2onnx.optimize(model, level="onnxruntime", quantize="int3")
    with pytest.raises(ValueError, match="block_size=24 is not valid"):
        fx2onnx.optimize(model, level="onnxruntime", quantize="int4", block_size=24)
    for level in ("default", "opset23"):
        with pytest.raises(ValueError, match="use level='onnxruntime'"):
            fx2onnx.optimize(model, level=level, quantize="int4")
    torch_model = torch.nn.Linear(4, 4)
    with pytest.raises(ValueError, match="use optimize='onnxruntime', not True"):
        fx2onnx.to_onnx(torch_model, (torch.randn(2, 4),), quantize="int8")
    with pytest.raises(ValueError, match="Unknown quantize='int2'"):
        fx2onnx.to_onnx(torch_model, (torch.randn(2, 4),), optimize="onnxruntime", quantize="int2")


def test_optimize_report():
    model = _matmul_model(bias=True)
    quantized, report = fx2onnx.optimize(model, level="onnxruntime", quantize="int4", block_size=16, report=True)
    assert report.matches("quantize_int4") == 1 and report.op_types == {"MatMulNBits": 1}
    (entry,) = report.quantized
    assert entry.block_size == 16 and entry.shape == (K, N)
    assert "quantized 1 weight(s)" in str(report) and "[80x24]" in str(report)
    x = randn(2, 3, K)
    _, scales, _ = quantize_blocks(W, 4, 16)
    bound = np.abs(x) @ np.repeat(scales / 2, 16, axis=1)[:, :K].T
    assert np.all(np.abs(run(quantized, {"x": x})[0] - run(model, {"x": x})[0]) <= bound * (1 + 1e-4) + 1e-4)


# ---------------------------------------------------------------- the tiny Llama

@pytest.fixture(scope="module")
def tiny_llama():
    from fx2onnx.zoo import get_tiny_model

    # hidden 64 (two blocks of 32), vocab 256, two layers
    return get_tiny_model("llama", with_cache=True, attn_implementation="sdpa", num_hidden_layers=2, hidden_size=64,
                          intermediate_size=96, num_attention_heads=4, num_key_value_heads=2, vocab_size=256)


@pytest.fixture(scope="module")
def llama_onnx(tiny_llama):
    with fx2onnx.torch_export_patches(patch_transformers=True):
        return fx2onnx.to_onnx(tiny_llama.model, (), copy.deepcopy(tiny_llama.inputs),
                               dynamic_shapes=tiny_llama.dynamic_shapes, optimize="onnxruntime")


def _logits(onx: onnx.ModelProto, tiny, inputs) -> np.ndarray:
    from fx2onnx.validation import make_feeds

    import onnxruntime

    sess = onnxruntime.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, make_feeds(sess, (), copy.deepcopy(inputs)))[0]


def _eager_logits(tiny, inputs) -> np.ndarray:
    with torch.no_grad():
        return tiny.model(**copy.deepcopy(inputs)).logits.numpy()


# max |logit difference| from float32 allowed (the logits of this random model spread over about +-1)
LOGIT_BOUND = {"int8": 0.02, "int4": 0.25}


@pytest.mark.parametrize("quantize", [pytest.param("int8", marks=pytest.mark.slow), "int4"])
def test_tiny_llama_quantized(tiny_llama, quantize):
    with fx2onnx.torch_export_patches(patch_transformers=True):
        onx = fx2onnx.to_onnx(tiny_llama.model, (), copy.deepcopy(tiny_llama.inputs),
                              dynamic_shapes=tiny_llama.dynamic_shapes, optimize="onnxruntime", quantize=quantize)
    ops = op_types(onx)
    # 2 layers x 7 projections + lm_head, none left in float
    assert ops["MatMulNBits"] == 15 and "MatMul" not in ops and ops["Gather"] >= 1, ops
    for inputs in (tiny_llama.inputs, tiny_llama.inputs2):
        expected = _eager_logits(tiny_llama, inputs)
        got = _logits(onx, tiny_llama, inputs)
        assert got.shape == expected.shape
        diff = np.abs(got - expected)
        assert diff.max() < LOGIT_BOUND[quantize], (quantize, diff.max(), diff.mean())
        # the greedy token (teacher forced: every position) mostly the same
        agreement = (got.argmax(-1) == expected.argmax(-1)).mean()
        assert agreement >= (0.95 if quantize == "int8" else 0.8), agreement


@pytest.mark.slow
@pytest.mark.parametrize("bits", [4, 8])
def test_same_accuracy_as_onnxruntime_quantizer(tiny_llama, llama_onnx, bits):
    """onnxruntime's MatMulNBitsQuantizer (asymmetric, block 32, accuracy level 4 as ours) on the same
    float model gives the same codes, scales and zero points, so the same logits."""
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    ours = fx2onnx.optimize(llama_onnx, level="onnxruntime", quantize=f"int{bits}")
    config = DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=False, bits=bits, accuracy_level=4)
    quantizer = MatMulNBitsQuantizer(copy.deepcopy(llama_onnx), algo_config=config)
    quantizer.process()
    theirs = quantizer.model.model
    assert op_types(theirs)["MatMulNBits"] == op_types(ours)["MatMulNBits"] == 15

    def blocks(onx):
        inits = {i.name: onnx.numpy_helper.to_array(i) for i in onx.graph.initializer}
        nodes = sorted((n for n in onx.graph.node if n.op_type == "MatMulNBits"), key=lambda n: n.input[0] + n.output[0])
        return [[inits[name].tobytes() for name in n.input[1:4]] for n in nodes]

    assert blocks(ours) == blocks(theirs)
    inputs = tiny_llama.inputs2
    expected = _eager_logits(tiny_llama, inputs)
    got, reference = _logits(ours, tiny_llama, inputs), _logits(theirs, tiny_llama, inputs)
    np.testing.assert_allclose(got, reference, atol=1e-5)
    ours_diff, theirs_diff = np.abs(got - expected), np.abs(reference - expected)
    assert abs(ours_diff.max() - theirs_diff.max()) < 1e-5 and abs(ours_diff.mean() - theirs_diff.mean()) < 1e-6


@pytest.mark.slow
def test_tiny_llama_quantized_embeddings(tiny_llama, llama_onnx):
    quantized, report = fx2onnx.optimize(llama_onnx, level="onnxruntime", quantize="int4", quantize_embeddings=True,
                                         report=True)
    assert report.op_types["GatherBlockQuantized"] == 1 and report.op_types["MatMulNBits"] == 15
    (embedding,) = (q for q in report.quantized if q.op_type == "GatherBlockQuantized")
    assert embedding.shape == (256, 64) and embedding.bytes_after < embedding.bytes_before / 5
    assert quantized.ByteSize() < llama_onnx.ByteSize() / 3.5  # 4.5 bits a weight, and the graph
    expected = _eager_logits(tiny_llama, tiny_llama.inputs2)
    assert np.abs(_logits(quantized, tiny_llama, tiny_llama.inputs2) - expected).max() < LOGIT_BOUND["int4"]
    with pytest.raises(ValueError, match="quantize_embeddings=True needs quantize"):
        fx2onnx.optimize(llama_onnx, level="onnxruntime", quantize_embeddings=True)


@pytest.mark.parametrize("symmetric", [False, pytest.param(True, marks=pytest.mark.slow)])
@pytest.mark.parametrize("quantize", [pytest.param("int8", marks=pytest.mark.slow), "int4"])
def test_tied_head_and_embedding_quantized(quantize, symmetric):
    """Tied embeddings: the head reads Transpose(table), the table shared with the embedding's
    Gather; both are quantized, no float table is left, the logits stay within the bound."""
    from fx2onnx.zoo import get_tiny_model

    tiny = get_tiny_model("llama", with_cache=True, attn_implementation="sdpa", num_hidden_layers=2, hidden_size=64,
                          intermediate_size=96, num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                          tie_word_embeddings=True)
    assert tiny.model.lm_head.weight is tiny.model.model.embed_tokens.weight
    with fx2onnx.torch_export_patches(patch_transformers=True):
        onx = fx2onnx.to_onnx(tiny.model, (), copy.deepcopy(tiny.inputs), dynamic_shapes=tiny.dynamic_shapes,
                              optimize="onnxruntime", quantize=quantize, quantize_symmetric=symmetric)
    ops = op_types(onx)
    assert ops["MatMulNBits"] == 15 and ops["GatherBlockQuantized"] == 1, ops
    assert "MatMul" not in ops and "Gather" not in ops and "Transpose" not in ops, ops
    floats = [i.name for i in onx.graph.initializer if list(i.dims) in ([256, 64], [64, 256])
              and i.data_type == onnx.TensorProto.FLOAT]
    assert not floats, floats  # the float table is gone
    # one copy of the table's blocks: the Gather reads the head's codes, scales and zero points
    head = next(n for n in onx.graph.node if n.op_type == "MatMulNBits" and n.input[1].startswith(
        next(i.name for i in onx.graph.initializer if len(i.dims) == 3 and i.dims[0] == 256)))
    gather = next(n for n in onx.graph.node if n.op_type == "GatherBlockQuantized")
    reshape = next(n for n in onx.graph.node if gather.input[0] in n.output)
    assert reshape.op_type == "Reshape" and reshape.input[0] == head.input[1], (reshape, head)
    assert list(gather.input[2:]) == list(head.input[2:4]), (gather.input, head.input)
    stored = 2 if symmetric else 3  # codes, scales (and zero points)
    assert sum(1 for i in onx.graph.initializer if i.dims and i.dims[0] == 256) == stored
    for inputs in (tiny.inputs, tiny.inputs2):
        diff = np.abs(_logits(onx, tiny, inputs) - _eager_logits(tiny, inputs))
        assert diff.max() < LOGIT_BOUND[quantize], (quantize, diff.max())
