"""Greedy generation with optimum's ``ORTModelForCausalLM`` on a folder written by ``python -m fx2onnx export``, run
in optimum's own environment (it pins transformers 4.57): ``python optimum_generate.py FOLDER '[ids]' NEW_TOKENS``
prints one JSON line ``{"new_ids": [...]}``."""

import json
import sys

import torch
from optimum.onnxruntime import ORTModelForCausalLM


def main() -> None:
    folder, ids, new = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    model = ORTModelForCausalLM.from_pretrained(folder, local_files_only=True)
    input_ids = torch.tensor([ids])
    output = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=new,
                            min_new_tokens=new, do_sample=False)
    print(json.dumps({"new_ids": output[0, len(ids):].tolist()}))


if __name__ == "__main__":
    main()
