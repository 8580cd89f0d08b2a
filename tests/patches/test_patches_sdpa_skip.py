"""PaliGemma (and Gemma with bidirectional attention) under SDPA: the mask eager skips, exported.

Eager SDPA skips the causal mask when nothing is padded and the attention modules, not causal
(``use_bidirectional_attention=True``, PaliGemma's default), attend to every token; torch.export
kept the causal mask: the program differed from eager by 3.7 on a tiny PaliGemma, on the
inputs it was exported with. The patch returns ``mask | skip`` (:mod:`fx2onnx.patches.sdpa_skip`).
"""

from __future__ import annotations

import copy

import pytest
import torch

import fx2onnx

transformers = pytest.importorskip("transformers")

from fx2onnx.inputs.tasks import get_task_architecture, tiny_task_model  # noqa: E402
from fx2onnx.patches.caches import register_cache_serialization, unregister_cache_serialization  # noqa: E402


@pytest.fixture(scope="module")
def paligemma():
    model, config = tiny_task_model(get_task_architecture("image-text-to-text", "paligemma"))
    model.config._attn_implementation = "sdpa"
    model.set_attn_implementation("sdpa")
    assert config.text_config.use_bidirectional_attention is True
    return model, config


def _inputs(config, batch: int, text: int, seed: int, padded: bool = False) -> dict[str, torch.Tensor]:
    """image tokens first, then ``text`` random text tokens; left padding on the first row if ``padded``."""
    g = torch.Generator().manual_seed(seed)
    n_image = config.text_config.num_image_tokens
    ids = torch.randint(3, config.image_token_id, (batch, n_image + text), generator=g)
    ids[:, :n_image] = config.image_token_id
    mask = torch.ones_like(ids)
    if padded:
        mask[0, -2:] = 0
    size = config.vision_config.image_size
    pixels = torch.randn(batch, 3, size, size, generator=g)
    return dict(input_ids=ids, attention_mask=mask, pixel_values=pixels)


def _logits(model, inputs):
    with torch.no_grad():
        return model(**copy.deepcopy(inputs), use_cache=False).logits


def test_exported_program_matches_eager_without_padding(paligemma):
    model, config = paligemma
    inputs = _inputs(config, 2, 5, seed=0)
    expected = _logits(model, inputs)
    done = register_cache_serialization()
    try:
        with fx2onnx.torch_export_patches(patch_transformers=True):
            ep = torch.export.export(model, (), dict(inputs, use_cache=False), strict=False)
    finally:
        unregister_cache_serialization(done)
    got = _logits(ep.module(), inputs)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def test_patched_mask_function_changes_nothing_in_eager(paligemma):
    model, config = paligemma
    for padded in (False, True):
        inputs = _inputs(config, 2, 5, seed=1, padded=padded)
        expected = _logits(model, inputs)
        with fx2onnx.torch_export_patches(patch_transformers=True):
            got = _logits(model, inputs)
        torch.testing.assert_close(got, expected, atol=0, rtol=0)


@pytest.mark.slow
def test_onnx_follows_eager_for_other_sizes_and_padding(paligemma):
    model, config = paligemma
    inputs = _inputs(config, 2, 5, seed=2)
    ds = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}, "pixel_values": {0: "batch"}}
    onx = fx2onnx.to_onnx(model, (), dict(inputs, use_cache=False), dynamic_shapes=dict(ds, use_cache=None))
    # the export's inputs, other values and sizes without padding (eager: every token attends to every
    # token), then padded (eager builds the causal mask)
    for case in (inputs, _inputs(config, 3, 8, seed=3), _inputs(config, 3, 8, seed=4, padded=True)):
        report = fx2onnx.validate(onx, model, (), dict(case, use_cache=False), atol=1e-4, rtol=1e-3)
        assert report.ok, report
    # the two eager answers differ: the test would not see a frozen branch otherwise
    unpadded, padded = _inputs(config, 3, 8, seed=4), _inputs(config, 3, 8, seed=4, padded=True)
    assert (_logits(model, unpadded)[0, :4] - _logits(model, padded)[0, :4]).abs().max() > 1e-2


def test_without_the_patch_the_capture_check_names_the_attention(paligemma, monkeypatch):
    """What to_onnx said before the patch: the capture check (issue 36 item 1) on the real case."""
    import fx2onnx.patches.transformers_fixes as fixes
    from fx2onnx.convert.capture_check import CaptureMismatchError

    monkeypatch.setattr(fixes, "MASK_FUNCTIONS", ())
    model, config = paligemma
    with pytest.raises(CaptureMismatchError, match=r"\['logits'\]") as info:
        fx2onnx.to_onnx(model, (), dict(_inputs(config, 2, 5, seed=0), use_cache=False))
    assert "self_attn" in str(info.value), str(info.value)
