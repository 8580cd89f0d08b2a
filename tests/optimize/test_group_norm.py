"""``GroupNormalization`` (which onnxruntime expands into about 20 nodes) into its ``InstanceNormalization``
kernel at level ``onnxruntime``: one group a channel (wav2vec2's feature encoder) and several channels a group."""

from __future__ import annotations

import numpy as np
import torch
from onnx import helper as oh
from optimize_helpers import FLOAT, check_rule, make_model, op_types, run

import fx2onnx
from fx2onnx.optimizer.rules.normalization import group_norm_to_instance_norm

RNG = np.random.default_rng(0)


def _group_norm(channels: int, groups: int, spatial: list, opset: int = 21):
    shape = ["n", channels, *spatial]
    nodes = [oh.make_node("GroupNormalization", ["x", "scale", "bias"], ["y"], num_groups=groups, epsilon=1e-5)]
    inits = [("scale", RNG.standard_normal(channels).astype(np.float32)),
             ("bias", RNG.standard_normal(channels).astype(np.float32))]
    return make_model(nodes, [("x", FLOAT, shape)], [("y", FLOAT, shape)], inits, opset=opset), inits


def _torch_group_norm(x: np.ndarray, groups: int, inits) -> np.ndarray:
    scale, bias = (torch.from_numpy(v) for _, v in inits)
    return torch.nn.functional.group_norm(torch.from_numpy(x), groups, scale, bias, eps=1e-5).numpy()


def test_one_group_a_channel_becomes_instance_normalization():
    model, inits = _group_norm(6, 6, ["t"])
    feeds = [{"x": (RNG.standard_normal((n, 6, t)) * 3 + 1).astype(np.float32)} for n, t in ((1, 50), (3, 7))]
    fused = check_rule(model, group_norm_to_instance_norm, feeds, 1)
    assert op_types(fused) == {"InstanceNormalization": 1}
    for f in feeds:
        np.testing.assert_allclose(run(fused, f)[0], _torch_group_norm(f["x"], 6, inits), atol=1e-5)


def test_groups_of_channels_normalized_over_a_view():
    model, inits = _group_norm(8, 2, ["h", "w"])
    sizes = ((2, 5, 3), (1, 1, 4))
    feeds = [{"x": (RNG.standard_normal((n, 8, h, w)) * 2 - 1).astype(np.float32)} for n, h, w in sizes]
    fused = check_rule(model, group_norm_to_instance_norm, feeds, 1)
    ops = op_types(fused)
    assert ops["InstanceNormalization"] == 1 and "GroupNormalization" not in ops, ops
    for f in feeds:
        np.testing.assert_allclose(run(fused, f)[0], _torch_group_norm(f["x"], 2, inits), atol=1e-5)


def test_group_norm_rule_in_level_onnxruntime_only():
    model, _ = _group_norm(4, 4, ["t"])
    assert "InstanceNormalization" in op_types(fx2onnx.optimize(model, level="onnxruntime"))
    assert "GroupNormalization" in op_types(fx2onnx.optimize(model, level="default"))
    opset18, _ = _group_norm(4, 2, ["t"], opset=18)  # opset 18: a scale a group, left as it is
    assert "GroupNormalization" in op_types(fx2onnx.optimize(opset18, level="onnxruntime"))
