"""to_onnx captures with fewer garbage collections, and leaves the collector as it found it."""

from __future__ import annotations

import gc

import torch

from fx2onnx import to_onnx
from fx2onnx.convert.gc_pace import fewer_collections


class _Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(40))

    def forward(self, x):
        for layer in self.layers:
            x = (layer(x) * 2).relu()
        return x.sum(dim=1)


def test_capture_collects_less_and_restores_the_collector():
    starts: list[int] = []

    def count(phase, info):
        if phase == "start":
            starts.append(info["generation"])

    model, x = _Model(), torch.randn(3, 4)
    to_onnx(model, (x,), dynamic_shapes=({0: "batch"},))  # the imports of a first export collect too
    before = gc.get_threshold(), gc.get_freeze_count(), gc.isenabled()
    gc.callbacks.append(count)
    try:
        onx = to_onnx(model, (x,), dynamic_shapes=({0: "batch"},))
    finally:
        gc.callbacks.remove(count)
    assert (gc.get_threshold(), gc.get_freeze_count(), gc.isenabled()) == before
    assert len(onx.graph.output) == 1
    # 25 collections at Python's default pace, 5 at the capture's
    assert len(starts) < 12, len(starts)


def test_a_process_which_froze_its_objects_keeps_them_frozen():
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with fewer_collections(threshold=5000):
            assert gc.get_threshold()[0] == max(5000, gc.get_threshold()[0])
        # an unfreeze would empty the permanent generation; frozen objects freed by their
        # reference counts meanwhile (another thread, a finalizer) lower the count a little
        assert gc.get_freeze_count() > frozen // 2 > 0
    finally:
        gc.unfreeze()
