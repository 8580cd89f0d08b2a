"""The "generate" column of the supported-models page: greedy tokens of the ONNX model vs transformers.

For a decoder exported with a cache, :func:`compare_generation` runs
:func:`fx2onnx.generate` on the ONNX model and ``model.generate(do_sample=False)`` on the
eager model, on the same seeded prompts (two of 8 tokens, no padding: the zoo's
exports take no ``position_ids``), for :data:`NEW_TOKENS` new tokens, no end of
sequence, and counts the new tokens on which they agree.

.. code-block:: python

    from fx2onnx.models.generation import compare_generation

    result = compare_generation(model, onx)  # {"new_tokens": 20, "matched": 20, "equal": True, ...}
"""

from __future__ import annotations

import copy
from typing import Any

import torch

#: new tokens compared per prompt
NEW_TOKENS = 20
#: (batch, prompt length) of the prompts
PROMPTS = (2, 8)


def compare_generation(model: torch.nn.Module, onx: Any, new_tokens: int = NEW_TOKENS, seed: int = 0) -> dict[str, Any]:
    """Greedy generation of the ONNX model vs transformers on the same prompts.

    Returns ``new_tokens`` (per prompt), ``matched`` (new tokens equal, all prompts
    together, out of ``new_tokens * batch``), ``equal``, ``first_difference`` (index of
    the first new token that differs, None when equal) and ``error`` (why the
    comparison could not run: the ONNX loop refused the model or transformers failed).
    """
    from ..runtime.generate import generate

    result: dict[str, Any] = dict(new_tokens=new_tokens, matched=0, equal=False, first_difference=None, error=None)
    config = model.config
    vocab = int(getattr(config, "vocab_size", 1024) or 1024)
    batch, length = PROMPTS
    ids = torch.randint(3, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))
    original = model.generation_config
    # no end of sequence: transformers replaces the values a generation_config argument leaves at
    # their defaults (eos_token_id=None) by the model's own, so the model's copy is changed
    model.generation_config = copy.deepcopy(original)
    model.generation_config.eos_token_id = None
    step = "fx2onnx.generate"
    try:
        got = generate(onx, ids, new_tokens)
        step = "transformers generate"
        with torch.no_grad():
            expected = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, num_beams=1,
                                      max_new_tokens=new_tokens, pad_token_id=0)
    except Exception as e:  # noqa: BLE001 - a failure is a result of the row
        result["error"] = f"{step}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
        return result
    finally:
        model.generation_config = original
    if expected.shape != got.shape:
        result["error"] = f"transformers returned {tuple(expected.shape)} tokens, fx2onnx.generate {tuple(got.shape)}"
        return result
    same = (expected[:, length:] == got[:, length:])
    result["matched"] = int(same.sum())
    result["equal"] = bool(same.all())
    differ = (~same).any(dim=0).nonzero()
    result["first_difference"] = int(differ[0]) if len(differ) else None
    return result
