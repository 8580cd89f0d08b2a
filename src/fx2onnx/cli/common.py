"""What several commands share: the model argument, tolerances, the zoos' options, a progress bar over steps."""

from __future__ import annotations

import argparse


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--with-cache", action="store_true", help="tiny architectures: add a past_key_values cache (a checkpoint folder of a causal LM has it by default)")
    parser.add_argument("--atol", type=float, default=1e-4, help="absolute tolerance")
    parser.add_argument("--rtol", type=float, default=1e-3, help="relative tolerance")


def add_zoo_arguments(parser: argparse.ArgumentParser, exporters: list[str], timeout: float) -> None:
    """The options shared by the two zoos (scenarios and models): exporters, workers, timeout, cache."""
    parser.add_argument("--exporters", nargs="*", choices=exporters, help="exporters (default: all)")
    parser.add_argument("--workers", type=int, default=2,
                        help="worker processes of the local cluster (0: in this process)")
    parser.add_argument("--address", default=None,
                        help="the scheduler of a running dask cluster (tcp://host:8786), 'local' (a local cluster, "
                        "the default) or 'pool' (no engine); default: the environment variable FX2ONNX_CLUSTER")
    parser.add_argument("--timeout", type=float, default=timeout, help="seconds before a task is killed")
    parser.add_argument("--no-cache", action="store_true", help="run again even if the sources did not change")


#: the model argument of export, validate, compare and report
MODEL_HELP = "module:attribute (a function returning (model, inputs[, dynamic_shapes]), a Module "
MODEL_HELP += "instance or class with example_inputs) or a tiny transformers architecture (llama, phi3...)"
EXPORT_MODEL_HELP = MODEL_HELP + ", or a save_pretrained folder (config.json and safetensors files)"


def steps(names: list[str], enabled: bool = True):
    """A tqdm progress bar over named steps (written on stderr)."""
    from tqdm.auto import tqdm

    return tqdm(names, disable=not enabled, unit="step", leave=False)

