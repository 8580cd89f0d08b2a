"""Image and audio classifiers of transformers' auto mappings through ``to_onnx`` (an exploration).

The supported-models zoo (``python -m fx2onnx models``) covers the text architectures. This
script tries the image-classification and audio-classification architectures the same way
a new user would: a small configuration (generic overrides only), seeded random weights,
an export with a dynamic batch (``--spatial``: dynamic height and width too; audio: a dynamic
number of samples) and a comparison with eager on another batch size. Each architecture
runs in its own process with a time limit. Prints one line per architecture and a summary::

    python bench/sweep_vision_audio.py --kinds image,audio [--spatial] [--only vit]

Statuses: ``ok``; ``model`` (the configuration or eager run failed: the generic overrides do
not suit it, not an export result); ``capture`` / ``conversion``; ``frozen`` (the export
said it froze something the second input differs in, see :mod:`fx2onnx.frozen`);
``onnxruntime``; ``mismatch``; ``timeout``.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time

OVERRIDES = dict(
    num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_labels=5,
    image_size=64, encoder_layers=2, d_model=64, encoder_attention_heads=4, encoder_ffn_dim=128,
    classifier_proj_size=32,
)


def mapping(kind: str) -> dict[str, str]:
    from transformers.models.auto import modeling_auto

    names = {"image": "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES", "audio": "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES"}
    return {k: v for k, v in getattr(modeling_auto, names[kind]).items() if isinstance(v, str)}


def _inputs(kind: str, config, spatial: bool):
    import torch

    dyn = torch.export.Dim.DYNAMIC
    g = torch.Generator().manual_seed(0)
    if kind == "image":
        size = getattr(config, "image_size", 64)
        size = size[0] if isinstance(size, (list, tuple)) else size
        channels = getattr(config, "num_channels", 3)
        shapes = [(2, channels, size, size), (3, channels, size, size)]
        if spatial:
            shapes[1] = (3, channels, size + 16, size - 8)
        dynamic = {0: dyn, 2: dyn, 3: dyn} if spatial else {0: dyn}
        return "pixel_values", [torch.rand(*s, generator=g) for s in shapes], dynamic
    if hasattr(config, "num_mel_bins") and hasattr(config, "max_length"):  # spectrogram transformers
        shapes, dynamic = [(2, config.max_length, config.num_mel_bins), (3, config.max_length, config.num_mel_bins)], {0: dyn}
    elif hasattr(config, "max_source_positions") and hasattr(config, "num_mel_bins"):  # whisper-like: mel features
        bins, length = config.num_mel_bins, 2 * config.max_source_positions
        return "input_features", [torch.randn(b, bins, length, generator=g) for b in (2, 3)], {0: dyn}
    else:
        shapes, dynamic = [(2, 4000), (3, 5200)], {0: dyn, 1: dyn}
    return "input_values", [torch.randn(*s, generator=g) for s in shapes], dynamic


def run_one(kind: str, name: str, spatial: bool) -> dict:
    """Exports one architecture and compares it with eager (runs in a child process)."""
    import torch
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    import fx2onnx
    from fx2onnx.frozen import check_frozen_inputs, read_frozen_inputs
    from fx2onnx.runner import label_export_step
    from fx2onnx.validation import compare_outputs, flatten_outputs, make_session, run_onnx

    row = {"kind": kind, "name": name, "status": "model"}
    try:
        config_class = CONFIG_MAPPING[name]
        default = config_class().to_dict()
        values = {k: v for k, v in OVERRIDES.items() if k in default}
        for key in ("depths", "conv_dim"):
            if isinstance(default.get(key), list):
                values[key] = [1] * len(default[key]) if key == "depths" else [32] * len(default[key])
        try:
            config = config_class(**values)
        except Exception:  # noqa: BLE001 - an override this configuration validates otherwise
            config = config_class(num_labels=OVERRIDES["num_labels"])
        torch.manual_seed(0)
        model = getattr(transformers, mapping(kind)[name])(config).eval()
        # weights of variance 1 / fan-in: with the models' small initializations the outputs of deep
        # convolutional networks vanish (1e-23), and any export would compare as right
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() >= 2 and p.dtype.is_floating_point:
                    p.copy_(torch.randn(p.shape, generator=generator) / p[0].numel() ** 0.5)
        key, (x, x2), dynamic = _inputs(kind, model.config, spatial)
        with torch.no_grad():
            expected = flatten_outputs(model(**{key: x2}))
        row["scale"] = float(max(t.abs().max() for t in expected if t.numel()))
        row["status"] = "capture"
        begin = time.perf_counter()
        with label_export_step("capture"), fx2onnx.torch_export_patches(patch_transformers=True), torch.no_grad():
            onx = fx2onnx.to_onnx(model, (), kwargs={key: x}, dynamic_shapes={key: dynamic})
        row["export_s"] = round(time.perf_counter() - begin, 1)
        frozen = read_frozen_inputs(onx)
        if frozen:  # what the export said it froze: refused as fx2onnx.validate refuses it
            row["status"] = "frozen"
            check_frozen_inputs(frozen, model, (), {key: x2})
        row["status"] = "onnxruntime"
        report = compare_outputs(expected, run_onnx(make_session(onx), (), {key: x2}), atol=1e-4, rtol=1e-3)
        row["max_abs"] = float(report.max_abs)
        row["status"] = "ok" if report.ok else "mismatch"
    except Exception as e:  # noqa: BLE001 - every failure is a result
        if row["status"] == "capture":
            row["status"] = getattr(e, "step", "conversion")
        row["error"] = (type(e).__name__ + ": " + str(e)).splitlines()[0][:200]
    return row


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", default="image,audio")
    parser.add_argument("--spatial", action="store_true", help="images: dynamic height and width too")
    parser.add_argument("--only", default=None, help="regular expression on the model types")
    parser.add_argument("--timeout", type=int, default=300)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print("ROW " + json.dumps(run_one(args.child[0], args.child[1], args.spatial)))
        return []
    rows = []
    for kind in args.kinds.split(","):
        for name in mapping(kind):
            if args.only and not re.search(args.only, name):
                continue
            command = [sys.executable, __file__, "--child", kind, name] + (["--spatial"] if args.spatial else [])
            try:
                out = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout).stdout
                line = next((x for x in out.splitlines() if x.startswith("ROW ")), None)
                row = json.loads(line[4:]) if line else {"kind": kind, "name": name, "status": "crash"}
            except subprocess.TimeoutExpired:
                row = {"kind": kind, "name": name, "status": "timeout"}
            rows.append(row)
            diff = f"{row['max_abs']:.2g} of {row['scale']:.2g}" if "max_abs" in row else ""
            print(f"{kind:6s} {name:32s} {row['status']:12s} {diff:20s} {row.get('error', '')[:90]}", flush=True)
    statuses = sorted({r["status"] for r in rows})
    print("\n" + ", ".join(f"{s} {sum(r['status'] == s for r in rows)}" for s in statuses))
    return rows


if __name__ == "__main__":
    main()
