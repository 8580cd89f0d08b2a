"""A Whisper folder of a published config: export time, files, and the loop against transformers' generate.

Writes a bf16 ``save_pretrained`` folder of whisper-tiny or whisper-base (the published widths,
random weights seeded, the tokenizer made in code with Whisper's special tokens, the published
vocabulary size kept), then:

* per precision (``--precisions float32,int4``): ``python -m fx2onnx export FOLDER --out OUT
  --no-validate [--quantize int4]`` in a child process (the pieces' check against eager is left
  out: the builder has none): wall time, peak RSS (the child's ``VmHWM``), the size of the folder;
* ``python -m onnxruntime_genai.models.builder -i FOLDER -o OUT -p fp32|int4 -e cpu`` (its Whisper
  builder): the same measures;
* the fx2onnx loop (:class:`fx2onnx.runtime.speech.SpeechGenerator`), onnxruntime-genai's
  ``Generator`` on its folder (the same input features and decoder prompt, interleaved rounds,
  same threads) and transformers' eager ``generate`` (float32) on the same chirp: the first
  token's latency (the encoder included), the decoding tokens/s, and whether the greedy tokens
  are equal. The random model may stop early: the end of text token is suppressed
  (``suppress_tokens``, which onnxruntime-genai does not apply) so that ``--tokens`` are made.

The best of ``--rounds`` interleaved rounds is kept; ``--json`` writes the rows (the gallery page
:ref:`l-plot-multimodal-bench` plots those stored in ``_doc/bench/multimodal.json``).

    python bench/bench_speech.py --model whisper-tiny --tokens 64 --threads 2
    python bench/bench_speech.py --model whisper-base --precisions float32,int4 --json whisper-base.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_deploy import export_both, folder_size, report  # noqa: E402

#: published configs (values from the models' config.json files)
CONFIGS = {
    "whisper-tiny": dict(d_model=384, encoder_layers=4, decoder_layers=4, encoder_attention_heads=6,
                         decoder_attention_heads=6, encoder_ffn_dim=1536, decoder_ffn_dim=1536, num_mel_bins=80,
                         max_source_positions=1500, max_target_positions=448, vocab_size=51865),
    "whisper-base": dict(d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
                         decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048, num_mel_bins=80,
                         max_source_positions=1500, max_target_positions=448, vocab_size=51865),
}


def _genai_run(folder: str, features: np.ndarray, prompt: list[int], tokens: int, threads: int):
    """onnxruntime-genai's loop on its folder: (new tokens, first token seconds, decode tokens/s)."""
    import onnxruntime_genai as og

    config = og.Config(folder)
    config.overlay(json.dumps({"model": {"encoder": {"session_options": {"intra_op_num_threads": threads}},
                                         "decoder": {"session_options": {"intra_op_num_threads": threads}}}}))
    model = og.Model(config)
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(prompt) + tokens, do_sample=False)
    begin = time.perf_counter()
    generator = og.Generator(model, params)
    named = og.NamedTensors()
    named["audio_features"] = features.astype(np.float32)
    named["input_ids"] = np.array([prompt], dtype=np.int32)
    generator.set_inputs(named)
    new, steps, first = [], [], 0.0
    while not generator.is_done():
        step = time.perf_counter()
        generator.generate_next_token()
        steps.append(time.perf_counter() - step)
        new.append(int(generator.get_next_tokens()[0]))
        first = first or time.perf_counter() - begin  # the encoder (run by set_inputs or the first step) included
    return new, first, (len(steps) - 1) / sum(steps[1:]) if len(steps) > 1 else float("nan")


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(CONFIGS), default="whisper-tiny")
    parser.add_argument("--precisions", default="float32,int4")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0, help="the length of the chirp")
    parser.add_argument("--json", default=None, help="write the rows there")
    args = parser.parse_args(argv)

    import torch
    import transformers

    from fx2onnx.testing.speech_folder import write_whisper_folder
    from fx2onnx.runtime.speech import SpeechGenerator, read_wav, write_wav

    torch.set_num_threads(args.threads)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as root:
        folder, wav = os.path.join(root, "checkpoint"), os.path.join(root, "talk.wav")
        write_whisper_folder(transformers.WhisperConfig(**CONFIGS[args.model]), folder, "bfloat16", std=0.05,
                             keep_vocab=True)
        config = json.load(open(os.path.join(folder, "generation_config.json")))
        config["suppress_tokens"] = sorted(set(config["suppress_tokens"]) | {config["eos_token_id"]})
        json.dump(config, open(os.path.join(folder, "generation_config.json"), "w"))
        t = np.arange(int(args.seconds * 16000)) / 16000
        write_wav(wav, 0.5 * np.sin(2 * np.pi * (200 + 600 * t / args.seconds) * t))

        model = transformers.WhisperForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).eval()
        extractor = transformers.AutoFeatureExtractor.from_pretrained(folder)
        features = extractor(read_wav(wav), sampling_rate=16000, return_tensors="pt")["input_features"]
        with torch.no_grad():
            model.generate(features, max_new_tokens=4, language="en")
            begin = time.perf_counter()
            expected = model.generate(features, max_new_tokens=args.tokens, language="en")[0].tolist()
            eager_seconds = time.perf_counter() - begin
        del model
        print(f"transformers eager float32 generate: {len(expected)} tokens in {eager_seconds:.3f} s "
              f"({len(expected) / eager_seconds:.1f} tokens/s, the encoder included)")

        for precision in args.precisions.split(","):
            measures = export_both(folder, root, precision, builder_may_fail=True)
            ours, genai = measures["fx2onnx"][0], measures.get("onnxruntime-genai", (None,))[0]
            gen = SpeechGenerator(ours, threads=args.threads)
            gen.transcribe(wav, 4, language="en")  # warm up
            inputs = gen.features(wav)
            best: dict[str, tuple] = {}
            for _ in range(args.rounds):  # interleaved rounds, the best of each
                result = gen.transcribe(wav, args.tokens, language="en")
                times = result.times
                found = [(result.new_ids[0], result.encoder_seconds + times.prefill_total,
                          times.decode_steps / times.decode_total, "fx2onnx")]
                if "onnxruntime-genai" in measures:
                    theirs, first, speed = _genai_run(genai, inputs, result.prompt_ids[0], args.tokens, args.threads)
                    found.append((theirs, first, speed, "onnxruntime-genai"))
                for tokens, first, speed, name in found:
                    previous = best.get(name, (None, first, speed))
                    best[name] = (tokens, min(first, previous[1]), max(speed, previous[2]))
            ours_tokens = best["fx2onnx"][0]
            for name, (out, m) in measures.items():
                tokens, first, speed = best[name]
                rows.append(dict(model=args.model, precision=precision, exporter=name, export_s=round(m["seconds"], 1),
                                 peak_rss_gb=round(m["peak_rss"] / 1e9, 2),
                                 size_mb=round(folder_size(out) / 1e6, 1),
                                 first_token_ms=round(first * 1000), decode_tok_s=round(speed, 1),
                                 same_as_ours=tokens[: len(ours_tokens)] == ours_tokens,
                                 same_as_transformers=tokens[: len(expected)] == expected[: len(tokens)]))
            print(json.dumps(rows[-len(measures):]), flush=True)
            gen = None
            for out, _ in measures.values():
                shutil.rmtree(out, ignore_errors=True)
    report(rows, args.json)
    return rows


if __name__ == "__main__":
    main()
