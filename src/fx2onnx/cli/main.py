"""The command line: ``python -m fx2onnx <command> ...``, one module per command (``fx2onnx/cli/<command>.py``: its
``add_parser(commands)`` and ``run(args)``). A command imports what it runs when it runs: ``generate`` starts
without torch, ``export`` loads it.

.. code-block:: bash

    python -m fx2onnx export llama --out llama.onnx --exporter to_onnx
    python -m fx2onnx export my_models.py:make_model --out m.onnx --static --exporter dynamo
    python -m fx2onnx export path/to/checkpoint --out model_dir --quantize int4
    python -m fx2onnx generate model_dir "a prompt" --max-new-tokens 32
    python -m fx2onnx export path/to/whisper --out whisper_dir
    python -m fx2onnx generate whisper_dir --audio talk.wav
    python -m fx2onnx generate granite_speech_dir "summarize the talk" --audio talk.wav
    python -m fx2onnx generate llava_dir "describe the image" --image cat.png
    python -m fx2onnx run bert_classifier_dir "the movie was great" --json
    python -m fx2onnx validate llama.onnx llama
    python -m fx2onnx compare llama.onnx llama_dynamo.onnx --model llama

    python -m fx2onnx scenarios --out scenarios_out --workers 2
    python -m fx2onnx scenarios --out out --cases OneTensor CondOnValue --exporters custom dynamo
    python -m fx2onnx models --only llama --address tcp://scheduler-host:8786
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from ..convert.errors import ConversionError, ExportError
from . import compare, export, generate, models, report, run, scenarios, validate

#: the commands in the order of the help
COMMANDS = (scenarios, export, generate, run, validate, compare, report, models)


def make_parser() -> argparse.ArgumentParser:
    """The parser with one subparser per command."""
    parser = argparse.ArgumentParser(prog="python -m fx2onnx", description="fx2onnx command line")
    commands = parser.add_subparsers(dest="command", required=True, metavar="command")
    for command in COMMANDS:
        command.add_parser(commands)
    return parser


def _quiet_imports() -> None:
    """No import noise on a command's output: transformers imports torchao (installed beside
    executorch), which logs its missing CUDA kernels and torch's pytree deprecations."""
    import logging

    for name in ("torchao", "torch.utils._pytree"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _what_was_written(command: str) -> str:
    """What an interrupted export leaves: nothing, or (Ctrl-C after the swap) the complete folder."""
    if command != "export":
        return ""
    from ..deploy.output_folder import committed_folders

    written = committed_folders()
    return f" after the folder was written: {written[-1]} is complete" if written else ": nothing was written"


def main(argv: Sequence[str] | None = None) -> int:
    """Parses ``argv`` and runs the command; returns the exit code (2 and one line on stderr
    for an input the command refuses: a folder of an unsupported task, a missing file...; 1 and the
    error's first line with the source line to change when the model cannot be captured or converted; 1 and one
    line naming the error for anything else)."""
    args = make_parser().parse_args(argv)
    _quiet_imports()
    if getattr(args, "address", None):  # the sweeps' runner reads it (fx2onnx.runner.run_tasks)
        os.environ["FX2ONNX_CLUSTER"] = args.address
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError) as e:
        if os.environ.get("FX2ONNX_TRACEBACK"):
            raise
        message = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM during an export: its temporary folder is already removed
        if os.environ.get("FX2ONNX_TRACEBACK"):
            raise
        print(f"error: interrupted{_what_was_written(args.command)}", file=sys.stderr)
        return 130
    except (ExportError, ConversionError) as e:
        # the model could not be captured or converted: its first line, then where the model's code does what
        # cannot be captured and the fix (the explanation's lines), not torch's traceback
        if os.environ.get("FX2ONNX_TRACEBACK"):
            raise
        lines = str(e).splitlines() or [type(e).__name__]
        hints = [line for line in lines[1:] if line.startswith(("The model reads", "Where the code", "  "))]
        print("\n".join([f"error: {lines[0]}", *hints[:6],
                         "(FX2ONNX_TRACEBACK=1 shows the whole error)"]), file=sys.stderr)
        return 1
    except Exception as e:  # a library's or the model's code raises what it raises: one line
        if os.environ.get("FX2ONNX_TRACEBACK"):
            raise
        reason = str(e).strip().splitlines()[0][:240] if str(e).strip() else ""
        print(f"error: {args.command} stopped on {type(e).__name__}: {reason} (nothing expected it: "
              f"FX2ONNX_TRACEBACK=1 shows where){_what_was_written(args.command)}", file=sys.stderr)
        return 1
