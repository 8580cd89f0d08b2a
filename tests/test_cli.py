"""python -m fx2onnx export | validate | compare, run through main([...])."""

from __future__ import annotations

import textwrap

import onnx
import pytest

from fx2onnx.__main__ import main

MODELS = textwrap.dedent(
    """
    import torch

    class Model(torch.nn.Module):
        def __init__(self, seed=0):
            super().__init__()
            torch.manual_seed(seed)
            self.linear = torch.nn.Linear(3, 2)

        def forward(self, x):
            return torch.relu(self.linear(x)) * 2

    class WithInputs(Model):
        example_inputs = (torch.randn(4, 3),)
        dynamic_shapes = ({0: "batch"},)

    class WithoutInputs(Model):
        pass

    def make():
        return Model(), (torch.randn(4, 3),), ({0: "batch"},)

    def make_other_batch():
        # the same weights, another batch size: checks a dynamic model
        return Model(), (torch.randn(7, 3),)

    def make_other_weights():
        return Model(seed=1), {"x": torch.randn(4, 3)}

    def make_broken():
        raise RuntimeError("the weights server is down")
    """
)


@pytest.fixture
def models(tmp_path):
    path = tmp_path / "models.py"
    path.write_text(MODELS, encoding="utf-8")
    return str(path)


def _dims(path) -> list:
    model = onnx.load(path)
    return [d.dim_param or d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]


def test_export_dynamic_then_validate_other_shapes(models, tmp_path, capsys):
    out = str(tmp_path / "model.onnx")
    assert main(["export", f"{models}:make", "--out", out, "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "exported with to_onnx (dynamic" in printed and "first input set: OK" in printed
    assert _dims(out) == ["batch", 3]
    assert main(["validate", out, f"{models}:make_other_batch"]) == 0
    assert "OK" in capsys.readouterr().out
    # another model: the outputs differ, exit code 1
    assert main(["validate", out, f"{models}:make_other_weights"]) == 1
    assert "MISMATCH" in capsys.readouterr().out


def test_export_dynamo_static_from_a_class(models, tmp_path, capsys):
    out = str(tmp_path / "static.onnx")
    argv = ["export", f"{models}:WithInputs", "--out", out, "--exporter", "dynamo", "--static", "--quiet"]
    assert main(argv) == 0
    assert "exported with dynamo (static" in capsys.readouterr().out
    assert _dims(out) == [4, 3]
    assert main(["validate", out, f"{models}:WithInputs"]) == 0


@pytest.mark.slow
def test_export_strict_with_dynamo(models, tmp_path, capsys):
    out = str(tmp_path / "strict.onnx")
    assert main(["export", f"{models}:make", "--out", out, "--exporter", "dynamo", "--strict", "--quiet"]) == 0
    assert "first input set: OK" in capsys.readouterr().out
    assert main(["validate", out, f"{models}:make_other_batch"]) == 0


def test_export_tiny_llama_validates_both_input_sets(tmp_path, capsys):
    out = str(tmp_path / "llama.onnx")
    assert main(["export", "llama", "--out", out, "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "patches on" in printed
    assert "first input set: OK" in printed and "second input set: OK" in printed
    assert main(["validate", out, "llama"]) == 0
    assert capsys.readouterr().out.count(": OK") == 2


def test_compare(models, tmp_path, capsys):
    same, other = str(tmp_path / "a.onnx"), str(tmp_path / "b.onnx")
    assert main(["export", f"{models}:make", "--out", same, "--quiet", "--no-validate"]) == 0
    assert main(["export", f"{models}:make_other_weights", "--out", other, "--static", "--quiet", "--no-validate"]) == 0
    capsys.readouterr()
    assert main(["compare", same, same, "--dim", "batch=5"]) == 0
    assert "values never diverge" in capsys.readouterr().out
    assert main(["compare", same, other, "--model", f"{models}:make_other_weights"]) == 1
    printed = capsys.readouterr().out
    assert "first divergence: row" in printed and ">>x" in printed


def test_errors_name_the_fix(models, tmp_path, capsys):
    # a refused input ends in one line on stderr and exit code 2, never a traceback
    out = str(tmp_path / "x.onnx")
    for argv, expected in [
        (["export", f"{models}:WithoutInputs", "--out", out, "--quiet"], "example_inputs"),
        (["export", "not_a_model", "--out", out, "--quiet"], "tiny architecture"),
        (["export", f"{models}:make_other_weights", "--out", out, "--quiet"], "--static"),
        (["compare", out, out, "--dim", "batch"], "name=value"),
    ]:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and expected in err and err.count("\n") == 1, err


def test_an_error_nothing_expected_is_one_line(models, tmp_path, capsys):
    # a library's or the user's code raising what no refusal names: one line with its type, exit code 1
    out = str(tmp_path / "x.onnx")
    assert main(["export", f"{models}:make_broken", "--out", out, "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: export stopped on RuntimeError: the weights server is down") and \
        "FX2ONNX_TRACEBACK=1" in err and err.count("\n") == 1, err


def test_the_parser_imports_no_torch():
    """``python -m fx2onnx --help`` answers at once: building the parser imports neither torch
    nor the scenario zoo (it took 2-4 s of imports before every command)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from fx2onnx.__main__ import make_parser\n"
        "parser = make_parser()\n"
        "parser.parse_args(['scenarios', '--out', 'x', '--exporters', 'custom'])\n"
        "print(sorted(m for m in ('torch', 'fx2onnx.scenarios') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
