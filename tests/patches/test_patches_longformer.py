"""Longformer and LED: exported with any mask, global tokens included (the capture failed before).

Three fixes: ``torch.div`` of a symbolic size stays a symbolic integer (a torch patch),
the global attention is computed densely (no branch on ``.item()``, no ``nonzero`` sizes)
and the window's chunks are taken with ``unfold``.
"""

from __future__ import annotations

import pytest
import torch

import fx2onnx

transformers = pytest.importorskip("transformers")

from fx2onnx.inputs.discover import get_architecture  # noqa: E402
from fx2onnx.zoo.zoo_inputs import build_zoo_model  # noqa: E402
from fx2onnx.patches.longformer import banded_context, banded_key_bias, banded_scores  # noqa: E402


def _masks(mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """attention masks: local only, with global tokens (2), with padding (0) and global tokens."""
    with_global = mask.clone()
    with_global[:, 0] = 2
    with_global[0, 3] = 2
    padded = mask.clone()
    padded[0, -2:] = 0
    padded[-1, 1] = 2
    return {"local": mask, "global": with_global, "padding and global": padded}


@pytest.mark.parametrize("name", ["longformer", "led"])
def test_dense_global_attention_is_the_original(name):
    zoo = build_zoo_model(get_architecture(name), with_cache=False)
    inputs = zoo.copy_inputs(1)
    for case, mask in _masks(inputs["attention_mask"]).items():
        kwargs = dict(inputs, attention_mask=mask)
        with torch.no_grad():
            expected = zoo.model(**kwargs).logits
            with fx2onnx.torch_export_patches(patch_transformers=True):
                got = zoo.model(**kwargs).logits
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5, msg=case)


def _inputs(batch: int, seq: int, vocab: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seq)
    ids = torch.randint(3, vocab, (batch, seq), generator=generator)
    return {"input_ids": ids, "attention_mask": torch.ones((batch, seq), dtype=torch.int64)}


@pytest.mark.slow
def test_longformer_exports_right_for_global_tokens_and_any_length():
    """Exported on a local-only mask; right on global tokens, padding and other numbers of chunks."""
    zoo = build_zoo_model(get_architecture("longformer"), with_cache=False)
    vocab = zoo.config.vocab_size
    dynamic = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
    with pytest.raises(Exception, match="data-dependent"), torch.no_grad():
        fx2onnx.to_onnx(zoo.model, (), kwargs=_inputs(2, 13, vocab), dynamic_shapes=dynamic, patches=False)
    with fx2onnx.torch_export_patches(patch_transformers=True), torch.no_grad():
        onx = fx2onnx.to_onnx(zoo.model, (), kwargs=_inputs(2, 13, vocab), dynamic_shapes=dynamic)
    # window 8: 7, 16 and 30 tokens are 1, 2 and 4 chunks (13 was 2, padded)
    for batch, seq in ((3, 7), (1, 16), (2, 30)):
        inputs = _inputs(batch, seq, vocab)
        for case, mask in _masks(inputs["attention_mask"]).items():
            report = fx2onnx.validate(onx, zoo.model, (), dict(inputs, attention_mask=mask), atol=1e-4)
            assert report.ok, (batch, seq, case, report)


@pytest.mark.parametrize(("window", "chunks", "batch", "heads", "dim"),
                         [(4, 3, 2, 2, 5), (8, 1, 1, 3, 4), (2, 5, 3, 1, 2)])
def test_banded_window_is_the_original_sliding_chunks(window, chunks, batch, heads, dim):
    """The sliding window of the patched self-attention equals the original's overlapping chunks (scores,
    masked keys, -inf outside the sequence, probabilities times values), and on a sequence of any length
    equals the first positions of the same sequence padded with masked keys."""
    from transformers.models.longformer.modeling_longformer import LongformerSelfAttention

    config = transformers.LongformerConfig(hidden_size=heads * dim, num_attention_heads=heads,
                                           attention_window=[2 * window])
    attention = LongformerSelfAttention(config, 0)
    generator = torch.Generator().manual_seed(window)
    seq = 2 * window * chunks
    query, key, value = (torch.randn(batch, seq, heads, dim, generator=generator) for _ in range(3))
    bias = torch.randn(batch, seq, generator=generator)
    expected = attention._sliding_chunks_query_key_matmul(query, key, window) + \
        attention._sliding_chunks_query_key_matmul(bias.new_ones(batch, seq, 1, 1), bias[:, :, None, None], window)
    scores = banded_scores(query, key, window) + banded_key_bias(bias, window)[:, :, None, :]
    torch.testing.assert_close(scores, expected)
    probs = torch.softmax(expected, dim=-1)
    torch.testing.assert_close(banded_context(probs, value, window),
                               attention._sliding_chunks_matmul_attn_probs_value(probs, value, window))
    for length in (1, window - 1, window + 1, seq - 1):
        masked = bias.clone()
        masked[:, length:] = -float("inf")
        full = banded_scores(query, key, window) + banded_key_bias(masked, window)[:, :, None, :]
        part = banded_scores(query[:, :length], key[:, :length], window) + \
            banded_key_bias(bias[:, :length], window)[:, :, None, :]
        torch.testing.assert_close(part, full[:, :length])
        probs = torch.softmax(full, dim=-1)
        torch.testing.assert_close(banded_context(probs[:, :length], value[:, :length], window),
                                   banded_context(probs, value, window)[:, :length])


@pytest.mark.slow
@pytest.mark.parametrize("length", [13, 3])
def test_longformer_capture_has_no_copy_and_one_sequence_symbol(length):
    """The capture of the patched Longformer (dynamic batch and sequence): no in-place copy (the original's
    sliding window copied its chunks into place, 12 ``copy_`` per layer at real width, and every one made
    torch re-trace the program to functionalize it), the output as long as the input (one symbol, not
    ``window * ceil(seq / window)``), no condition fixing the number of chunks and the length of the mask
    checked equal to the ids' (two symbols before, the sequence narrowed to ``[1, 767]``); an example shorter
    than the window (one chunk) too: a 4D matmul fixed the number of chunks to 1."""
    config = transformers.LongformerConfig(hidden_size=32, num_attention_heads=2, intermediate_size=64,
                                           num_hidden_layers=2, attention_window=8, max_position_embeddings=128,
                                           vocab_size=100)
    model = transformers.LongformerForMaskedLM(config).eval()
    inputs = _inputs(2, length, config.vocab_size)
    dynamic = {"input_ids": {0: torch.export.Dim.DYNAMIC, 1: torch.export.Dim.DYNAMIC},
               "attention_mask": {0: torch.export.Dim.DYNAMIC, 1: torch.export.Dim.DYNAMIC}}
    # captured as to_onnx captures first (size-oblivious sizes, fx2onnx.convert.capture)
    with fx2onnx.torch_export_patches(patch_transformers=True), torch.no_grad(), \
            torch.fx.experimental._config.patch(backed_size_oblivious=True):
        ep = torch.export.export(model, (), kwargs=inputs, dynamic_shapes=dynamic)
    targets = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    assert targets.count("aten.copy_.default") == 0, targets.count("aten.copy_.default")
    placeholder = next(n for n in ep.graph.nodes if n.op == "placeholder" and n.name == "input_ids")
    output = next(n for n in ep.graph.nodes if n.op == "output").args[0][0]
    assert output.meta["val"].shape[1] == placeholder.meta["val"].shape[1]
    assert str(output.meta["val"].shape[1].node.expr) == str(placeholder.meta["val"].shape[1].node.expr)
    guards = list(ep._guards_code or [])
    assert "L['attention_mask'].size()[1] == L['input_ids'].size()[1]" in guards, guards
    fixed = [g for g in guards if "==" in g and "L['attention_mask'].size()[1] == L['input_ids']" not in g]
    assert not fixed, fixed
    # the one write left (LongformerModel.forward: the global tokens' mask value, an index_put_ into the mask it
    # built) is made out-of-place in the graph: no second trace to functionalize the program
    from fx2onnx.convert.local_functionalize import functionalize_intermediates

    assert functionalize_intermediates(ep) == ["aten.index_put_.default"]
    assert not [n for n in ep.graph.nodes if getattr(getattr(n.target, "_schema", None), "is_mutable", False)]


class Chunks(torch.nn.Module):
    def forward(self, x):
        chunks = torch.div(x.shape[1], 4, rounding_mode="trunc")
        per_chunk = x.view(x.shape[0], chunks, 4).transpose(1, 2).reshape(-1, chunks)
        return per_chunk * (torch.div(x.shape[1], 3, rounding_mode="floor") + 1)


def test_integer_division_of_sizes_stays_symbolic():
    x = torch.randn(2, 16)
    dynamic = ({1: torch.export.Dim("n", min=2, max=64) * 4},)
    with pytest.raises(Exception, match="data-dependent"):
        torch.export.export(Chunks(), (x,), dynamic_shapes=dynamic)
    with fx2onnx.torch_export_patches():
        onx = fx2onnx.to_onnx(Chunks(), (x,), dynamic_shapes=dynamic)
    assert fx2onnx.validate(onx, Chunks(), (torch.randn(2, 20),)).ok
    # eager: integers still give torch's tensor, a negative numerator is truncated as torch does
    with fx2onnx.torch_export_patches():
        assert isinstance(torch.div(7, 2, rounding_mode="trunc"), torch.Tensor)
        assert torch.div(-7, 2, rounding_mode="trunc").item() == -3


class Ite(torch.nn.Module):
    def forward(self, x):
        n = torch.sym_ite(x.shape[0] > 3, x.shape[0], x.shape[0] * 2)
        return x.new_ones(n) * x.sum()


def test_sym_ite_is_a_where():
    x = torch.randn(5)
    onx = fx2onnx.to_onnx(Ite(), (x,), dynamic_shapes=({0: torch.export.Dim.DYNAMIC},))
    for n in (2, 3, 4, 7):
        assert fx2onnx.validate(onx, Ite(), (torch.randn(n),)).ok, n
