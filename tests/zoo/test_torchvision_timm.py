"""torchvision beside the CPU torch (the import hook) and timm models through to_onnx."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import fx2onnx
from fx2onnx.torchvision_cpu import PTH_NAME, ensure_torchvision, write_pth_file

pytest.importorskip("timm")


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


def test_torchvision_imports_with_the_hook():
    how = ensure_torchvision()
    assert how in ("native", "schemas")
    import torchvision

    assert torchvision.__version__.startswith("0.28")
    boxes = torch.tensor([[0.0, 0.0, 4.0, 4.0]])
    # roi_align has a Python path when the C++ operators are missing
    pooled = torchvision.ops.roi_align(torch.rand(1, 2, 8, 8), [boxes], output_size=2)
    assert pooled.shape == (1, 2, 2, 2)


@pytest.mark.slow
def test_without_the_hook_torchvision_and_transformers_fail():
    """The failure the hook fixes: without it (and with the CUDA wheel) both imports fail."""
    if ensure_torchvision() == "native":
        pytest.skip("this torchvision's C++ extension loads: there is nothing to fix")
    code = ("from fx2onnx.torchvision_cpu import uninstall_import_hook; uninstall_import_hook()\n"
            "import torchvision")
    done = _run(code)
    assert done.returncode != 0 and "torchvision::nms does not exist" in done.stderr
    done = _run("from fx2onnx.torchvision_cpu import install_import_hook; install_import_hook()\n"
                "from transformers import PreTrainedModel\nimport timm\nprint('imported')")
    assert done.returncode == 0 and "imported" in done.stdout, done.stderr[-2000:]


def test_pth_file_installs_the_hook(tmp_path):
    path = write_pth_file(tmp_path)
    assert path.name == PTH_NAME
    code = ("import site, sys\n"
            "from fx2onnx.torchvision_cpu import _TorchvisionHook, uninstall_import_hook\n"
            "uninstall_import_hook()\n"
            f"site.addsitedir({str(tmp_path)!r})\n"
            "print(any(isinstance(f, _TorchvisionHook) for f in sys.meta_path))")
    done = _run(code)
    assert done.returncode == 0 and done.stdout.strip().endswith("True"), done.stderr[-2000:]


@pytest.mark.parametrize("shapes", ["batch", "image"])
@pytest.mark.slow  # the fast tier exports a timm model in test_timm_image_sizes.py
def test_timm_model_exports(shapes):
    from fx2onnx.zoo.timm_models import build_timm_model

    case = build_timm_model("test_resnet", shapes=shapes)
    assert case.family == "resnet"
    onx = fx2onnx.to_onnx(case.model, (case.export_input,), dynamic_shapes=case.dynamic_shapes)
    report = fx2onnx.validate(onx, case.model, (case.check_input,), atol=1e-4, rtol=1e-3)
    assert report.ok, report
