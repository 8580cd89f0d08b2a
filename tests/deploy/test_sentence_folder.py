"""A sentence-transformers folder (``modules.json``, ``1_Pooling``, ``2_Normalize``) exported with no flag: one model
giving ``token_embeddings`` and ``sentence_embedding`` (its pooling and normalization in the graph, as optimum exports
it), run by ``fx2onnx.pipeline`` / ``python -m fx2onnx run``: the embeddings sentence-transformers computes (its
``encode`` when the package is installed, and always the pooling by its definition over transformers' outputs)."""

import json
import os

import numpy as np
import pytest

import fx2onnx
from fx2onnx.__main__ import main
from fx2onnx.deploy import export_folder
from fx2onnx.testing.encoder_folder import write_sentence_folder

TEXTS = ["the cat sat on the mat", "paris is the capital of france, a city by the sea", "good night"]


def _pooled_by_definition(checkpoint, texts, modes, normalize):
    """sentence-transformers' pooling written out over transformers' last hidden state (right padding)."""
    import torch
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
    model = transformers.AutoModel.from_pretrained(checkpoint).eval()
    encoded = tokenizer(texts, padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        tokens = model(**encoded).last_hidden_state.numpy()
    mask = encoded["attention_mask"].numpy()[..., None].astype(np.float32)
    lengths = mask.sum(axis=1)
    by_mode = {"mean": (tokens * mask).sum(axis=1) / lengths,
               "mean_sqrt_len_tokens": (tokens * mask).sum(axis=1) / np.sqrt(lengths),
               "cls": tokens[:, 0],
               "max": np.where(mask > 0, tokens, -np.inf).max(axis=1),
               "lasttoken": tokens[np.arange(len(texts)), lengths[:, 0].astype(int) - 1],
               "weightedmean": (tokens * mask * np.arange(1, tokens.shape[1] + 1)[None, :, None]).sum(axis=1)
               / (mask * np.arange(1, tokens.shape[1] + 1)[None, :, None]).sum(axis=1)}
    pooled = np.concatenate([by_mode[m] for m in modes], axis=-1)
    return pooled / np.linalg.norm(pooled, axis=-1, keepdims=True) if normalize else pooled


def _check(tmp_path_factory, modes, normalize):
    root = tmp_path_factory.mktemp("sentence")
    checkpoint = write_sentence_folder(root / "checkpoint", modes, normalize)
    result = export_folder(checkpoint, root / "out")
    assert result.ok and result.task == "feature-extraction", result.check_lines()
    out = str(root / "out")
    piece = json.load(open(os.path.join(out, "fx2onnx.json")))["pieces"]["model"]
    assert piece["outputs"] == ["token_embeddings", "sentence_embedding"]
    assert os.path.isfile(os.path.join(out, "1_Pooling", "config.json"))  # the folder says what it computes
    got = np.asarray(fx2onnx.pipeline(out)(TEXTS))
    expected = _pooled_by_definition(str(checkpoint), TEXTS, modes, normalize)
    assert got.shape == (len(TEXTS), 32 * len(modes))
    np.testing.assert_allclose(got, expected, atol=1e-4)
    try:
        import sentence_transformers
    except ImportError:
        sentence_transformers = None
    if sentence_transformers is not None:
        encoded = sentence_transformers.SentenceTransformer(str(checkpoint), device="cpu").encode(TEXTS)
        np.testing.assert_allclose(got, encoded, atol=1e-4)
    return out, got


@pytest.mark.slow  # sentence-transformers' import and an export: the fast tier holds its budget
def test_sentence_transformers_folder_mean_normalized(tmp_path_factory, tmp_path, capsys):
    out, got = _check(tmp_path_factory, ("mean",), True)
    np.testing.assert_allclose(np.linalg.norm(got, axis=-1), 1.0, atol=1e-5)
    assert main(["run", out, *TEXTS[:2], "--save-dir", str(tmp_path), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed[0] == {"shape": [32], "norm": 1.0}
    np.testing.assert_allclose(np.load(tmp_path / "text_2.npy"), got[1], atol=1e-6)


@pytest.mark.slow
def test_sentence_transformers_folder_every_pooling_mode(tmp_path_factory):
    # the order of the booleans of 1_Pooling/config.json: the order of the concatenation
    _check(tmp_path_factory, ("cls", "max", "mean_sqrt_len_tokens", "weightedmean", "lasttoken"), False)
    # a module this export does not compute: one line
    root = tmp_path_factory.mktemp("dense")
    checkpoint = write_sentence_folder(root / "checkpoint")
    modules = json.load(open(root / "checkpoint" / "modules.json"))
    modules.append({"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"})
    json.dump(modules, open(root / "checkpoint" / "modules.json", "w"))
    with pytest.raises(ValueError, match=r"lists the modules \['Transformer', 'Pooling', 'Normalize', 'Dense'\]"):
        export_folder(checkpoint, root / "out")
