"""``to_onnx(..., patches="auto")``: a transformers model exports on the first try, outside
``torch_export_patches``; ``patches=False`` opts out; nothing is patched twice."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

import transformers  # noqa: E402

import fx2onnx  # noqa: E402
from fx2onnx.convert.errors import UnsupportedOpError  # noqa: E402
from fx2onnx.patches.auto import auto_patches, uses_transformers  # noqa: E402
from fx2onnx.patches.context import active_patches  # noqa: E402

_DECODER = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=1,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
)
_IDS = {"input_ids": {0: "batch", 1: "seq"}}


def _ids(batch: int, seq: int, seed: int) -> dict[str, torch.Tensor]:
    return {"input_ids": torch.randint(3, 64, (batch, seq), generator=torch.Generator().manual_seed(seed))}


def _mixtral(**overrides) -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.MixtralConfig(**_DECODER, num_local_experts=4, num_experts_per_tok=2, **overrides)
    return transformers.MixtralForCausalLM(config).eval()


def _llama(**overrides) -> torch.nn.Module:
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**_DECODER, **overrides)).eval()


def _granitemoe(**overrides) -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.GraniteMoeConfig(**_DECODER, num_local_experts=4, num_experts_per_tok=2, **overrides)
    return transformers.GraniteMoeForCausalLM(config).eval()


def _mamba(**overrides) -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.MambaConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, state_size=4, **overrides)
    return transformers.MambaForCausalLM(config).eval()


def _check(onx, model, batch: int, seq: int) -> None:
    report = fx2onnx.validate(onx, model, (), _ids(batch, seq, seed=batch * 10 + seq), atol=1e-4)
    assert report.ok, report


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(_mixtral, marks=pytest.mark.slow),
        _llama,
        pytest.param(_granitemoe, marks=pytest.mark.slow),
        pytest.param(_mamba, marks=pytest.mark.slow),
    ],
    ids=["mixtral", "llama_use_cache", "granitemoe", "mamba"],
)
def test_plain_to_onnx_exports_a_transformers_model(make):
    model = make()
    assert model.config.use_cache  # the default: the output holds a DynamicCache
    onx = fx2onnx.to_onnx(model, (), _ids(2, 5, seed=0), dynamic_shapes=_IDS)
    assert not any(n.domain.startswith("transformers") for n in onx.graph.node)
    _check(onx, model, 2, 5)
    _check(onx, model, 3, 7)
    # the patches are restored after the export
    assert active_patches() == {"patch_torch": False, "patch_transformers": False, "patch_timm": False, "patch_diffusers": False,
                              "patch_torchvision": False}


def test_patches_false_opts_out():
    with pytest.raises(fx2onnx.ExportError, match="DynamicCache"):
        fx2onnx.to_onnx(_llama(), (), _ids(2, 5, seed=0), dynamic_shapes=_IDS, patches=False)


@pytest.mark.slow
def test_custom_op_of_transformers_names_the_patch():
    model = _mixtral(use_cache=False)
    with pytest.raises(UnsupportedOpError, match="grouped_mm_fallback") as info:
        fx2onnx.to_onnx(model, (), _ids(2, 5, seed=0), dynamic_shapes=_IDS, patches=False)
    message = str(info.value)
    assert "custom operator of transformers" in message
    assert "patch_transformers=True" in message and "patches='auto'" in message


def test_inside_explicit_patches_nothing_is_patched_twice():
    model = _llama()
    with fx2onnx.torch_export_patches(patch_transformers=True):
        with auto_patches("auto", model) as applied:
            assert applied == []
        onx = fx2onnx.to_onnx(model, (), _ids(2, 5, seed=0), dynamic_shapes=_IDS)
    _check(onx, model, 3, 4)
    # an enclosing context patching torch only: the transformers patches are added, not the torch ones
    with fx2onnx.torch_export_patches(patch_transformers=False):
        with auto_patches("auto", model) as applied:
            assert applied == ["patch_transformers"]
            assert active_patches() == {"patch_torch": True, "patch_transformers": True, "patch_timm": False, "patch_diffusers": False,
                                      "patch_torchvision": False}
        assert active_patches() == {"patch_torch": True, "patch_transformers": False, "patch_timm": False, "patch_diffusers": False,
                                  "patch_torchvision": False}


def test_detection():
    model = _llama()
    assert uses_transformers(model)
    # a module holding a transformers layer
    assert uses_transformers(torch.nn.Sequential(model.model.layers[0].mlp))
    assert not uses_transformers(torch.nn.Linear(2, 2), (torch.randn(1, 2),))
    with auto_patches("auto", torch.nn.Linear(2, 2)) as applied:
        assert applied == []
    with auto_patches(True, torch.nn.Linear(2, 2)) as applied:
        assert applied == ["patch_torch", "patch_transformers", "patch_timm", "patch_diffusers", "patch_torchvision"]
    with pytest.raises(ValueError, match="patches must be"):
        fx2onnx.to_onnx(torch.nn.Linear(2, 2), (torch.randn(1, 2),), patches="yes")
