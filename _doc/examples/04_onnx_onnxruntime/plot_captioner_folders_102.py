"""
.. _l-plot-captioner-folders-102:

Captioners from a folder: BLIP, GIT and Florence-2
==================================================

Three popular image-to-text models are none of the usual layouts. BLIP is a vision model and a text
decoder attending to it through cross-attention; GIT writes the image features in front of the prompt
without placeholder tokens; Florence-2 is an encoder-decoder whose text encoder reads a task prompt
where the image was merged first. Each one still goes from its checkpoint folder to text in two
commands:

.. code-block:: bash

    python -m fx2onnx export FOLDER --out OUTDIR
    python -m fx2onnx generate OUTDIR [PROMPT] --image cat.png

BLIP and Florence-2 are shown to the encoder-decoder split as encoder-decoders
(:mod:`fx2onnx.deploy.captioner`), GIT gets a vision piece and a decoder whose prompt starts with one
placeholder per image feature (:mod:`fx2onnx.deploy.image_prefix`). This example writes a tiny folder
of each (random weights, a processor made in code: no download), runs both commands and checks the
tokens against :epkg:`transformers`.
"""

import os
import subprocess
import sys
import tempfile

import matplotlib.pyplot as plt
import numpy as np
import PIL.Image
import torch
import transformers

from fx2onnx.testing.vlm_folder import write_blip_folder, write_florence2_folder, write_git_folder

transformers.utils.logging.disable_progress_bar()  # save_pretrained's and from_pretrained's bars
work = tempfile.TemporaryDirectory()
image = os.path.join(work.name, "cat.png")
y, x = np.mgrid[0:48, 0:64]
PIL.Image.fromarray(
    np.stack([(x * 4) % 256, (y * 5) % 256, (x * y) % 256], axis=-1).astype(np.uint8)
).save(image)


def run(*argv: str) -> str:
    """Runs ``python -m fx2onnx ...`` as a user would, prints the command and its output, returns it."""
    done = subprocess.run([sys.executable, "-m", "fx2onnx", *argv], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    shown = f"$ python -m fx2onnx {' '.join(argv)}\n{done.stdout.rstrip()}"
    print(shown.replace(work.name + os.sep, ""))  # paths relative to the temporary folder
    return done.stdout


# %%
# Three folders, three exports
# ----------------------------
# Every piece is checked against eager float32 on two input sets; ``fx2onnx.json`` says how the
# folder was split.

folders = {}
for name, write in [
    ("blip", write_blip_folder),
    ("git", write_git_folder),
    ("florence2", write_florence2_folder),
]:
    checkpoint, out = os.path.join(work.name, name), os.path.join(work.name, f"{name}_onnx")
    write(checkpoint)
    run("export", checkpoint, "--out", out, "--quiet")
    folders[name] = checkpoint, out

# %%
# Generate, and the same tokens as transformers
# ---------------------------------------------
# BLIP and GIT caption after their start token (a prompt, ``"a picture of"``, follows it), Florence-2
# takes a task (``<CAPTION>``, ``<MORE_DETAILED_CAPTION>``, ``<OCR>``...) which its processor turns into a
# question after the image's placeholders. Each reference is the model's documented ``generate`` call on
# the processor's outputs.

picture = PIL.Image.open(image).convert("RGB")
results = {}
for name, prompt in [("blip", "a picture of"), ("git", None), ("florence2", "<MORE_DETAILED_CAPTION>")]:
    checkpoint, out = folders[name]
    args = [out, *([prompt] if prompt else []), "--image", image, "--max-new-tokens", "8"]
    ours = [int(t) for t in run("generate", *args, "--print-ids").strip().split(",")]
    model = transformers.AutoModelForImageTextToText.from_pretrained(
        checkpoint, dtype=torch.float32
    ).eval()
    processor = transformers.AutoProcessor.from_pretrained(checkpoint)
    text = processor.tokenizer.decode(
        ours, skip_special_tokens=True
    )  # the tokens as text, for the figure
    if name == "git":  # GIT's documentation: [CLS] then the prompt
        inputs = {
            "pixel_values": processor(images=picture, return_tensors="pt").pixel_values,
            "input_ids": torch.tensor([[processor.tokenizer.cls_token_id]]),
        }
    else:
        inputs = processor(images=picture, text=prompt, return_tensors="pt")
    with torch.no_grad():
        tokens = model.generate(**inputs, max_new_tokens=8, do_sample=False)[0].tolist()
    start = {"blip": inputs["input_ids"].shape[1] - 1, "git": 1, "florence2": 1}[name]
    expected = tokens[start:]
    end = (
        model.generation_config.eos_token_id
        if name != "blip"
        else model.config.text_config.sep_token_id
    )
    expected = expected[: expected.index(end) + 1] if end in expected else expected
    print(f"{name}: ours {ours}\n{' ' * len(name)}  transformers {expected}")
    assert ours == expected
    results[name] = text

# %%
# The image and the three captions
# --------------------------------
# Random weights write random words; what matters is that they are transformers' words.

fig, ax = plt.subplots(figsize=(5, 3.4))
ax.imshow(picture)
ax.set_title("\n".join(f"{name}: {text[:40]!r}" for name, text in results.items()), fontsize=8)
ax.axis("off")
fig.tight_layout()
work.cleanup()
