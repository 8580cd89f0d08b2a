"""A text model whose outputs change with padding (ConvBERT's span convolutions read the pads): the export finds it on
the exported model and writes it in ``fx2onnx.json``; ``run`` then gives the model one text at a time, as transformers'
pipeline does, so a batch of texts of other lengths gives what the pipeline gives."""

import json
import os

import numpy as np
import pytest

import fx2onnx
from fx2onnx.deploy import export_folder
from fx2onnx.testing.encoder_folder import bert_tokenizer

TEXTS = ["the cat sat", "paris is the capital of france, a city by the sea"]


@pytest.mark.slow
def test_a_convbert_folder_runs_padded_batches_as_the_pipeline(tmp_path):
    import torch
    import transformers

    tokenizer = bert_tokenizer()
    config = transformers.ConvBertConfig(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        embedding_size=32, max_position_embeddings=64, pad_token_id=0, initializer_range=0.2,  # logits not tiny
        id2label={0: "no", 1: "yes"}, label2id={"no": 0, "yes": 1})
    torch.manual_seed(0)
    transformers.utils.logging.disable_progress_bar()
    checkpoint = str(tmp_path / "checkpoint")
    transformers.ConvBertForSequenceClassification(config).eval().save_pretrained(checkpoint)
    tokenizer.save_pretrained(checkpoint)
    result = export_folder(checkpoint, tmp_path / "out")
    assert result.ok, result.check_lines()
    metadata = json.load(open(os.path.join(tmp_path, "out", "fx2onnx.json")))
    assert metadata["pieces"]["model"]["padding"] == "per_text"

    ours = fx2onnx.pipeline(tmp_path / "out")
    reference = transformers.pipeline("text-classification", model=checkpoint, dtype=torch.float32)
    got, expected = ours(TEXTS, top_k=2), reference(TEXTS, top_k=2)
    for g, e in zip(got, expected):
        assert [x["label"] for x in g] == [x["label"] for x in e]
        np.testing.assert_allclose([x["score"] for x in g], [x["score"] for x in e], atol=1e-4)
    # the padded batch itself differs: what run avoids
    encoded = ours.processor(TEXTS, padding=True, return_tensors="np")
    padded = ours.session.run(None, {n: encoded[n] for n in ours.input_names})[0]
    alone = ours._run(dict(encoded))
    assert np.abs(padded[0] - alone[0]).max() > 1e-3 and np.abs(padded[1] - alone[1]).max() < 1e-5


@pytest.mark.slow
def test_an_fnet_embedder_keeps_each_texts_own_tokens(tmp_path):
    """FNet takes no attention mask: the embeddings of a batch of texts of other lengths are each text's tokens only,
    as transformers' pipeline gives them (one text at a time)."""
    import torch
    import transformers

    tokenizer = bert_tokenizer(("input_ids", "token_type_ids"))  # no mask, as FNet's tokenizer
    config = transformers.FNetConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2,
                                     intermediate_size=64, max_position_embeddings=64, pad_token_id=0,
                                     architectures=["FNetModel"])
    torch.manual_seed(0)
    transformers.utils.logging.disable_progress_bar()
    checkpoint = str(tmp_path / "checkpoint")
    transformers.FNetModel(config).eval().save_pretrained(checkpoint)
    tokenizer.save_pretrained(checkpoint)
    result = export_folder(checkpoint, tmp_path / "out")
    assert result.ok and result.task == "feature-extraction", result.check_lines()
    got = fx2onnx.pipeline(tmp_path / "out")(TEXTS)
    expected = transformers.pipeline("feature-extraction", model=checkpoint, dtype=torch.float32)(TEXTS)
    assert [np.asarray(g).shape for g in got] == [np.asarray(e).shape for e in expected]
    assert np.asarray(got[0]).shape[1] < np.asarray(got[1]).shape[1]  # the shorter text: no pads
    for g, e in zip(got, expected):
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), atol=1e-4)
