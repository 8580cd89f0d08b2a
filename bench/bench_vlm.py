"""A Qwen2.5-VL folder of published widths: fx2onnx's two pieces beside onnxruntime-genai's builder.

Writes a bf16 ``save_pretrained`` folder of Qwen2.5-VL-3B-Instruct's published widths (text:
hidden 2048, 16 heads, 2 key-value heads, MLP 11008, vocabulary 151936 tied; vision: hidden 1280,
16 heads, MLP 3420, patches of 14 pixels, windows of 112 pixels) with **fewer layers**
(``--text-layers`` of 36, ``--vision-depth`` of 32, a full-attention block every 4), random
weights seeded, the tokenizer and processor made in code (images resized to at most
``--max-patches`` patches). Then, per precision (float32, int4):

* ``python -m fx2onnx export FOLDER --out OUT`` (the vision piece and the decoder) and
  ``python -m onnxruntime_genai.models.builder -i FOLDER -o OUT -p fp32|int4 -e cpu``, each in a
  child process: wall time, peak RSS, files size (all, and the text decoder's alone). The builder writes **the text model only** for
  this architecture ("the vision and audio components are not supported"): its folder runs a
  prompt of token ids, no image;
* the loops, interleaved rounds, same onnxruntime and threads: ours on an image made in code and
  a prompt (:class:`fx2onnx.runtime.vision.VisionGenerator`: the processor, the vision piece, the
  multimodal positions, the decoder): first-token latency (vision included) and decode tokens/s;
  onnxruntime-genai's ``Generator`` on the same token ids (the image placeholders as plain ids):
  first-token latency (``text_first_token_ms``: ours is the decoder's prefill alone) and decode
  tokens/s. Tokens are compared on a text-only prompt (our decoder with no
  image features): equal in float32 shows both folders compute the same model.

    python bench/bench_vlm.py --precisions float32,int4 --new 32 --threads 2
    python bench/bench_vlm.py --text-layers 2 --vision-depth 4 --precisions float32 --new 8   # quick
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
from bench_deploy import export_both, folder_size, report, run_genai  # noqa: E402

#: Qwen2.5-VL-3B-Instruct's published values (config.json), the depths set by the command line
TEXT = dict(hidden_size=2048, intermediate_size=11008, num_attention_heads=16, num_key_value_heads=2,
            max_position_embeddings=128000, rms_norm_eps=1e-6, vocab_size=151936, tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": [16, 24, 24]})
VISION = dict(hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=2048, patch_size=14,
              spatial_merge_size=2, temporal_patch_size=2, window_size=112, hidden_act="silu", in_channels=3)


def qwen2_5_vl_config(text_layers: int, vision_depth: int):
    """Qwen2.5-VL-3B's widths with ``text_layers`` decoder layers and ``vision_depth`` vision blocks
    (the last of every 4 attends over the whole image, as the published 7, 15, 23, 31)."""
    import transformers

    text = transformers.Qwen2_5_VLTextConfig(num_hidden_layers=text_layers, **TEXT)
    vision = transformers.Qwen2_5_VLVisionConfig(depth=vision_depth, fullatt_block_indexes=list(
        range(3, vision_depth, 4)) or [vision_depth - 1], **VISION)
    return transformers.Qwen2_5_VLConfig(text_config=text.to_dict(), vision_config=vision.to_dict(),
                                         tie_word_embeddings=True,
                                         architectures=["Qwen2_5_VLForConditionalGeneration"])


def make_image(side: int):
    """A colour gradient with a few discs, made in code (no download)."""
    from PIL import Image

    y, x = np.mgrid[0:side, 0:side] / side
    rgb = np.stack([x, y, 1 - x * y], axis=-1)
    for cx, cy, r in [(0.3, 0.3, 0.15), (0.7, 0.6, 0.2)]:
        rgb[(x - cx) ** 2 + (y - cy) ** 2 < r * r] = (0.9, 0.2, 0.1)
    return Image.fromarray((rgb * 255).astype(np.uint8))


def run_ours(folder: str, image, prompt: str, new: int, threads: int):
    """Our loop on an image and a prompt: (new ids, first-token seconds with the vision piece,
    decode seconds, decode steps, the decoder's prefill seconds alone), and the prompt's token ids."""
    from fx2onnx.runtime.vision import VisionGenerator

    gen = VisionGenerator(folder, threads=threads)
    inputs = gen.inputs(prompt, [image])

    def once():
        begin = time.perf_counter()
        tokens = gen.generate_ids(inputs, new)
        total = time.perf_counter() - begin
        t = gen.decoder.last_times
        return [int(i) for i in tokens[0, inputs["input_ids"].shape[1]:]], total - t.decode_total, t.decode_total, \
            t.decode_steps, t.prefill_total

    return once, [int(i) for i in inputs["input_ids"][0]], gen


def ours_text_only(gen, ids: list[int], new: int) -> list[int]:
    """Our decoder on a prompt without image: no features, the three rows of positions equal."""
    from fx2onnx.runtime.mrope import rope_index

    hidden = next(i for i in gen.decoder.session.get_inputs() if i.name == gen.feature_names[0]).shape[-1]
    prompt = np.array([ids], dtype=np.int64)
    tokens = gen.decoder.generate(prompt, new, eos_token_id=None, constants={
        gen.feature_names[0]: np.zeros((0, hidden), dtype=np.float32)},
        position_ids=rope_index(prompt, np.zeros((0, 3), dtype=np.int64), gen.image_token_id, gen.merge_size))
    return [int(i) for i in tokens[0, len(ids):]]


def text_size(folder: str, exporter: str) -> int:
    """The bytes of the text decoder's files: ours ``decoder.onnx*``, the builder's ``model.onnx*``."""
    prefix = "decoder.onnx" if exporter == "fx2onnx" else "model.onnx"
    return sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder) if f.startswith(prefix))


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--text-layers", type=int, default=8, help="of the published 36")
    parser.add_argument("--vision-depth", type=int, default=8, help="of the published 32")
    parser.add_argument("--max-patches", type=int, default=256, help="the processor's largest image, in patches")
    parser.add_argument("--precisions", default="float32,int4")
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", default=None, help="write the rows there")
    parser.add_argument("--merge", action="store_true", help="replace the rows of the same model, precision and "
                        "exporter in --json, keep the others")
    args = parser.parse_args(argv)

    from fx2onnx.testing.vlm_folder import write_qwen2_5_vl_folder

    rows: list[dict] = []
    image = make_image(224)
    with tempfile.TemporaryDirectory() as work:
        checkpoint = os.path.join(work, "checkpoint")
        config = qwen2_5_vl_config(args.text_layers, args.vision_depth)
        write_qwen2_5_vl_folder(config, checkpoint, "bfloat16", std=0.02, max_patches=args.max_patches,
                                keep_vocab=True)
        with open(os.path.join(checkpoint, "generation_config.json")) as f:
            generation = json.load(f)
        generation["eos_token_id"] = None  # random weights: every token asked for is made
        with open(os.path.join(checkpoint, "generation_config.json"), "w") as f:
            json.dump(generation, f)
        text_ids = [int(i) for i in np.random.default_rng(0).integers(3, 300, 24)]
        for precision in args.precisions.split(","):
            measures = export_both(checkpoint, work, precision, builder_may_fail=True)
            ours, theirs = measures["fx2onnx"][0], measures.get("onnxruntime-genai", (None,))[0]
            ours_once, prompt_ids, gen = run_ours(ours, image, "Describe the image.", args.new, args.threads)
            loops = {"fx2onnx": ours_once}
            if "onnxruntime-genai" in measures:
                loops["onnxruntime-genai"] = run_genai(theirs, prompt_ids, args.new, args.threads)
            best: dict[str, tuple] = {}
            for _ in range(args.rounds):  # interleaved rounds, the best of each
                for name, once in loops.items():
                    tokens, first, decode, steps, *prefill = once()
                    prefill = prefill[0] if prefill else first  # the builder's folder: no vision piece
                    previous = best.get(name, (None, first, decode, steps, prefill))
                    best[name] = (tokens, min(first, previous[1]), min(decode, previous[2]), steps,
                                  min(prefill, previous[4]))
            same = None
            if "onnxruntime-genai" in loops:
                theirs_text = run_genai(theirs, text_ids, args.new, args.threads)()[0]
                same = ours_text_only(gen, text_ids, args.new) == theirs_text
            for name, (folder, m) in measures.items():
                tokens, first, decode, steps, prefill = best[name]
                rows.append(dict(model=f"qwen2.5-vl-3b widths, {args.text_layers}+{args.vision_depth} layers",
                                 precision=precision, exporter=name, export_s=round(m["seconds"], 1),
                                 peak_rss_gb=round(m["peak_rss"] / 1e9, 2), size_mb=round(folder_size(folder) / 1e6),
                                 text_mb=round(text_size(folder, name) / 1e6),
                                 prompt=len(prompt_ids), image=name == "fx2onnx",
                                 first_token_ms=round(first * 1000), text_first_token_ms=round(prefill * 1000),
                                 decode_tok_s=round(steps / decode, 2),
                                 same_tokens_text=same))
            print(json.dumps(rows[-len(measures):]), flush=True)
            loops = gen = ours_once = None
            for folder, _ in measures.values():
                shutil.rmtree(folder, ignore_errors=True)
    report(rows, args.json, merge=args.merge)
    return rows


if __name__ == "__main__":
    main()
