"""``aten._is_all_true`` / ``aten._is_any_true`` (what ``torch._check_tensor_all`` and
``torch._is_all_true`` leave in the graph), and ``any`` / ``all`` over no value."""

from __future__ import annotations

import pytest
import torch
from helpers import check_export

import fx2onnx


class Flags(torch.nn.Module):
    def forward(self, x):
        positive = x > 0
        return (
            torch.ops.aten._is_all_true(positive),
            torch.ops.aten._is_any_true(positive),
            torch.any(positive),
            torch.all(positive),
            torch.any(positive, dim=0),
            torch.all(positive, dim=1, keepdim=True),
        )


def test_flags_dynamic_and_empty():
    x = torch.randn(3, 4)
    onx = check_export(
        Flags(), (x,), dynamic_shapes=({0: "n", 1: "m"},), inputs2=((torch.randn(5, 2),), None)
    )
    # all true, all false, and no value at all (any is false, all is true)
    for y in (torch.ones(4, 3), -torch.ones(2, 5), torch.zeros(0, 3), torch.zeros(2, 0)):
        report = fx2onnx.validate(onx, Flags(), (y,))
        assert report.ok, (tuple(y.shape), report.details)


class Checked(torch.nn.Module):
    """torch._check_tensor_all: _is_all_true, then item and an assertion torch.export checks."""

    def forward(self, x, mask):
        torch._check_tensor_all(mask.sum(-1) >= 0)
        return x.masked_fill(mask, 0.0) * 2


def test_check_tensor_all():
    x, mask = torch.randn(2, 5), torch.rand(2, 5) > 0.5
    ep = torch.export.export(Checked(), (x, mask))
    assert any(n.target is torch.ops.aten._is_all_true.default for n in ep.graph.nodes)
    ds = ({0: "batch", 1: "seq"}, {0: "batch", 1: "seq"})
    check_export(Checked(), (x, mask), dynamic_shapes=ds, inputs2=((torch.randn(3, 7), torch.rand(3, 7) > 0.5), None))


@pytest.mark.slow
def test_gemma3_for_conditional_generation():
    """The placeholder mask check of Gemma 3 (``get_placeholder_mask``) leaves ``_is_all_true``."""
    import pytest

    pytest.importorskip("transformers")
    from fx2onnx.zoo.vlm import one_pass_inputs, tiny_gemma3

    vlm = tiny_gemma3(num_layers=1)
    ds = {
        "input_ids": {0: "batch", 1: "seq"},
        "pixel_values": {0: "images"},
        "attention_mask": {0: "batch", 1: "seq"},
        "token_type_ids": {0: "batch", 1: "seq"},
    }
    onx = fx2onnx.to_onnx(vlm.model, (), one_pass_inputs(vlm, 2, 1, 3, seed=0), dynamic_shapes=ds)
    for batch, text_tokens in [(2, 3), (3, 2), (1, 5)]:
        report = fx2onnx.validate(onx, vlm.model, (), one_pass_inputs(vlm, batch, 1, text_tokens, seed=1), atol=1e-4)
        assert report.ok, (batch, text_tokens, report)
