"""An encoder-decoder classifier (BART's: its decoder starts from the input ids, one pass) exports from a folder as a
single-pass model and runs as transformers' text-classification pipeline does; a generator (BART's conditional
generation class) fills a mask in one pass as transformers' fill-mask pipeline."""

from __future__ import annotations

import pytest
import torch
import transformers

import fx2onnx
from fx2onnx.deploy import export_folder
from fx2onnx.testing.encoder_folder import SPECIAL, bert_tokenizer

SENTENCES = ["the cat sat on the mat", "paris is the capital of france, a city by the sea"]


def _bart(folder, architecture: str) -> None:
    tokenizer = bert_tokenizer(("input_ids", "attention_mask"))
    config = transformers.BartConfig(
        vocab_size=len(tokenizer), d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
        pad_token_id=0, eos_token_id=SPECIAL.index("[SEP]"), bos_token_id=SPECIAL.index("[CLS]"),
        decoder_start_token_id=SPECIAL.index("[SEP]"), num_labels=3, init_std=0.2, architectures=[architecture])
    torch.manual_seed(0)
    getattr(transformers, architecture)(config).eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)


@pytest.mark.slow
def test_bart_classifier_folder_equals_transformers(tmp_path):
    folder, out = str(tmp_path / "bart"), str(tmp_path / "out")
    _bart(folder, "BartForSequenceClassification")
    export_folder(folder, out)
    got = fx2onnx.pipeline(out)(SENTENCES)
    expected = transformers.pipeline("text-classification", model=folder, dtype=torch.float32)(SENTENCES)
    assert [g["label"] for g in got] == [e["label"] for e in expected]
    assert all(abs(g["score"] - e["score"]) < 1e-4 for g, e in zip(got, expected))
    # the generator filling a mask: one pass too (transformers' fill-mask pipeline reads the logits at the mask)
    generator = str(tmp_path / "generator")
    _bart(generator, "BartForConditionalGeneration")
    export_folder(generator, str(tmp_path / "out2"), task="fill-mask")
    masked = ["the cat sat on the [MASK] .", "paris is the [MASK] of france"]
    got = fx2onnx.pipeline(str(tmp_path / "out2"))(masked)
    expected = transformers.pipeline("fill-mask", model=generator, dtype=torch.float32)(masked)
    assert [[g["token_str"] for g in row] for row in got] == [[e["token_str"] for e in row] for row in expected]
    assert all(abs(g["score"] - e["score"]) < 1e-4 for gs, es in zip(got, expected) for g, e in zip(gs, es))
    with pytest.raises(ValueError, match="its head is one of"):  # not an embedder
        export_folder(generator, str(tmp_path / "out3"), task="feature-extraction")
