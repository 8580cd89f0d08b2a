"""RT-DETR's batch read with len(tensor): the patch keeps it dynamic."""

import functools

import pytest
import torch

import fx2onnx
from fx2onnx.patches.detr_batch import symbolic_len, with_globals
from fx2onnx.ties import record_ties


def _decorated(function):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        return function(*args, **kwargs)

    return wrapper


class ReadsLen(torch.nn.Module):
    @_decorated
    def forward(self, x):
        batch = len(x)
        return x.reshape(batch, -1).sum(dim=1, keepdim=True).expand(batch, 2)


def test_with_globals_rebinds_len_through_a_decorator():
    patched = with_globals(ReadsLen.forward, len=symbolic_len)
    assert patched.__wrapped__ is not ReadsLen.forward.__wrapped__
    assert patched.__wrapped__.__globals__["len"] is symbolic_len
    assert "len" not in ReadsLen.forward.__wrapped__.__globals__  # the module's globals are untouched
    x = torch.randn(3, 2, 2)
    torch.testing.assert_close(patched(ReadsLen(), x), ReadsLen()(x))
    assert symbolic_len([1, 2]) == 2


def test_len_of_a_tensor_specializes_the_batch_unless_patched(monkeypatch):
    x = torch.randn(2, 3)
    with pytest.raises(Exception, match="batch"):
        fx2onnx.to_onnx(ReadsLen(), (x,), dynamic_shapes=({0: "batch"},))
    monkeypatch.setattr(ReadsLen, "forward", with_globals(ReadsLen.forward, len=symbolic_len))
    onx = fx2onnx.to_onnx(ReadsLen(), (x,), dynamic_shapes=({0: "batch"},))
    report = fx2onnx.validate(onx, ReadsLen(), (torch.randn(5, 3),))
    assert report.ok, report


@pytest.mark.slow
def test_rt_detr_exports_with_a_dynamic_batch():
    pytest.importorskip("transformers")
    from fx2onnx.inputs.task_inputs import build_task_inputs
    from fx2onnx.inputs.tasks import get_task_architecture, tiny_task_model

    arch = get_task_architecture("object-detection", "rt_detr")
    model, config = tiny_task_model(arch)
    inputs, shapes = build_task_inputs(arch.task, model, config, 2, seed=0)
    with pytest.raises(Exception, match="len\\(source_flatten\\)"):
        fx2onnx.to_onnx(model, (), kwargs=inputs, dynamic_shapes=shapes, patches=False)
    onx = fx2onnx.to_onnx(model, (), kwargs=inputs, dynamic_shapes=shapes)
    for batch, seed in [(3, 0), (1, 5)]:  # seeds whose top-k scores have no tie (see below)
        other, _ = build_task_inputs(arch.task, model, config, batch, seed=seed)
        report = fx2onnx.validate(onx, model, (), other, atol=1e-3, rtol=1e-3)
        assert report.ok, (batch, report)
    # with another seed the selection of queries meets ties (anchors outside the image all score
    # the same): the order of tied queries is torch's choice, and the tie is reported
    other, _ = build_task_inputs(arch.task, model, config, 3, seed=1)
    with record_ties() as ties, torch.no_grad():
        model(**other)
    assert any(t.op == "topk" for t in ties)
