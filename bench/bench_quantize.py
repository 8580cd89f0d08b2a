"""Weight-only quantization of the benchmark Llama: fx2onnx's (``optimize(quantize=...)``) against
onnxruntime's own ``MatMulNBitsQuantizer`` on the same float model: time to quantize, the bytes
of the model and the accuracy of the logits (max and mean difference from eager float32, greedy
token agreement on teacher-forced positions and over generated tokens).

The float model is ``to_onnx(..., optimize="onnxruntime")`` of the Llama of ``bench_models.py``
(hidden 512, 4 layers, 8 heads, 2 kv heads, ffn 1376, vocab 32000). Accuracy is measured on
64 new tokens after 192 cached (random ids and a random cache, fixed seed): every position is
teacher forced (the input ids are given, not generated). Generation: ``fx2onnx.generate`` of
64 tokens after random 16-token prompts with the float32 model (checked equal to transformers'
greedy ``generate``) and with the quantized one, tokens compared position by position.

    python bench/bench_quantize.py [--quick] [--repeat 3] [--prompts 3] [--new-tokens 64]
"""

from __future__ import annotations

import argparse
import copy
import logging
import statistics
import time
import warnings

import numpy as np
import onnx
import onnx_ir as ir
import torch

import fx2onnx
from fx2onnx.optimizer.rules.quantize import ACCURACY_LEVEL, quantize_matmuls


def _float_model(quick: bool):
    import bench_models

    sc = bench_models.llama_decode(quick)
    with fx2onnx.torch_export_patches(patch_transformers=True):
        onx = fx2onnx.to_onnx(sc.model, (), copy.deepcopy(sc.export_kwargs), dynamic_shapes=sc.dynamic_shapes,
                              optimize="onnxruntime")
    return sc, onx


def ours(onx: onnx.ModelProto, bits: int) -> onnx.ModelProto:
    """The rule alone, from a ModelProto to a ModelProto (what the quantizer below does too)."""
    from onnx_ir.passes import common

    model = ir.from_proto(onx)
    quantize_matmuls(model, bits=bits, block_size=32, accuracy_level=ACCURACY_LEVEL)
    common.RemoveUnusedNodesPass()(model)
    return ir.to_proto(model)


def theirs(onx: onnx.ModelProto, bits: int) -> onnx.ModelProto:
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    config = DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=False, bits=bits, accuracy_level=ACCURACY_LEVEL)
    quantizer = MatMulNBitsQuantizer(onx, algo_config=config)
    quantizer.process()
    return quantizer.model.model


def _timed(fn, onx, bits, repeat):
    times, result = [], None
    for _ in range(repeat):
        copied = copy.deepcopy(onx)  # their quantizer edits the proto in place
        begin = time.perf_counter()
        result = fn(copied, bits)
        times.append(time.perf_counter() - begin)
    return result, statistics.median(times)


def accuracy(onx: onnx.ModelProto, model: torch.nn.Module, inputs: dict, expected: np.ndarray) -> dict[str, float]:
    from fx2onnx.validation import run_onnx

    got = run_onnx(onx, (), copy.deepcopy(inputs))[0]
    diff = np.abs(got - expected)
    return dict(max_diff=float(diff.max()), mean_diff=float(diff.mean()),
                argmax_agree=float((got.argmax(-1) == expected.argmax(-1)).mean()))


def greedy_agreement(float_onx, quantized_onx, model, prompts: int, new_tokens: int) -> str:
    """Generates ``new_tokens`` greedily from random prompts with both models (fx2onnx.generate);
    the float32 tokens are checked against transformers' greedy generate first."""
    gen = torch.Generator().manual_seed(5)
    equal, first_differences = 0, []
    for _ in range(prompts):
        prompt = torch.randint(0, model.config.vocab_size, (1, 16), generator=gen)
        with torch.no_grad():
            expected = model.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                                      pad_token_id=0)[:, 16:]
        reference = fx2onnx.generate(float_onx, prompt, new_tokens)[:, 16:]
        assert torch.equal(reference, expected), "the float32 model does not generate what transformers does"
        got = fx2onnx.generate(quantized_onx, prompt, new_tokens)[:, 16:]
        same = (got == reference)[0]
        equal += int(same.sum())
        first_differences.append(int((~same).nonzero()[0, 0]) if not bool(same.all()) else new_tokens)
    return (f"{equal}/{prompts * new_tokens} ({equal / (prompts * new_tokens):.1%}), first difference at "
            f"{first_differences}")


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the tiny Llama of bench_models --quick")
    parser.add_argument("--repeat", type=int, default=3, help="quantizations timed (median)")
    parser.add_argument("--prompts", type=int, default=3, help="prompts generated from (0: none)")
    parser.add_argument("--new-tokens", type=int, default=64, help="tokens generated per prompt")
    options = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    import onnxruntime.quantization.matmul_nbits_quantizer  # noqa: F401  (it sets the root logger to INFO)

    logging.getLogger().setLevel(logging.WARNING)
    logging.getLogger("onnxruntime.quantization").setLevel(logging.WARNING)
    torch.set_num_threads(1)
    from fx2onnx.models.tiny import _decoder_inputs

    sc, onx = _float_model(options.quick)
    inputs = _decoder_inputs(sc.model.config, 1, 64, 192, with_cache=True, position_ids=True,
                             generator=torch.Generator().manual_seed(11))
    with torch.no_grad():
        expected = sc.model(**copy.deepcopy(inputs)).logits.numpy()
    print(f"float32 logits: std {expected.std():.3f}, mean gap top-1 - top-2 "
          f"{np.mean(np.diff(np.sort(expected, -1)[..., -2:], axis=-1)):.4f}")
    rows = [dict(quantizer="float32", bits=32, seconds=0.0, model_mb=onx.ByteSize() / 2**20,
                 **accuracy(onx, sc.model, inputs, expected))]
    for bits in (4, 8):
        results = {}
        for name, fn in (("fx2onnx", ours), ("onnxruntime", theirs)):
            quantized, seconds = _timed(fn, onx, bits, options.repeat)
            results[name] = quantized
            rows.append(dict(quantizer=name, bits=bits, seconds=seconds, model_mb=quantized.ByteSize() / 2**20,
                             **accuracy(quantized, sc.model, inputs, expected)))
        from fx2onnx.validation import run_onnx

        a, b = (run_onnx(results[k], (), copy.deepcopy(inputs))[0] for k in ("fx2onnx", "onnxruntime"))
        print(f"int{bits}: max |fx2onnx - onnxruntime| logits {np.abs(a - b).max():.3g}")
        if options.prompts:
            agreement = greedy_agreement(onx, results["fx2onnx"], sc.model, options.prompts, options.new_tokens)
            print(f"int{bits}: greedy tokens equal to float32 (fx2onnx.generate, {options.prompts} prompts of 16 "
                  f"tokens, {options.new_tokens} new): {agreement}")
    import pandas

    frame = pandas.DataFrame(rows)
    with pandas.option_context("display.width", 200, "display.max_columns", 20):
        print(frame.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    return rows


if __name__ == "__main__":
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
