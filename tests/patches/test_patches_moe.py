"""The grouped matmul of transformers' mixture-of-experts layers, patched: same results, exportable."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from transformers.integrations import moe  # noqa: E402

from fx2onnx import to_onnx, torch_export_patches, validate  # noqa: E402
from fx2onnx.patches.moe_fixes import _make_grouped_mm  # noqa: E402


def _reference(x, w, offs):
    out, start = torch.zeros(x.shape[0], w.shape[2]), 0
    for i, end in enumerate(offs.tolist()):
        out[start:end] = x[start:end] @ w[i]
        start = end
    return out


@pytest.mark.parametrize("offs", [[3, 3, 7, 10], [0, 0, 0, 10], [10, 10, 10, 10], [2, 5, 8, 10]])
def test_same_product(offs):
    torch.manual_seed(0)
    x, w = torch.randn(10, 8), torch.randn(4, 8, 12)
    offs = torch.tensor(offs, dtype=torch.int32)
    patched = _make_grouped_mm(moe._grouped_mm)
    torch.testing.assert_close(patched(x, w, offs), _reference(x, w, offs))


def test_exported_with_dynamic_tokens():
    class Experts(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(4, 8, 12))

        def forward(self, x, expert):
            expert, perm = torch.sort(expert)
            offs = torch.cumsum(torch.nn.functional.one_hot(expert, 4).sum(0), 0).to(torch.int32)
            return moe._grouped_mm(x[perm], self.weight, offs)

    torch.manual_seed(1)
    model = Experts()
    x, expert = torch.randn(10, 8), torch.randint(0, 4, (10,))
    with torch_export_patches(patch_transformers=True):
        onx = to_onnx(model, (x, expert), dynamic_shapes=({0: "tokens"}, {0: "tokens"}))
    assert "grouped_mm" not in str([n.op_type for n in onx.graph.node])
    x2, expert2 = torch.randn(13, 8), torch.randint(0, 4, (13,))
    assert validate(onx, model, (x2, expert2)).ok
