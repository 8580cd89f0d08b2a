"""
.. _l-plot-torchvision-detection:

to_onnx and torchvision's detection models: Mask R-CNN with dynamic image sizes
===============================================================================

torchvision's detection models take a list of images of any sizes, resize and pad them into
one batch, then keep a data-dependent number of boxes with non-maximum suppressions.
:func:`fx2onnx.to_onnx` exports them with every image's height and width dynamic: it applies
the patches of :mod:`fx2onnx.patches.torchvision_detection` (``patches="auto"``), each kept
count becomes an unbacked size, and torchvision's operators become ONNX's
``NonMaxSuppression`` and ``RoiAlign``. The number of images in the list is fixed by the export.

Mask R-CNN holds Faster R-CNN (the boxes) and adds a mask per box. This example builds it on the
MobileNetV3-Large FPN backbone of ``fasterrcnn_mobilenet_v3_large_fpn`` (torchvision's
``MaskRCNN`` class, its transform, region proposals and heads unchanged): torchvision's own
``maskrcnn_resnet50_fpn`` is the same model on a ResNet-50, slower to export. Every builder of
torchvision's detection and segmentation models is exported and checked by the benchmark of
:doc:`/models/torchvision`. The model is built with random weights (no download) by
:func:`fx2onnx.zoo.torchvision_models.build_torchvision_model`: batch norms calibrated
and scores spread, so that the boxes are distinct and the comparison with eager is meaningful.
"""

import collections
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import onnx
import onnxruntime
import torch
from torch.utils import _pytree as pytree

import fx2onnx
from fx2onnx.zoo.torchvision_models import build_torchvision_model, match_detections

folder = tempfile.TemporaryDirectory()


def export_and_run(name):
    """Exports the model, runs it with onnxruntime on images of other sizes, returns both results."""
    case = build_torchvision_model(name)
    path = str(Path(folder.name) / f"{name}.onnx")
    fx2onnx.to_onnx(case.model, case.export_args, dynamic_shapes=case.dynamic_shapes, filename=path)
    images = case.check_args[0][0]  # other sizes than the export's
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    feeds = {i.name: image.numpy() for i, image in zip(session.get_inputs(), images)}
    with torch.no_grad():
        eager = case.model(images)
    flat = session.run(None, feeds)
    ort = pytree.tree_unflatten(flat, pytree.tree_structure(eager))
    return path, images, eager, ort


# %%
# Mask R-CNN
# ----------
#
# The exported graph holds one ``NonMaxSuppression`` per suppression of the model (proposals per
# image, detections per image) and the ``RoiAlign`` nodes of the multi-scale pooling. Mask R-CNN
# pastes one mask per detection into the image; the patch replaces torchvision's Python loop over
# the boxes by two batched products with bilinear weights.

path, images, eager, ort = export_and_run("maskrcnn_mobilenet_v3_large_fpn")
ops = collections.Counter(n.op_type for n in onnx.load(path, load_external_data=False).graph.node)
print({k: ops[k] for k in ("NonMaxSuppression", "RoiAlign", "Resize", "Conv")})
for image, e, o in zip(images, eager, ort):
    diff = match_detections(e, o)
    print(
        f"image {tuple(image.shape[1:])}: {e['boxes'].shape[0]} boxes, "
        f"masks {tuple(e['masks'].shape)}, max difference with eager {diff:.2g}"
    )
    assert diff < 1e-2

# %%
# The boxes (the ten best scores) and the masks (the five best) of the second image, eager's on the
# left, onnxruntime's on the right.


def draw(ax, image, result, title, masks=False):
    ax.imshow(image.permute(1, 2, 0).numpy() * 0.5)
    if masks and len(result["masks"]):
        ax.imshow(torch.as_tensor(result["masks"])[:5, 0].amax(0).numpy(), alpha=0.5, cmap="viridis")
    for (x0, y0, x1, y1), label in zip(
        torch.as_tensor(result["boxes"])[:10].tolist(), result["labels"][:10]
    ):
        ax.add_patch(plt.Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, color=f"C{int(label)}"))
    ax.set_title(title)
    ax.axis("off")


fig, axes = plt.subplots(1, 2, figsize=(8, 4))
draw(axes[0], images[1], eager[1], "eager", masks=True)
draw(axes[1], images[1], ort[1], "onnxruntime", masks=True)
fig.tight_layout()

folder.cleanup()
