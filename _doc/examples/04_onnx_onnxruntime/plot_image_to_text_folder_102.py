"""
.. _l-plot-image-to-text-folder-102:

An image encoder-decoder folder (TrOCR, Donut) to text in two commands
======================================================================

TrOCR reads a line of handwriting, Donut a document: both are a ``VisionEncoderDecoderModel``,
an image encoder whose output every step of a text decoder reads through cross-attention. Such a
checkpoint folder exports and generates with the same two commands as a text model:

.. code-block:: bash

    python -m fx2onnx export FOLDER --out OUTDIR
    python -m fx2onnx generate OUTDIR --image line.png

The export finds the encoder's input in the model's signature (``pixel_values``) and writes the two
files transformers.js and optimum load: ``onnx/encoder_model.onnx`` and
``onnx/decoder_model_merged.onnx``, the decoder with its self-attention cache whose first step
computes the keys and values of every cross-attention (once per image, ``use_cache_branch``
false) and whose later steps reuse them. This example writes a tiny folder of
TrOCR's architecture (a ViT encoder, a TrOCR decoder, random weights, its image processor and a
tokenizer made in code: no download), runs both commands and checks the tokens against
:epkg:`transformers`.

The checkpoint folder
---------------------
"""

import json
import os
import subprocess
import sys
import tempfile

import matplotlib.pyplot as plt
import numpy as np
import PIL.Image
import torch
import transformers

from fx2onnx.testing.vlm_folder import write_vision_encoder_decoder_folder

work = tempfile.TemporaryDirectory()
checkpoint, out = os.path.join(work.name, "trocr"), os.path.join(work.name, "trocr_onnx")
write_vision_encoder_decoder_folder(checkpoint, "trocr")
print(sorted(os.listdir(checkpoint)))

# two images of other sizes than the encoder's 32 x 32: the image processor resizes them
rng = np.random.default_rng(0)
images = []
for i, (height, width) in enumerate([(40, 120), (64, 64)]):
    y, x = np.mgrid[0:height, 0:width]
    pixels = np.stack(
        [(x * (3 + i)) % 256, (y * 7) % 256, rng.integers(0, 256, (height, width))], axis=-1
    )
    images.append(os.path.join(work.name, f"image{i}.png"))
    PIL.Image.fromarray(pixels.astype(np.uint8)).save(images[-1])


def run(*argv: str) -> str:
    """Runs ``python -m fx2onnx ...`` as a user would, prints what it prints, returns its output."""
    done = subprocess.run([sys.executable, "-m", "fx2onnx", *argv], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    err = [line for line in done.stderr.splitlines() if line.strip()]
    shown = [line for line in err if line.startswith(("exporting", "checking", "  "))]
    speed = [line for line in err if line.startswith("encoder:")]
    print(
        "\n".join(
            [f"$ python -m fx2onnx {' '.join(argv)}", *shown, done.stdout.rstrip(), *speed]
        ).replace(work.name + os.sep, "")
    )
    return done.stdout


# %%
# Export
# ------
# Each piece is checked against eager float32 on two input sets (two images, then three).

run("export", checkpoint, "--out", out)
metadata = json.load(open(os.path.join(out, "fx2onnx.json")))
for name, piece in metadata["pieces"].items():
    print(f"{name}: {piece['inputs'][:3]}... -> {piece['outputs'][:3]}...")

# %%
# Generate
# --------
# One image: the text is printed as it is decoded. Several images (``a.png,b.png``) make a
# batch, one numbered line each.

run("generate", out, "--image", images[0], "--max-new-tokens", "12")
ids = run("generate", out, "--image", ",".join(images), "--max-new-tokens", "12", "--print-ids")
ours = [[int(t) for t in line.split("] ")[1].split(",")] for line in ids.splitlines()]

# %%
# The same tokens as transformers
# -------------------------------
# ``generate(pixel_values=...)`` on the image processor's pixels, greedy; transformers returns the
# decoder's start token first.

model = transformers.VisionEncoderDecoderModel.from_pretrained(checkpoint, dtype=torch.float32).eval()
processor = transformers.AutoImageProcessor.from_pretrained(checkpoint)
pixels = processor([PIL.Image.open(i).convert("RGB") for i in images], return_tensors="pt")[
    "pixel_values"
]
with torch.no_grad():
    expected = model.generate(pixel_values=pixels, max_new_tokens=12, do_sample=False)[:, 1:].tolist()
eos = model.generation_config.eos_token_id
expected = [row[: row.index(eos) + 1] if eos in row else row for row in expected]
print("ours        ", ours)
print("transformers", expected)
assert ours == expected

# %%
# The images and their text
# -------------------------
# Random weights write random text; what matters is that it is transformers' text.

tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
fig, axes = plt.subplots(1, 2, figsize=(8, 2.6))
for ax, path, tokens in zip(axes, images, ours):
    ax.imshow(PIL.Image.open(path))
    ax.set_title(repr(tokenizer.decode(tokens, skip_special_tokens=True))[:40], fontsize=8)
    ax.axis("off")
fig.tight_layout()
work.cleanup()
