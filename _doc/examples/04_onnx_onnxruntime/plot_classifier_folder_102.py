"""
.. _l-plot-classifier-folder-102:

Export a classifier folder and run it
=====================================

Most models in use are not language models: classifiers, taggers, embedders, speech
recognizers. A ``save_pretrained`` folder of such a model becomes a folder that runs on
onnxruntime with two commands:

.. code-block:: bash

    python -m fx2onnx export FOLDER --out OUT
    python -m fx2onnx run OUT "a text" [--image cat.png] [--audio talk.wav] [--json]

``export`` reads the task from the folder's class (``BertForSequenceClassification`` is a
``text-classification`` model), writes ``onnx/model.onnx`` with the input and output names
optimum gives them, copies the tokenizer and config, and checks the model against eager
float32 on two input sets made by the folder's own tokenizer. ``run`` prepares the inputs
with that tokenizer and prints what :epkg:`transformers`' ``pipeline`` of the task returns.
This example writes a tiny BERT sentiment classifier in code (2 layers, random weights, a
WordPiece tokenizer made in code: no download), then does what a user does.

The checkpoint folder
---------------------
"""

import contextlib
import io
import json
import os
import tempfile

import matplotlib.pyplot as plt
import numpy as np
import transformers

import fx2onnx
from fx2onnx.__main__ import main
from fx2onnx.testing.encoder_folder import write_encoder_folder

work = tempfile.TemporaryDirectory()
checkpoint, out = os.path.join(work.name, "bert_sentiment"), os.path.join(work.name, "bert_onnx")
write_encoder_folder("BertForSequenceClassification", checkpoint)
print(sorted(os.listdir(checkpoint)))


def run(*argv: str, code: int = 0) -> str:
    """Runs ``python -m fx2onnx ...`` (its entry point, in this process), prints what it prints
    (the error line too), returns its output."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        returned = main(list(argv))
    assert returned == code, stderr.getvalue()[-2000:]
    errors = [line for line in stderr.getvalue().splitlines() if line.startswith("error:")]
    shown = [
        f"$ python -m fx2onnx {' '.join(a if ' ' not in a else repr(a) for a in argv)}",
        *errors,
        stdout.getvalue().rstrip(),
    ]
    print(
        "\n".join(shown).rstrip().replace(work.name + os.sep, "")
    )  # paths relative to the temporary folder
    return stdout.getvalue()


# %%
# Export: no flag
# ---------------
# The task is the one of the class, the model is checked on two batches of other sizes
# and lengths (the batch and sequence dimensions are dynamic).

run("export", checkpoint, "--out", out, "--quiet")
print(sorted(os.listdir(out)), sorted(os.listdir(os.path.join(out, "onnx"))))
metadata = json.load(open(os.path.join(out, "fx2onnx.json")))
print(
    metadata["task"],
    metadata["pieces"]["model"]["inputs"],
    "->",
    metadata["pieces"]["model"]["outputs"],
)

# %%
# Run
# ---
# Several texts make a batch; ``--top-k`` keeps more labels, ``--json`` prints what
# transformers' pipeline returns as JSON.

texts = ["the movie was great", "a bad film, i hate it"]
run("run", out, *texts)
printed = json.loads(run("run", out, texts[0], "--top-k", "3", "--json"))

# %%
# The same as transformers
# ------------------------
# ``fx2onnx.pipeline(OUT)`` is the Python side of ``run``: onnxruntime and the folder's
# tokenizer, no torch model. Its labels and scores equal those of transformers' pipeline
# on the checkpoint.

ours = fx2onnx.pipeline(out)
transformers.utils.logging.disable_progress_bar()
reference = transformers.pipeline("text-classification", model=checkpoint)
got, expected = ours(texts, top_k=3), reference(texts, top_k=3)
for g, e in zip(got, expected):
    assert [x["label"] for x in g] == [x["label"] for x in e]
    assert np.allclose([x["score"] for x in g], [x["score"] for x in e], atol=1e-5)
assert [x["label"] for x in printed] == [x["label"] for x in expected[0]]
print(got[1])

# %%
# The scores of the second text, from the ONNX folder and from transformers (the tiny
# model is random: its labels mean nothing, its scores are what is compared).

labels = [x["label"] for x in expected[1]]
ours_scores = {x["label"]: x["score"] for x in got[1]}
fig, ax = plt.subplots(figsize=(6, 2.5))
ax.bar(
    np.arange(3) - 0.2,
    [ours_scores[label] for label in labels],
    width=0.4,
    label="fx2onnx run (onnxruntime)",
)
ax.bar(np.arange(3) + 0.2, [x["score"] for x in expected[1]], width=0.4, label="transformers pipeline")
ax.set_xticks(np.arange(3), labels)
ax.set_ylabel("score")
ax.set_title(repr(texts[1]))
ax.legend(loc="lower right")
fig.tight_layout()

# %%
# Bad inputs
# ----------
# An input the folder cannot take ends in one line naming the problem, exit code 2.

run("run", out, "--image", "cat.png", code=2)

# %%
# The other tasks
# ---------------
# The same two commands serve fill-mask, token-classification, feature-extraction
# (``BertModel``), zero-shot-classification (an NLI classifier exported with
# ``--task zero-shot-classification``, run with ``--labels``), image-classification,
# image-feature-extraction, object-detection (``--threshold``) and depth-estimation
# (``--save-dir`` writes the depth PNGs) with ``--image``, audio-classification and CTC speech
# recognition with ``--audio`` (a WAV file at the feature extractor's rate).

work.cleanup()
