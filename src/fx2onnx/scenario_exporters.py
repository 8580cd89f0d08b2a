"""The exporters the scenario zoo compares, apart from the zoo: the command line builds its
parser from them without importing torch."""

from __future__ import annotations

#: exporter name -> what it does
EXPORTERS: dict[str, str] = {
    "export-strict": "torch.export.export(strict=True)",
    "export-nostrict": "torch.export.export(strict=False)",
    "export-nostrict-decall": "torch.export.export(strict=False).run_decompositions()",
    "dynamo": "torch.onnx.export(dynamo=True)",
    "custom": "fx2onnx.to_onnx(strict=False)",
    "custom-strict": "fx2onnx.to_onnx(strict=True)",
}
