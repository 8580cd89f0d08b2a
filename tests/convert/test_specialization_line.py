"""A dimension declared dynamic that the code makes a constant: the capture error names the line."""

from __future__ import annotations

import inspect

import pytest
import torch

import fx2onnx
from fx2onnx.convert.specializations import dimensions_in, record_specializations


def _line_of(cls: type, marker: str) -> int:
    lines, start = inspect.getsourcelines(cls)
    return start + next(i for i, line in enumerate(lines) if marker in line)


class Branch(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] == 2:  # specializes
            return x * 2
        return x + 1


class Reshape(torch.nn.Module):
    def forward(self, x):
        y = torch.relu(x)
        return y.reshape(8).sum(-1)  # specializes


class Broadcast(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(2, 4))

    def forward(self, x):
        return x + self.table  # specializes


class Outer(torch.nn.Module):
    """The line is in a submodule's forward, one call below the model's."""

    def __init__(self):
        super().__init__()
        self.inner = Reshape()

    def forward(self, x):
        return self.inner(x) * 3


@pytest.mark.parametrize("model", [Branch(), Reshape(), Broadcast(), Outer()], ids=lambda m: type(m).__name__)
def test_error_names_the_line(model):
    with pytest.raises(fx2onnx.ExportError) as info:
        fx2onnx.to_onnx(model, (torch.randn(2, 4),), dynamic_shapes=({0: "batch"},))
    message = str(info.value)
    cls = type(model.inner) if isinstance(model, Outer) else type(model)
    line = _line_of(cls, "# specializes")
    assert f"'batch' (x, axis 0) became the constant 2 at {__file__}:{line} in forward" in message, message
    assert "# specializes" in message  # the code of the line


@pytest.mark.slow
def test_a_library_line_is_named():
    """RT-DETR (transformers) takes its batch size with len(tensor): a Python int (without the
    patch of :mod:`fx2onnx.patches.detr_batch`, which keeps it dynamic)."""
    transformers = pytest.importorskip("transformers")
    backbone = transformers.RTDetrResNetConfig(
        embedding_size=8, hidden_sizes=[8, 16, 24, 32], depths=[1, 1, 1, 1], layer_type="basic",
        out_features=["stage2", "stage3", "stage4"],
    )
    config = transformers.RTDetrConfig(
        backbone_config=backbone, d_model=32, encoder_hidden_dim=32, encoder_in_channels=[16, 24, 32],
        encoder_ffn_dim=64, encoder_layers=1, decoder_layers=1, decoder_ffn_dim=64, num_queries=10, num_labels=3,
        encoder_attention_heads=2, decoder_attention_heads=2, num_denoising=0, decoder_n_points=2,
        decoder_in_channels=[32, 32, 32], use_pretrained_backbone=False, anchor_image_size=None,
    )
    torch.manual_seed(0)
    model = transformers.RTDetrForObjectDetection(config).eval()
    with pytest.raises(fx2onnx.ExportError) as info:
        fx2onnx.to_onnx(model, (), {"pixel_values": torch.randn(2, 3, 64, 64)},
                        dynamic_shapes={"pixel_values": {0: "batch"}}, patches=False)
    message = str(info.value)
    assert "'batch' (pixel_values, axis 0) became the constant 2 at " in message, message
    assert "modeling_rt_detr.py:" in message and "len(" in message, message


def test_recorder_alone():
    with record_specializations() as found:
        torch.export.export(Branch(), (torch.randn(2, 4),))  # static: nothing declared dynamic
        assert found == []
        with pytest.raises(Exception):
            torch.export.export(Branch(), (torch.randn(2, 4),), dynamic_shapes=({0: torch.export.Dim.DYNAMIC},))
    assert [s.value for s in found] == [2] and found[0].code.startswith("if x.shape[0] == 2:")
    assert dimensions_in("L['x'].size()[0] and inputs['y'].shape[2], L['x'].size()[0]") == [("x", 0), ("y", 2)]


class HalfRows(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x).reshape(2, -1).sum(-1)


def test_size_oblivious_capture_keeps_what_holds_for_every_size():
    """Captured with size-oblivious sizes (as torch.onnx.export): ``reshape(2, -1)`` holds for any
    batch (the plain capture made the batch 2), and an example batch of 1 stays dynamic."""
    from fx2onnx.validation import validate

    for example in (2, 1):
        onx = fx2onnx.to_onnx(HalfRows(), (torch.randn(example, 4),), dynamic_shapes=({0: "batch"},))
        for batch in (1, 3, 5):
            assert validate(onx, HalfRows(), (torch.randn(batch, 4),)).ok, (example, batch)


class Squeezed(torch.nn.Module):
    def forward(self, x):
        return x.squeeze(0) * 2


def test_a_size_one_branch_is_not_taken_silently():
    """``squeeze(0)`` removes the axis only when it is 1: a model exported with a batch of 2 says
    so and refuses a batch of 1 instead of returning one axis too many."""
    from fx2onnx.frozen import FrozenInputError, FrozenInputWarning
    from fx2onnx.validation import validate

    with pytest.warns(FrozenInputWarning, match=r"squeeze kept the axis .* x.shape\[0\]"):
        onx = fx2onnx.to_onnx(Squeezed(), (torch.randn(2, 4),), dynamic_shapes=({0: "batch"},))
    assert validate(onx, Squeezed(), (torch.randn(3, 4),)).ok
    with pytest.raises(FrozenInputError, match=r"x.shape\[0\] is 1 but a squeeze"):
        validate(onx, Squeezed(), (torch.randn(1, 4),))


class SqueezeAll(torch.nn.Module):
    def __init__(self, squeeze=torch.squeeze):
        super().__init__()
        self.squeeze = squeeze

    def forward(self, x):
        return self.squeeze(x) + 1


@pytest.mark.parametrize("squeeze", [torch.squeeze, torch.squeeze_copy], ids=["squeeze", "squeeze_copy"])
def test_a_squeeze_is_right_on_its_own_example(squeeze):
    """``squeeze()`` of an example [5, 1, 5, 1] with every dimension ``Dim.AUTO``: the size-oblivious capture
    kept the axes of size 1 (an Identity, wrong on the example itself); the export falls back to the plain
    capture, which makes them static 1, and the model is right on the example and on other sizes."""
    from fx2onnx.validation import validate

    auto = ({i: torch.export.Dim.AUTO for i in range(4)},)
    onx = fx2onnx.to_onnx(SqueezeAll(squeeze), (torch.randn(5, 1, 5, 1),), dynamic_shapes=auto)
    assert [d.dim_param or d.dim_value for d in onx.graph.input[0].type.tensor_type.shape.dim][1::2] == [1, 1]
    for shape in ((5, 1, 5, 1), (3, 1, 7, 1)):
        assert validate(onx, SqueezeAll(squeeze), (torch.randn(*shape),)).ok, shape


class CellLoop(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = torch.nn.GRUCell(4, 5)

    def forward(self, x):
        h = torch.zeros(x.shape[0], 5)
        for t in range(x.shape[1]):  # specializes
            h = self.cell(x[:, t], h)
        return h


def test_a_loop_over_a_dynamic_size_is_explained():
    """The error names the loop's line and says how to keep the length dynamic (scan, a recurrent layer)."""
    with pytest.raises(fx2onnx.ExportError) as info:
        fx2onnx.to_onnx(CellLoop().eval(), (torch.randn(2, 6, 4),), dynamic_shapes=({1: "seq"},))
    text = str(info.value)
    assert f":{_line_of(CellLoop, '# specializes')} in forward" in text
    assert "Python loop over a dynamic size" in text and "scan" in text and "nn.GRU" in text


class ShiftedWindows(torch.nn.Module):
    """Swin's pattern: pad to a multiple of the window, shift, partition, update in place, merge."""

    def __init__(self, window: int = 7):
        super().__init__()
        self.window, self.embed, self.proj = window, torch.nn.Conv2d(3, 8, 4, 4), torch.nn.Linear(8, 8)

    def forward(self, x):
        x = self.embed(x).permute(0, 2, 3, 1)
        b, h, w, c = x.shape
        k = self.window
        ph, pw = (k - h % k) % k, (k - w % k) % k
        x = torch.roll(torch.nn.functional.pad(x, (0, 0, 0, pw, 0, ph)), shifts=(-3, -3), dims=(1, 2))
        hp, wp = h + ph, w + pw
        x = x.view(b, hp // k, k, wp // k, k, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, k * k, c)
        x = self.proj(x)
        x.add_(0.5)  # an in-place update: the program is re-traced by run_decompositions
        x = x.view(b, hp // k, wp // k, k, k, c).permute(0, 1, 3, 2, 4, 5).reshape(b, hp, wp, c)
        return torch.roll(x, shifts=(3, 3), dims=(1, 2))[:, :h, :w].mean((1, 2))


@pytest.mark.slow
def test_the_decompositions_trace_as_the_capture():
    """The program captured with size-oblivious sizes is decomposed with them too: re-traced without,
    the windows' padding recorded layout conditions the model has not (``8*w_padded != 56``), which
    refused every other image size, and took minutes on timm's Swin."""
    import warnings

    from fx2onnx.frozen import FrozenInputWarning
    from fx2onnx.validation import validate

    model = ShiftedWindows().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error", FrozenInputWarning)
        onx = fx2onnx.to_onnx(model, (torch.rand(2, 3, 112, 112),), dynamic_shapes=({0: "b", 2: "h", 3: "w"},))
    for shape in ((3, 3, 120, 136), (1, 3, 28, 60)):
        assert validate(onx, model, (torch.rand(*shape),)).ok, shape
