"""CANINE's local attention over blocks of characters and its molecule mask without loops nor MaxPool1d: eager's
numbers, several blocks and padded characters, and an export whose sequence length stays dynamic."""

import pytest
import torch

import fx2onnx
from fx2onnx.patches import torch_export_patches

transformers = pytest.importorskip("transformers")


def _model() -> torch.nn.Module:
    config = transformers.CanineConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                       intermediate_size=64, local_transformer_stride=4, num_hash_buckets=64,
                                       num_hash_functions=2)  # blocks of 4 characters: several in a short text
    torch.manual_seed(0)
    return transformers.CanineModel(config).eval()


def _inputs(lengths: tuple[int, ...], longest: int) -> dict[str, torch.Tensor]:
    ids = torch.randint(32, 200, (len(lengths), longest))
    mask = (torch.arange(longest)[None] < torch.tensor(lengths)[:, None]).long()
    return {"input_ids": ids * mask, "attention_mask": mask}


@pytest.mark.slow  # 3 s alone, the patches' setup
def test_patched_canine_equals_eager_over_several_blocks_and_pads():
    model = _model()
    inputs = _inputs((11, 6), 11)  # 3 blocks, one of them padding only in the second text
    with torch.no_grad():
        expected = model(**inputs).last_hidden_state
        with torch_export_patches(patch_transformers=True):
            assert hasattr(transformers.models.canine.modeling_canine.CanineAttention.forward, "__wrapped__")
            got = model(**inputs).last_hidden_state
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


@pytest.mark.slow
def test_exported_canine_keeps_the_sequence_dynamic():
    model = _model()

    class Hidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    inputs = _inputs((11, 6), 11)
    dims = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"}}
    with torch_export_patches(patch_transformers=True) as modificator:
        onx = fx2onnx.to_onnx(Hidden(), (), modificator(dict(inputs)), dynamic_shapes=dims)
    for other in (_inputs((17, 9, 13), 17), _inputs((5,), 5)):
        report = fx2onnx.validate(onx, Hidden(), (), other, atol=1e-4)
        assert report.ok, report
