"""
.. _l-plot-export-vlm-split:

Export a vision-language model in two parts and generate on onnxruntime
=======================================================================

A vision-language model such as LLaVA generates text in two parts. The vision
encoder and its projector turn the images into features once. The text decoder
then runs on embeddings where those features replace the image placeholder
tokens: first on the whole prompt (the prefill, with an empty cache), then one
token at a time, its cache growing (the decode steps). Deployed, each part is
an ONNX model of its own:

* the vision encoder: ``pixel_values [images, 3, H, W] -> [images, tokens, hidden]``,
  the number of images dynamic,
* the text decoder: ``inputs_embeds, attention_mask, past keys and values -> logits,
  present keys and values``, batch, sequence and cache length dynamic.

The model is a tiny ``LlavaForConditionalGeneration`` (a Llama text model, a
CLIP vision tower on 16x16 images, random weights) built by
:func:`fx2onnx.zoo.vlm.tiny_llava`.
"""

import time

import matplotlib.pyplot as plt
import torch

import fx2onnx
from fx2onnx.zoo.vlm import (
    TextDecoder,
    VisionEncoder,
    decoder_inputs,
    export_text_decoder,
    export_vision_encoder,
    greedy_eager,
    greedy_onnx,
    prompt_ids,
    tiny_llava,
    vision_inputs,
)
from fx2onnx.validation import make_session

vlm = tiny_llava()
print(type(vlm.model).__name__, "-", vlm.tokens_per_image, "features per image")

# %%
# Export the two parts
# --------------------
#
# :func:`~fx2onnx.zoo.vlm.export_vision_encoder` and
# :func:`~fx2onnx.zoo.vlm.export_text_decoder` call :func:`fx2onnx.to_onnx`;
# the decoder is exported inside :func:`fx2onnx.torch_export_patches` which
# knows how to flatten its ``DynamicCache``.

begin = time.perf_counter()
vision_onnx = export_vision_encoder(vlm, images=2)
decoder_onnx = export_text_decoder(vlm, batch=2, seq=3, past=4)
print(f"export of both parts: {time.perf_counter() - begin:.1f}s")


def signature(model):
    def dims(value):
        return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]

    return [(v.name, dims(v)) for v in [*model.graph.input, *model.graph.output]]


for name, dims in signature(vision_onnx) + signature(decoder_onnx):
    print(f"  {name:22s} {dims}")

# %%
# Each part against eager
# -----------------------
#
# Other numbers of images for the encoder; for the decoder, a prefill (no cache,
# five tokens) and a decode step (one token, a cache of seven), on other batch
# sizes than the export's.

for images in (1, 3):
    report = fx2onnx.validate(
        vision_onnx, VisionEncoder(vlm.model), (vision_inputs(vlm, images, seed=images),)
    )
    print(f"vision encoder, {images} image(s): {report}")
    assert report.ok, report

with fx2onnx.torch_export_patches(patch_torch=False):
    for batch, seq, past in [(1, 5, 0), (3, 1, 7)]:
        inputs = decoder_inputs(vlm, batch, seq, past, seed=batch)
        report = fx2onnx.validate(decoder_onnx, TextDecoder(vlm.model), (), inputs)
        print(f"text decoder, batch={batch} seq={seq} past={past}: {report}")
        assert report.ok, report

# %%
# Greedy decoding on onnxruntime
# ------------------------------
#
# :func:`~fx2onnx.zoo.vlm.greedy_onnx` runs the vision encoder once, writes
# the image features over the placeholder tokens of the embedded prompt
# (:func:`~fx2onnx.zoo.vlm.merge_image_features`, what the model does in its
# forward), runs the prefill with an empty cache, then feeds every present
# cache back with the embedding of the chosen token.
# :func:`~fx2onnx.zoo.vlm.greedy_eager` does the same with the model's own
# forward on ``input_ids`` and ``pixel_values``. Two prompts with one image each.

input_ids = prompt_ids(vlm, batch=2, images_per_prompt=1, text_tokens=4, seed=3)
pixel_values = vision_inputs(vlm, 2, seed=3)
steps = 8
vision = make_session(vision_onnx)
decoder = make_session(decoder_onnx)
expected_tokens, expected_logits = greedy_eager(vlm, input_ids, pixel_values, steps)
tokens, logits = greedy_onnx(vlm, vision, decoder, input_ids, pixel_values, steps)
print("eager      :", expected_tokens.tolist())
print("onnxruntime:", tokens.tolist())
assert torch.equal(tokens, expected_tokens)

diffs = [float((got - expected).abs().max()) for got, expected in zip(logits, expected_logits)]
for step, diff in enumerate(diffs):
    print(f"step {step}: max abs diff of the logits {diff:.2e}")
assert max(diffs) < 1e-4, diffs

# %%
# The differences of the logits, step by step: the prefill (step 0) and the
# decode steps all stay at the float32 rounding level.

fig, ax = plt.subplots(figsize=(6, 3))
ax.semilogy(range(steps), [max(d, 1e-10) for d in diffs], "o-")
ax.set_xlabel("decoding step (0: prefill)")
ax.set_ylabel("max |onnxruntime - eager|")
ax.set_title("Tiny LLaVA, greedy decoding on onnxruntime")
fig.tight_layout()
