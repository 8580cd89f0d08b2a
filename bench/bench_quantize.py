"""Weight-only quantization of the benchmark Llama: fx2onnx's (``optimize(quantize=...)``) against
onnxruntime's own ``MatMulNBitsQuantizer`` on the same float model: time to quantize, the bytes
of the model and the accuracy of the logits (max and mean difference from eager float32, greedy
token agreement on teacher-forced positions and over generated tokens).

The float model is ``to_onnx(..., optimize="onnxruntime")`` of the Llama of ``bench_models.py``
(hidden 512, 4 layers, 8 heads, 2 kv heads, ffn 1376, vocab 32000) with the weights
``trained_llama.py`` trains on a synthetic text-like corpus (``--weights random``: the random
weights of bench_models). Teacher forced: the logits of the 256 positions of a text of that
corpus (a seed the training never used), one call with an empty cache. Generation:
``fx2onnx.generate`` of 64 tokens after 4 prompts of 32 tokens of the corpus with the float32
model (checked equal to transformers' greedy ``generate``) and with each quantized one, tokens
compared position by position. Variants: int4 with blocks of 32 and 16, int4 with
``accuracy_level=0`` (float activations), int8; onnxruntime's quantizer with the same options
gives the same bytes (checked).

    python bench/bench_quantize.py [--quick] [--weights trained|random] [--repeat 3] [--prompts 4] [--new-tokens 64]
"""

from __future__ import annotations

import argparse
import copy
import logging
import statistics
import time
import warnings
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import torch

import fx2onnx
from fx2onnx.optimizer.rules.quantize import ACCURACY_LEVEL, quantize_matmuls


def _float_model(quick: bool, weights: str):
    """The benchmark Llama (trained weights, see trained_llama.py, or random ones) and its float32
    export at level onnxruntime."""
    import bench_models
    import trained_llama

    if weights == "trained":
        tiny = trained_llama.trained_llama(quick, verbose=True)
        model, kwargs, ds = tiny.model, tiny.inputs, tiny.dynamic_shapes
    else:
        sc = bench_models.llama_decode(quick)
        model, kwargs, ds = sc.model, sc.export_kwargs, sc.dynamic_shapes
        model.generation_config.eos_token_id = None
    with fx2onnx.torch_export_patches(patch_transformers=True):
        onx = fx2onnx.to_onnx(model, (), copy.deepcopy(kwargs), dynamic_shapes=ds, optimize="onnxruntime")
    return model, onx


def ours(onx: onnx.ModelProto, bits: int, block_size: int = 32, accuracy_level: int = ACCURACY_LEVEL,
         symmetric: bool = False) -> onnx.ModelProto:
    """The rule alone, from a ModelProto to a ModelProto (what the quantizer below does too)."""
    from onnx_ir.passes import common

    model = ir.from_proto(onx)
    quantize_matmuls(model, bits=bits, block_size=block_size, accuracy_level=accuracy_level, symmetric=symmetric)
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


def onnx_logits(onx: onnx.ModelProto, ids: torch.Tensor) -> np.ndarray:
    """The logits of every position of ``ids`` (one call, an empty cache), as a prefill computes them."""
    from fx2onnx.runtime.generate import CacheSignature, _empty_array
    from fx2onnx.validation import make_session

    sess = make_session(onx)
    sig = CacheSignature.from_session(sess)
    batch, length = ids.shape
    feeds = {"input_ids": ids.numpy(), "attention_mask": np.ones((batch, length), dtype=np.int64)}
    if sig.has_position_ids:
        feeds["position_ids"] = np.arange(length, dtype=np.int64)[None].repeat(batch, 0)
    feeds.update({name: _empty_array(shape, batch, t) for name, _, shape, t in sig.cache})
    return sess.run([sig.logits], feeds)[0]


def accuracy(onx: onnx.ModelProto, text: torch.Tensor, expected: np.ndarray) -> dict[str, float]:
    """Logits of every position of a text (teacher forced) against eager float32."""
    got = onnx_logits(onx, text)
    diff = np.abs(got - expected)
    return dict(max_diff=float(diff.max()), mean_diff=float(diff.mean()),
                argmax_agree=float((got.argmax(-1) == expected.argmax(-1)).mean()))


def greedy_agreement(reference: torch.Tensor, quantized_onx, prompts: torch.Tensor) -> dict[str, Any]:
    """Generates as many tokens as ``reference`` (the float32 tokens) from each prompt with the quantized
    model (fx2onnx.generate) and compares them position by position."""
    length, new_tokens = prompts.shape[1], reference.shape[1]
    got = fx2onnx.generate(quantized_onx, prompts, new_tokens)[:, length:]
    same = got == reference
    first = [int((~row).nonzero()[0, 0]) if not bool(row.all()) else new_tokens for row in same]
    return dict(generated_equal=float(same.float().mean()), first_difference=first)


def float_tokens(model, float_onx, prompts: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """The new tokens of the float32 ONNX model, checked equal to transformers' greedy generate."""
    length = prompts.shape[1]
    with torch.no_grad():
        expected = model.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=new_tokens,
                                  min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)[:, length:]
    got = fx2onnx.generate(float_onx, prompts, new_tokens)[:, length:]
    assert torch.equal(got, expected), f"float32 generates {got.tolist()}, transformers {expected.tolist()}"
    return got


#: (name, bits, block size, accuracy_level, symmetric) of the variants measured beside onnxruntime's quantizer
VARIANTS = (
    ("fx2onnx int4 b32", 4, 32, ACCURACY_LEVEL, False),
    ("fx2onnx int4 b32 sym", 4, 32, ACCURACY_LEVEL, True),
    ("fx2onnx int4 b16", 4, 16, ACCURACY_LEVEL, False),
    ("fx2onnx int4 b32 acc0", 4, 32, 0, False),
    ("fx2onnx int8 b32", 8, 32, ACCURACY_LEVEL, False),
    ("fx2onnx int8 b32 sym", 8, 32, ACCURACY_LEVEL, True),
)


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the tiny Llama of bench_models --quick")
    parser.add_argument("--weights", choices=["trained", "random"], default="trained",
                        help="trained: trained_llama.py (cached), random: bench_models' random weights")
    parser.add_argument("--repeat", type=int, default=3, help="quantizations timed (median)")
    parser.add_argument("--prompts", type=int, default=4, help="prompts generated from (0: none)")
    parser.add_argument("--prompt-length", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64, help="tokens generated per prompt")
    options = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    import onnxruntime.quantization.matmul_nbits_quantizer  # noqa: F401  (it sets the root logger to INFO)

    logging.getLogger().setLevel(logging.WARNING)
    logging.getLogger("onnxruntime.quantization").setLevel(logging.WARNING)
    torch.set_num_threads(1)
    import trained_llama

    model, onx = _float_model(options.quick, options.weights)
    vocab = model.config.vocab_size
    if options.weights == "trained":  # texts of the corpus the model was trained on, seeds it never saw
        corpus = trained_llama.Corpus(vocab)
        text = corpus.sample(1, 256, seed=77)
        prompts = corpus.sample(options.prompts, options.prompt_length, seed=78) if options.prompts else None
    else:
        gen = torch.Generator().manual_seed(5)
        text = torch.randint(3, vocab, (1, 256), generator=gen)
        prompts = torch.randint(3, vocab, (options.prompts, options.prompt_length), generator=gen)
    with torch.no_grad():
        expected = model(input_ids=text).logits.numpy()
    top2 = np.sort(expected, -1)[..., -2:]
    probs = torch.softmax(torch.from_numpy(expected), -1).max(-1).values
    print(f"float32 logits ({options.weights} weights, 256 teacher-forced positions): std {expected.std():.3f}, "
          f"mean gap top-1 - top-2 {np.mean(top2[..., 1] - top2[..., 0]):.3f}, median top-1 probability "
          f"{float(probs.median()):.3f}, loss {float(torch.nn.functional.cross_entropy(torch.from_numpy(expected[0, :-1]), text[0, 1:])):.3f}")
    if prompts is not None:
        reference = float_tokens(model, onx, prompts, options.new_tokens)
        print(f"float32: fx2onnx.generate equals transformers' greedy generate ({options.prompts} prompts of "
              f"{options.prompt_length} tokens, {options.new_tokens} new)")
    rows = [dict(quantizer="float32", seconds=0.0, model_mb=onx.ByteSize() / 2**20, **accuracy(onx, text, expected))]
    models = {}
    for name, bits, block, level, symmetric in VARIANTS:
        begin = time.perf_counter()
        models[name] = ours(copy.deepcopy(onx), bits, block, level, symmetric)
        rows.append(dict(quantizer=name, seconds=time.perf_counter() - begin, model_mb=models[name].ByteSize() / 2**20,
                         **accuracy(models[name], text, expected)))
    for bits in (4, 8):  # onnxruntime's quantizer, same options as the first variants: same bytes
        quantized, seconds = _timed(theirs, onx, bits, options.repeat)
        _, our_seconds = _timed(ours, onx, bits, options.repeat)
        ours_model = models[f"fx2onnx int{bits} b32"]
        same = len(ours_model.graph.initializer) == len(quantized.graph.initializer) and all(
            a.raw_data == b.raw_data for a, b in zip(
            sorted(ours_model.graph.initializer, key=lambda t: t.name), sorted(quantized.graph.initializer, key=lambda t: t.name)))
        print(f"int{bits}: onnxruntime's MatMulNBitsQuantizer {seconds:.2f} s, fx2onnx {our_seconds:.2f} s (medians of "
              f"{options.repeat}), max |logits difference| "
              f"{np.abs(onnx_logits(quantized, text) - onnx_logits(ours_model, text)).max():.3g}, "
              f"initializers byte-identical: {same}")
    if prompts is not None:
        for row in rows[1:]:
            row.update(greedy_agreement(reference, models[row["quantizer"]], prompts))
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
