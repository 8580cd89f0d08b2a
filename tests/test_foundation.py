"""The foundation: README example, validate on right and wrong models, site config, Makefile."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import torch

from fx2onnx.validation import make_feeds, validate

ROOT = Path(__file__).resolve().parents[1]


def load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def readme_python_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


# README


def test_readme_example_runs(tmp_path):
    # in a fresh interpreter, as a reader would run it
    blocks = readme_python_blocks()
    assert blocks, "README.md has no python code block"
    script = tmp_path / "readme_example.py"
    check = "\nprint('MAX_ABS', report.max_abs)\n"
    script.write_text("\n".join(blocks) + check, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert any(line.startswith("OK: 1 output(s)") for line in lines), proc.stdout
    assert float(lines[-1].split()[1]) < 1e-4


# validate


class TwoLayers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 8)
        self.fc2 = torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


@pytest.fixture(scope="module")
def exported():
    torch.manual_seed(0)
    model = TwoLayers().eval()
    batch = torch.export.Dim("batch")
    program = torch.onnx.export(
        model, (torch.randn(3, 4),), dynamic_shapes=({0: batch},), dynamo=True, verbose=False
    )
    return model, program.model_proto


def test_validate_right_model_small_diff(exported):
    model, onx = exported
    report = validate(onx, model, (torch.randn(7, 4),))
    assert report.ok, report
    assert report.n_outputs == 1
    assert report.max_abs < 1e-5
    assert str(report).startswith("OK")


def test_validate_detects_another_model(exported):
    _, onx = exported
    torch.manual_seed(1)
    other = TwoLayers().eval()  # same architecture, other weights
    x = torch.randn(7, 4)
    report = validate(onx, other, (x,))
    assert not report.ok
    assert report.max_abs > 1e-2
    assert str(report).startswith("MISMATCH")
    with pytest.raises(AssertionError, match="does not match eager"):
        validate(onx, other, (x,), raise_on_mismatch=True)


def test_validate_detects_wrong_output_shape(exported):
    _, onx = exported
    wider = torch.nn.Linear(4, 5).eval()
    report = validate(onx, wider, (torch.randn(2, 4),))
    assert not report.ok
    assert report.details[0]["reason"] == "shape mismatch"


def test_make_feeds_wrong_input_count(exported):
    _, onx = exported
    with pytest.raises(ValueError, match=r"expects 1 inputs .* flatten into 2 values"):
        make_feeds(onx, (torch.randn(2, 4), torch.randn(2, 4)))


@pytest.mark.parametrize("shape", [(), (0, 3), (2, 3)])
def test_run_onnx_bfloat16_inputs_and_outputs(shape):
    """onnxruntime's numpy bridge has no bfloat16: run_onnx goes through OrtValues, shapes kept."""
    from fx2onnx import to_onnx
    from fx2onnx.validation import run_onnx

    class Affine(torch.nn.Module):
        def forward(self, x, y):
            return x * 3 + y, (x > y)

    x, y = (torch.randn(shape).to(torch.bfloat16) for _ in range(2))
    got = run_onnx(to_onnx(Affine(), (x, y)), (x, y))
    assert got[0].dtype.name == "bfloat16" and got[0].shape == shape
    torch.testing.assert_close(torch.from_numpy(got[0].astype("float32")), (x * 3 + y).float())
    assert (got[1] == (x > y).numpy()).all()
    assert validate(to_onnx(Affine(), (x, y)), Affine(), (x, y)).ok


# site configuration


def test_requirements_match_installed_versions():
    pins = {}
    for line in (ROOT / "requirements-docs.txt").read_text(encoding="utf-8").splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)$", line.strip())
        if match:
            pins[match.group(1)] = match.group(2)
    assert pins["torch"] == "2.13.0"
    assert pins["transformers"] == "5.23.0"
    installed = {name: metadata.version(name).split("+")[0] for name in pins}
    different = {n: (pins[n], installed[n]) for n in pins if pins[n] != installed[n]}
    assert not different, f"pinned != installed: {different}"


def test_versions_page_generator(tmp_path, monkeypatch):
    gen = load_module(ROOT / "_doc" / "gen_versions.py", "gen_versions_under_test")
    pins = dict(gen.pinned_packages(ROOT / "requirements-docs.txt"))
    assert pins["torch"] == "2.13.0" and "sphinx-gallery" in pins
    assert "urllib3" not in pins  # indirect dependencies are not listed
    monkeypatch.setattr(gen, "OUTPUT", tmp_path / "versions.rst")
    gen.generate(None)
    page = (tmp_path / "versions.rst").read_text(encoding="utf-8")
    row = next(line for line in page.splitlines() if line.startswith("torch "))
    assert row.split() == ["torch", "2.13.0", torch.__version__]
    assert gen.write_if_changed(tmp_path / "versions.rst", page) is False


@pytest.mark.parametrize(
    "pattern, runs, skipped",
    [
        ("", ["plot_torch_linreg_101.py", "plot_other.py"], ["helper.py"]),
        ("linreg", ["plot_torch_linreg_101.py"], ["plot_other.py", "helper.py"]),
        ("linreg|other", ["plot_torch_linreg_101.py", "plot_other.py"], ["plot_export.py"]),
    ],
)
def test_gallery_pattern(monkeypatch, pattern, runs, skipped):
    monkeypatch.setenv("FX2ONNX_GALLERY_PATTERN", pattern)
    conf = load_module(ROOT / "conf.py", "conf_under_test")
    regex = conf.sphinx_gallery_conf["filename_pattern"]
    for name in runs:
        assert re.search(regex, f"/repo/_doc/examples/{name}"), (regex, name)
    for name in skipped:
        assert not re.search(regex, f"/repo/_doc/examples/{name}"), (regex, name)


def test_conf_builds_offline_with_generators():
    conf = load_module(ROOT / "conf.py", "conf_under_test_offline")
    assert "sphinx.ext.intersphinx" not in conf.extensions
    assert conf.sphinx_gallery_conf["abort_on_example_error"] is True
    assert conf.sphinx_gallery_conf["only_warn_on_example_error"] is False
    for name in ["torch", "onnx", "onnxruntime", "onnxscript", "onnx-ir", "transformers"]:
        assert conf.epkg_dictionary[name].startswith("https://")


# Makefile and CI


def test_makefile_bootstraps_a_venv(tmp_path):
    venv = tmp_path / "venv"
    out = subprocess.run(
        ["make", "-n", "test", "html", f"VENV={venv}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"-m venv {venv}" in out
    assert f"{venv}/bin/python -m pip install -r requirements-docs.txt" in out
    assert f"{venv}/bin/python -m pip install --no-deps -e ." in out
    assert f"{venv}/bin/python -m pytest" in out
    assert "from fx2onnx.torchvision_cpu import write_pth_file" in out
    assert f"{venv}/bin/python -m sphinx -W --keep-going -b html -d _build/doctrees . _build/html" in out


def test_ci_script():
    script = ROOT / ".ci" / "run"
    text = script.read_text(encoding="utf-8")
    assert script.stat().st_mode & 0o111, ".ci/run must be executable"
    assert "set -euo pipefail" in text
    assert text.index("make test") < text.index("make html")


@pytest.mark.slow
def test_validate_stays_a_function_after_importing_its_module():
    # the function fx2onnx.validate lives in the module fx2onnx.validation: importing
    # the module (the library does it) must not hide the function
    code = (
        "import fx2onnx\n"
        "from fx2onnx.validation import make_feeds\n"
        "import fx2onnx.validation\n"
        "assert callable(fx2onnx.validate) and fx2onnx.validate.__name__ == 'validate'\n"
        "import sys\n"
        "assert sys.modules['fx2onnx.validation'].make_feeds is make_feeds\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "ok"
