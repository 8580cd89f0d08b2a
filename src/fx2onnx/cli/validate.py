"""``python -m fx2onnx validate ONNX MODEL``: an ONNX file run against the eager model on its input sets."""

from __future__ import annotations

import argparse
from typing import Any

from .common import MODEL_HELP, add_model_arguments


def run(args: argparse.Namespace) -> int:
    from .. import validate
    from ..model_spec import load_model_spec

    spec = load_model_spec(args.model, with_cache=args.with_cache)
    inputs = [("first", spec.args, spec.kwargs)]
    if spec.args2 is not None and not args.first_only:
        inputs.append(("second", spec.args2, spec.kwargs2))
    ok = True
    for name, a, k in inputs:
        report = validate(args.onnx, spec.model, a, k, atol=args.atol, rtol=args.rtol)
        print(f"{args.onnx} vs {args.model}, {name} input set: {report}")
        ok = ok and report.ok
    return 0 if ok else 1


def add_parser(commands: Any) -> None:
    """Adds the command to the subparsers ``commands``."""
    val = commands.add_parser(
        "validate",
        help="run an ONNX file against the eager model",
        description="Runs the ONNX model with onnxruntime and the eager model on the same inputs "
        "(each input set the model defines) and prints the differences. Exit code 1 on a mismatch.",
    )
    val.add_argument("onnx", help="the ONNX file")
    val.add_argument("model", help=MODEL_HELP)
    val.add_argument("--first-only", action="store_true", help="only the first input set")
    add_model_arguments(val)
    val.set_defaults(func=run)
