"""A Whisper folder of a published config: export time, files, and the loop against transformers' generate.

Writes a bf16 ``save_pretrained`` folder of whisper-tiny or whisper-base (the published widths,
random weights seeded, the tokenizer made in code with Whisper's special tokens, the published
vocabulary size kept), then:

* ``python -m fx2onnx export FOLDER --out OUT`` in a child process: wall time, peak RSS (the
  child's ``VmHWM``, printed by the command), the size of the folder;
* ``python -m onnxruntime_genai.models.builder -i FOLDER -o OUT -p fp32 -e cpu`` (its Whisper
  builder, when installed): the same measures;
* the fx2onnx loop (:class:`fx2onnx.runtime.speech.SpeechGenerator`), onnxruntime-genai's
  ``Generator`` on its folder (the same input features and decoder prompt, interleaved rounds,
  same threads) and transformers' eager ``generate`` (float32) on the same chirp: the first
  token's latency (the encoder included), the decoding tokens/s, and whether the greedy tokens
  are equal. The random model may stop early: the end of text token is suppressed
  (``suppress_tokens``, which onnxruntime-genai does not apply) so that ``--tokens`` are made.

    python bench/bench_speech.py --model whisper-tiny --tokens 64 --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(CONFIGS), default="whisper-tiny")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=5.0, help="the length of the chirp")
    args = parser.parse_args()

    import torch
    import transformers

    from fx2onnx.models.speech_folder import write_whisper_folder
    from fx2onnx.runtime.speech import SpeechGenerator, read_wav, write_wav

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as root:
        folder, out, wav = (os.path.join(root, n) for n in ("checkpoint", "onnx", "talk.wav"))
        write_whisper_folder(transformers.WhisperConfig(**CONFIGS[args.model]), folder, "bfloat16", std=0.05,
                             keep_vocab=True)
        config = json.load(open(os.path.join(folder, "generation_config.json")))
        config["suppress_tokens"] = sorted(set(config["suppress_tokens"]) | {config["eos_token_id"]})
        json.dump(config, open(os.path.join(folder, "generation_config.json"), "w"))
        t = np.arange(int(args.seconds * 16000)) / 16000
        write_wav(wav, 0.5 * np.sin(2 * np.pi * (200 + 600 * t / args.seconds) * t))

        begin = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "fx2onnx", "export", folder, "--out", out, "--quiet"],
                              capture_output=True, text=True)
        export_seconds = time.perf_counter() - begin
        if done.returncode:
            raise SystemExit(done.stdout + done.stderr)
        size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
        print(f"{args.model}: export {export_seconds:.1f} s (child process), {size / 2**20:.1f} MiB")
        print("   " + done.stdout.strip().replace("\n", "\n   "))

        genai = os.path.join(root, "genai")
        begin = time.perf_counter()
        built = subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", folder, "-o", genai,
                                "-p", "fp32", "-e", "cpu"], capture_output=True, text=True)
        if built.returncode:
            print("onnxruntime-genai's builder failed: " + (built.stderr.strip().splitlines() or ["?"])[-1])
            genai = None
        else:
            size = sum(os.path.getsize(os.path.join(genai, f)) for f in os.listdir(genai))
            print(f"onnxruntime-genai builder: {time.perf_counter() - begin:.1f} s (child process), {size / 2**20:.1f} MiB")

        gen = SpeechGenerator(out, threads=args.threads)
        gen.transcribe(wav, 4, language="en")  # warm up
        features = gen.features(wav)
        for round_ in range(3):
            result = gen.transcribe(wav, args.tokens, language="en")
            times = result.times
            ours = times.decode_steps / times.decode_total
            line = (f"round {round_}: fx2onnx first token {(result.encoder_seconds + times.prefill_total) * 1000:.0f} ms, "
                    f"decode {ours:.1f} tokens/s")
            if genai:
                theirs, first, speed = _genai_run(genai, features, result.prompt_ids[0], args.tokens, args.threads)
                line += (f" | onnxruntime-genai first token {first * 1000:.0f} ms, decode {speed:.1f} tokens/s | "
                         f"tokens equal: {theirs[: len(result.new_ids[0])] == result.new_ids[0]}")
            print(line)

        model = transformers.WhisperForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).eval()
        extractor = transformers.AutoFeatureExtractor.from_pretrained(folder)
        features = extractor(read_wav(wav), sampling_rate=16000, return_tensors="pt")["input_features"]
        with torch.no_grad():
            model.generate(features, max_new_tokens=4, language="en")
            begin = time.perf_counter()
            expected = model.generate(features, max_new_tokens=args.tokens, language="en")
            eager_seconds = time.perf_counter() - begin
        equal = expected[0].tolist() == result.new_ids[0]
        print(f"fx2onnx loop: encoder {result.encoder_seconds * 1000:.1f} ms, first token "
              f"{(result.encoder_seconds + times.prefill_total) * 1000:.1f} ms, decode {times.decode_steps} tokens "
              f"at {ours:.1f} tokens/s ({(result.encoder_seconds + times.prefill_total + times.decode_total):.3f} s "
              "in all)")
        print(f"transformers eager float32 generate: {len(expected[0])} tokens in {eager_seconds:.3f} s "
              f"({len(expected[0]) / eager_seconds:.1f} tokens/s, the encoder included); greedy tokens equal: {equal}")


if __name__ == "__main__":
    main()
