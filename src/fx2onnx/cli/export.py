"""``python -m fx2onnx export MODEL --out OUT``: a model (a function, a tiny architecture) into an ONNX file, or a
checkpoint folder into a folder that generates; checked against eager."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .common import EXPORT_MODEL_HELP, add_model_arguments, steps


def _export_checkpoint(args: argparse.Namespace) -> int:
    """Exports a save_pretrained folder into a folder that generates (fx2onnx.deploy.export_folder):
    the model on the meta device, the weights streamed from its safetensors files."""
    from ..deploy import export_folder
    from ..deploy.transformersjs import folder_refusal, transformersjs_refusal

    if args.exporter != "to_onnx":
        raise ValueError("A checkpoint folder is exported with --exporter to_onnx only.")
    if not args.dynamic or args.strict:
        raise ValueError("A checkpoint folder is exported with dynamic shapes and a non-strict capture: "
                         "remove --static / --strict.")
    result = export_folder(
        args.model, args.out, task=args.task, dtype=args.dtype, with_cache=not args.no_cache,
        optimize=args.optimize or "onnxruntime", quantize=args.quantize, block_size=args.block_size,
        symmetric=not args.asymmetric, opset=args.opset, all_logits=args.all_logits,
        cache_in_place=not args.concatenated_cache, capture_all_layers=args.capture_all_layers,
        validate=args.validate,
        atol=args.atol, rtol=args.rtol,
        progress=not args.quiet,
        log=lambda line: print(line, file=sys.stderr, flush=True),
        max_memory=args.max_memory,
    )
    for line in result.check_lines():
        print(f"  {line}")
    if result.genai:
        print(f"  onnxruntime-genai: no genai_config.json ({result.genai})")
    why = transformersjs_refusal(result.quantize, str(result.dtype)) or (folder_refusal(result.out) if result.written
                                                                        else None)
    if why:
        print(f"  transformers.js: {why}")
    print(result)
    return 0 if result.ok else 1


def run(args: argparse.Namespace) -> int:
    import contextlib
    import os

    if os.path.isdir(args.model) and os.path.exists(os.path.join(args.model, "config.json")):
        return _export_checkpoint(args)
    if os.path.isdir(args.model):
        raise ValueError(f"{args.model} has no config.json: export takes a folder written by save_pretrained "
                         "(its config.json and weights)")
    if os.sep in args.model and ":" not in args.model:  # a path ('module:attribute' names a Python file's model)
        raise ValueError(f"{args.model}: no such folder")

    import torch

    from ..model_spec import load_model_spec

    bar = steps(["load", "export", "validate"] if args.validate else ["load", "export"], enabled=not args.quiet)
    results = {}
    for step in bar:
        bar.set_description(step)
        if step == "load":
            spec = load_model_spec(args.model, with_cache=args.with_cache)
            dynamic_shapes = spec.dynamic_shapes if args.dynamic else None
            if args.dynamic and dynamic_shapes is None:
                raise ValueError(f"{args.model} defines no dynamic shapes: export it with --static or define them.")
            patches = spec.is_transformers if args.patches is None else args.patches
        elif step == "export":
            from .. import torch_export_patches

            context = torch_export_patches(patch_transformers=True) if patches else contextlib.nullcontext()
            with context:
                if args.exporter == "to_onnx":
                    from .. import to_onnx

                    to_onnx(spec.model, spec.args, spec.kwargs, dynamic_shapes=dynamic_shapes,
                            strict=args.strict, target_opset=args.opset, filename=args.out)
                else:
                    model = spec.model
                    if args.strict:  # torch.onnx.export has no strict option: capture first
                        from ..zoo import export_dynamic_shapes

                        model = torch.export.export(
                            model, spec.args, spec.kwargs, strict=True,
                            dynamic_shapes=export_dynamic_shapes(dynamic_shapes),
                        )
                    program = torch.onnx.export(
                        model, spec.args, kwargs=spec.kwargs, dynamic_shapes=None if args.strict else dynamic_shapes,
                        opset_version=args.opset, dynamo=True, verbose=False,
                    )
                    program.save(args.out)
        else:
            from .. import validate

            inputs = [(spec.args, spec.kwargs)]
            if dynamic_shapes is not None and spec.args2 is not None:
                inputs.append((spec.args2, spec.kwargs2))
            for i, (a, k) in enumerate(inputs):
                results[i] = validate(args.out, spec.model, a, k, atol=args.atol, rtol=args.rtol)
    kind = "dynamic" if dynamic_shapes is not None else "static"
    print(f"{args.model}: exported with {args.exporter} ({kind}, patches {'on' if patches else 'off'}) into {args.out}")
    for i, report in results.items():
        print(f"  {'first' if i == 0 else 'second'} input set: {report}")
    return 0 if all(r.ok for r in results.values()) else 1


def add_parser(commands: Any) -> None:
    """Adds the command to the subparsers ``commands``."""
    exp = commands.add_parser(
        "export",
        help="export a model to ONNX and check it against eager",
        description="Exports a model with fx2onnx.to_onnx or torch.onnx.export(dynamo=True), then "
        "validates the ONNX model on onnxruntime against eager (and on a second input set of "
        "other shapes when the model is dynamic). Exit code 1 when the outputs differ.",
    )
    exp.add_argument("model", help=EXPORT_MODEL_HELP)
    exp.add_argument("--out", required=True, help="the ONNX file to write")
    exp.add_argument("--exporter", choices=["to_onnx", "dynamo"], default="to_onnx", help="the exporter")
    shapes = exp.add_mutually_exclusive_group()
    shapes.add_argument("--dynamic", dest="dynamic", action="store_true", default=True,
                        help="use the model's dynamic shapes (default)")
    shapes.add_argument("--static", dest="dynamic", action="store_false", help="export with static shapes")
    patches = exp.add_mutually_exclusive_group()
    patches.add_argument("--patches", dest="patches", action="store_true", default=None,
                         help="export inside torch_export_patches(patch_transformers=True) "
                         "(default for tiny transformers architectures)")
    patches.add_argument("--no-patches", dest="patches", action="store_false", help="export without patches")
    exp.add_argument("--strict", action="store_true", help="strict mode of torch.export.export")
    exp.add_argument("--opset", type=int, default=None, help="ONNX opset (default: 20, 23 for the fused levels)")
    exp.add_argument("--no-validate", dest="validate", action="store_false", help="do not run the model")
    exp.add_argument("--quiet", action="store_true", help="no progress bar")
    exp.add_argument("--task", default=None, help="a checkpoint folder: the task (default: from the config's "
                     "architectures; text-generation)")
    exp.add_argument("--dtype", default=None, choices=["float32", "float16", "bfloat16"],
                     help="a checkpoint folder: the type of the exported weights (default: float32, the type of "
                     "onnxruntime's CPU kernels)")
    exp.add_argument("--no-cache", action="store_true",
                     help="a checkpoint folder: a causal LM without its cache (it cannot generate)")
    exp.add_argument("--optimize", default=None, choices=["default", "onnxruntime", "opset23", "none"],
                     help="a checkpoint folder: the optimization level (default: onnxruntime)")
    exp.add_argument("--quantize", default=None, choices=["int4", "int8"],
                     help="a checkpoint folder: weight-only quantization into onnxruntime's MatMulNBits")
    exp.add_argument("--block-size", type=int, default=32, help="with --quantize: the values sharing one scale")
    exp.add_argument("--asymmetric", action="store_true",
                     help="with --quantize: asymmetric blocks (a zero point each: a little more accurate, "
                          "slower int4 kernels); symmetric by default")
    exp.add_argument("--concatenated-cache", action="store_true",
                     help="a causal LM concatenates its past and new keys at each step (the standard Attention) "
                          "instead of updating a buffer in place (onnxruntime's GroupQueryAttention, the default "
                          "at --optimize onnxruntime)")
    exp.add_argument("--capture-all-layers", action="store_true",
                     help="a checkpoint folder: trace every decoder layer with torch.export (by default a stack of "
                          "identical layers is captured with two, the others copied in ONNX)")
    exp.add_argument("--max-memory", default=None,
                     help="a checkpoint folder: refuse before loading an export estimated to need more memory "
                          "(16GB, 1.5GiB; the check against eager loads the model in float32)")
    exp.add_argument("--all-logits", action="store_true",
                     help="a causal LM: the logits of every position (to score a text); by default those of the "
                          "last position, all generation reads (the prompt's first token is faster)")
    add_model_arguments(exp)
    exp.set_defaults(func=run)
