"""
.. _l-plot-transformersjs-folder-102:

Run the exported folder in transformers.js
==========================================

The folder ``python -m fx2onnx export FOLDER --out OUTDIR`` writes is the one
`transformers.js <https://huggingface.co/docs/transformers.js>`_ (``@huggingface/transformers`` on npm)
loads: the decoder at ``onnx/model.onnx``, its weights in ``onnx/model.onnx_data``, the cache named
``past_key_values.N.key`` / ``present.N.key`` as optimum names it, and a ``transformers.js_config``
block in ``config.json`` naming the weights' file and the ``dtype`` (the file) to load. This example
exports a tiny Qwen3 folder, runs it in Node with a ten-line script, and checks the tokens against
:epkg:`transformers`; then the ``--quantize int4`` folder, which transformers.js loads as
``dtype: "q4"``.

The checkpoint folder and its export
------------------------------------
"""

import json
import os
import shutil
import subprocess
import tempfile

import torch
import transformers

import fx2onnx
from fx2onnx.deploy import export_folder
from fx2onnx.runtime.folder import FolderGenerator
from fx2onnx.testing.tokenizer import tiny_qwen3_config, write_checkpoint_folder

work = tempfile.TemporaryDirectory()
checkpoint = os.path.join(work.name, "qwen3")
write_checkpoint_folder(tiny_qwen3_config(), checkpoint, dtype="bfloat16", std=0.3)


def export(name: str, quantize: str | None = None) -> str:
    """What ``python -m fx2onnx export checkpoint --out name [--quantize int4]`` does (here in
    this process: :func:`fx2onnx.deploy.export_folder`); returns the folder written."""
    out = os.path.join(work.name, name)
    result = export_folder(checkpoint, out, quantize=quantize)
    assert result.ok
    print(sorted(os.listdir(os.path.join(out, "onnx"))))
    print(json.load(open(os.path.join(out, "config.json")))["transformers.js_config"])
    return out


out = export("qwen3_onnx")

# %%
# The Node script
# ---------------
# transformers.js is installed at the root of the project (``package.json``, ``npm ci
# --ignore-scripts`` by ``make venv``). The script loads the folder offline, greedy-generates after
# token ids and prints the new ones as JSON. It names no file: transformers.js reads
# ``onnx/model.onnx`` (or the file of the ``dtype`` config.json names).

SCRIPT = """
import path from "node:path";
import { AutoModelForCausalLM, Tensor, env } from "@huggingface/transformers";
const [folder, ids, n] = process.argv.slice(-3).map((a, i) => (i ? JSON.parse(a) : a));
Object.assign(env, { allowRemoteModels: false, localModelPath: path.dirname(folder) });
const model = await AutoModelForCausalLM.from_pretrained(path.basename(folder), { device: "cpu" });
const input_ids = new Tensor("int64", BigInt64Array.from(ids.map(BigInt)), [1, ids.length]);
const attention_mask = new Tensor("int64", new BigInt64Array(ids.length).fill(1n), [1, ids.length]);
const options = { max_new_tokens: n, min_new_tokens: n, do_sample: false };
const out = await model.generate({ input_ids, attention_mask, ...options });
console.log(JSON.stringify(Array.from(out.data, Number).slice(ids.length)));
"""


def project_root() -> str:
    """The folder holding node_modules/@huggingface/transformers (the project's root)."""
    start = os.path.dirname(os.path.abspath(fx2onnx.__file__))
    for folder in (os.getcwd(), start):
        while True:
            if os.path.isdir(os.path.join(folder, "node_modules", "@huggingface", "transformers")):
                return folder
            if os.path.dirname(folder) == folder:
                break
            folder = os.path.dirname(folder)
    raise FileNotFoundError("transformers.js is not installed: run make venv (npm ci --ignore-scripts)")


def transformersjs(folder: str, ids: list[int], new_tokens: int) -> list[int]:
    """The new tokens transformers.js generates in Node (the script run from the project's root)."""
    argv = ["node", "--input-type=module", "-e", SCRIPT, folder, json.dumps(ids), str(new_tokens)]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=project_root())
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


assert shutil.which("node"), "node is not installed: transformers.js runs in Node"
prompt = [5, 60, 7, 200, 31, 17]
js_tokens = transformersjs(out, prompt, 12)
print("transformers.js:", js_tokens)

# %%
# The same tokens as transformers' greedy ``generate`` on the checkpoint (float32):

transformers.utils.logging.disable_progress_bar()
model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
expected = model.generate(
    torch.tensor([prompt]), max_new_tokens=12, min_new_tokens=12, do_sample=False
)[0, len(prompt) :].tolist()
print("transformers:   ", expected)
assert js_tokens == expected and len(set(expected)) > 3

# %%
# The int4 folder
# ---------------
# ``--quantize int4`` writes the matrices as onnxruntime's ``MatMulNBits`` in ``onnx/model_q4.onnx``,
# the name transformers.js gives its ``q4`` weights, and config.json names ``q4`` its default: the same
# script loads it unchanged. The weights are quantized, so the reference is our own loop on the folder.

out_q4 = export("qwen3_int4", "int4")
js_q4 = transformersjs(out_q4, prompt, 12)
ours = FolderGenerator(out_q4).generate_text(prompt, 12).new_ids
print("transformers.js:", js_q4)
print("fx2onnx:        ", ours)
assert js_q4 == ours

# %%
# A bfloat16 folder (``--dtype bfloat16``) runs in our loop and in onnxruntime-genai, not in
# transformers.js: onnxruntime-node and onnxruntime-web have no bfloat16 tensors; the export says so
# in one line.

work.cleanup()
