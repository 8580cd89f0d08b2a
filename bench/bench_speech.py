"""A Whisper folder of a published config: export time, files, and the loop against transformers' generate.

Writes a bf16 ``save_pretrained`` folder of whisper-tiny or whisper-base (the published widths,
random weights seeded, the tokenizer made in code with Whisper's special tokens, the published
vocabulary size kept), then:

* ``python -m fx2onnx export FOLDER --out OUT`` in a child process: wall time, peak RSS (the
  child's ``VmHWM``, printed by the command), the size of the folder;
* the fx2onnx loop (:class:`fx2onnx.runtime.speech.SpeechGenerator`) and transformers' eager
  ``generate`` (float32, same threads) on the same chirp: the encoder's time, the decoding
  tokens/s, and whether the greedy tokens are equal. The random model may stop early: the end
  of text token is suppressed on both sides (``suppress_tokens``) so that ``--tokens`` are made.

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

        gen = SpeechGenerator(out, threads=args.threads)
        gen.transcribe(wav, 4, language="en")  # warm up
        result = gen.transcribe(wav, args.tokens, language="en")
        times = result.times
        ours = times.decode_steps / times.decode_total

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
