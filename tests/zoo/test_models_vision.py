"""The small CNN shared by the benchmarks and the profiling example."""

import torch

import fx2onnx
from fx2onnx.zoo.vision import small_cnn


def test_small_cnn_is_seeded_and_exports_with_a_dynamic_batch():
    model = small_cnn()
    x = torch.randn(4, 3, 32, 32)
    torch.testing.assert_close(model(x), small_cnn()(x))
    assert model(x).shape == (4, 10)
    onx = fx2onnx.to_onnx(model, (x,), dynamic_shapes=({0: "batch"},))
    report = fx2onnx.validate(onx, model, (torch.randn(7, 3, 32, 32),), atol=1e-4)
    assert report.ok, report
