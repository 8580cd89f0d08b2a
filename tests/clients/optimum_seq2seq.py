"""Greedy generation with optimum's ``ORTModelForSeq2SeqLM`` / ``ORTModelForSpeechSeq2Seq`` on an encoder-decoder
folder written by ``python -m fx2onnx export``, run in optimum's own environment (it pins transformers 4.57):
``python optimum_seq2seq.py FOLDER INPUTS.json NEW_TOKENS`` (INPUTS.json: ``input_ids`` and ``attention_mask``, or
``input_features``) prints one JSON line ``{"sequences": [[...]]}``."""

import json
import sys

import torch
from optimum.onnxruntime import ORTModelForSeq2SeqLM, ORTModelForSpeechSeq2Seq


def main() -> None:
    folder, inputs, new = sys.argv[1], json.load(open(sys.argv[2])), int(sys.argv[3])
    if "input_features" in inputs:
        model = ORTModelForSpeechSeq2Seq.from_pretrained(folder, local_files_only=True)
        feeds = {"input_features": torch.tensor(inputs["input_features"], dtype=torch.float32)}
    else:
        model = ORTModelForSeq2SeqLM.from_pretrained(folder, local_files_only=True)
        feeds = {k: torch.tensor(inputs[k]) for k in ("input_ids", "attention_mask")}
    output = model.generate(**feeds, max_new_tokens=new, do_sample=False)
    print(json.dumps({"sequences": output.tolist()}))


if __name__ == "__main__":
    main()
