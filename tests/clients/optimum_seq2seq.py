"""Greedy generation with optimum's ``ORTModelForSeq2SeqLM`` / ``ORTModelForSpeechSeq2Seq`` on an encoder-decoder
folder written by ``python -m fx2onnx export``, run in optimum's own environment (it pins transformers 4.57):
``python optimum_seq2seq.py FOLDER INPUTS.json NEW_TOKENS`` (INPUTS.json: ``input_ids`` and ``attention_mask``;
``input_features`` or ``input_values``, with ``attention_mask`` where given: a speech model; ``pixel_values``: an image
encoder-decoder, ``ORTModelForVision2Seq``) prints one JSON line ``{"sequences": [[...]]}``."""

import json
import sys

import torch
from optimum.onnxruntime import ORTModelForSeq2SeqLM, ORTModelForSpeechSeq2Seq, ORTModelForVision2Seq


def main() -> None:
    folder, inputs, new = sys.argv[1], json.load(open(sys.argv[2])), int(sys.argv[3])
    audio = next((k for k in ("input_features", "input_values") if k in inputs), None)
    if audio or "pixel_values" in inputs:
        name = audio or "pixel_values"
        model = (ORTModelForSpeechSeq2Seq if audio else ORTModelForVision2Seq).from_pretrained(folder,
                                                                                               local_files_only=True)
        feeds = {name: torch.tensor(inputs[name], dtype=torch.float32)}
        if "attention_mask" in inputs:
            feeds["attention_mask"] = torch.tensor(inputs["attention_mask"])
    else:
        model = ORTModelForSeq2SeqLM.from_pretrained(folder, local_files_only=True)
        feeds = {k: torch.tensor(inputs[k]) for k in ("input_ids", "attention_mask")}
    output = model.generate(**feeds, max_new_tokens=new, do_sample=False)
    print(json.dumps({"sequences": output.tolist()}))


if __name__ == "__main__":
    main()
