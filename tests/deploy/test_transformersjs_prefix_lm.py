"""PaliGemma, a prefix language model, in transformers.js: its prompt (the image's features and the text) attends to
itself in both directions, as transformers runs the processor's ``token_type_ids`` of 0, though transformers.js
feeds its decoder embeddings only (:func:`fx2onnx.deploy.transformersjs_split.prefix_mask`); the folder written by
``export`` generates transformers' greedy tokens in transformers.js (Node)."""

from __future__ import annotations

import pytest
import torch
import transformers

from fx2onnx.deploy import export_folder
from fx2onnx.inputs.tasks import get_task_architecture, tiny_task_model
from fx2onnx.inputs.vlm_inputs import image_text_inputs
from fx2onnx.testing.vlm_folder import scaled_random_model
from test_speech_generic import transformersjs_seq2seq


@pytest.mark.slow
def test_paligemma_prompt_attends_both_ways_in_transformersjs(tmp_path):
    _, config = tiny_task_model(get_task_architecture("image-text-to-text", "paligemma"))
    model = scaled_random_model(transformers.PaliGemmaForConditionalGeneration, config, seed=1, scale=3.0)
    model.save_pretrained(tmp_path / "paligemma")
    result = export_folder(tmp_path / "paligemma", tmp_path / "onnx")
    assert result.ok, result.check_lines()

    inputs, _ = image_text_inputs(model, config, batch=1)
    inputs = {k: v for k, v in inputs.items() if k in ("input_ids", "attention_mask", "pixel_values")}
    model.generation_config.pad_token_id = 0
    with torch.no_grad():
        # the processor's token_type_ids: 0 on the whole prompt, its prefix
        expected = model.generate(**inputs, token_type_ids=torch.zeros_like(inputs["input_ids"]), max_new_tokens=10,
                                  do_sample=False).tolist()
        causal = model.generate(**inputs, max_new_tokens=10, do_sample=False).tolist()
    prompt = inputs["input_ids"].shape[1]
    assert len(set(expected[0][prompt:])) > 3  # the tokens vary: a real check
    assert causal != expected  # the prompt attending both ways changes the tokens
    got = transformersjs_seq2seq(str(tmp_path / "onnx"), {k: v.tolist() for k, v in inputs.items()}, 10, tmp_path,
                                 client="transformersjs_image_text.mjs")
    assert got == expected
