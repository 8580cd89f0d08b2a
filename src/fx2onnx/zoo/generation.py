"""The "generate" column of the supported-models page: greedy tokens of the ONNX model vs transformers.

For a decoder exported with a cache, :func:`compare_generation` runs
:func:`fx2onnx.generate` on the ONNX model and ``model.generate(do_sample=False)`` on the
eager model, on the same seeded prompts (two of 8 tokens, no padding: the zoo's
exports take no ``position_ids``), for :data:`NEW_TOKENS` new tokens, no end of
sequence, and counts the new tokens on which they agree.

When they differ, a plain greedy loop on the eager model (its forward called with the
inputs the ONNX model takes, the cache it returns fed back, the argmax of the last
logits) tells the export from transformers' ``generate``: ``eager_loop_equal`` is True
when fx2onnx.generate produces that loop's tokens, so the difference comes from what
``generate`` adds to a greedy loop, and ``cause`` names what this model's
``generate`` does: the logits processors its generation config turns on
(``forced_eos_token_id``, ``no_repeat_ngram_size``...), or ``position_ids`` counted
from 0 fed to a model whose forward counts them otherwise when it is not given them
(RoBERTa's embeddings start at ``padding_idx + 1``).

.. code-block:: python

    from fx2onnx.zoo.generation import compare_generation

    result = compare_generation(model, onx)  # {"new_tokens": 20, "matched": 20, "equal": True, ...}
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from ..runtime.generate import OnnxGenerator, generate

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
    if not result["equal"]:
        result.update(_explain(model, onx, ids, new_tokens, got))
    return result


#: generation settings which make ``generate`` differ from a greedy loop (value when off)
PROCESSORS = {"forced_eos_token_id": None, "forced_bos_token_id": None, "no_repeat_ngram_size": 0,
              "repetition_penalty": 1.0, "min_length": 0, "min_new_tokens": None, "bad_words_ids": None,
              "suppress_tokens": None, "begin_suppress_tokens": None}


def _explain(model: torch.nn.Module, onx: Any, ids: torch.Tensor, new_tokens: int, got: torch.Tensor) -> dict[str, Any]:
    """``eager_loop_equal`` and ``cause`` of a difference (see the module's docstring)."""
    import inspect

    with_positions = OnnxGenerator(onx, next_token=False).signature.has_position_ids
    try:
        loop = _eager_greedy(model, ids, new_tokens, with_positions)
    except Exception as e:  # noqa: BLE001 - the loop is a diagnosis, not the result
        return dict(eager_loop_equal=None, cause=f"the eager greedy loop failed: {type(e).__name__}"[:200])
    causes = []
    config = model.generation_config
    for name, off in PROCESSORS.items():
        value = getattr(config, name, off)
        if value != off and value is not None and value != []:  # forced_eos_token_id=0 is on
            causes.append(f"{name}={value}")
    if not with_positions and "position_ids" in inspect.signature(model.forward).parameters:
        causes.append("position_ids from 0 (the export takes none, the forward computes its own)")
    equal = bool(torch.equal(loop, got))
    cause = ("generate adds " + ", ".join(causes)) if equal and causes else None
    return dict(eager_loop_equal=equal, cause=cause)


def _eager_greedy(model: torch.nn.Module, ids: torch.Tensor, new_tokens: int, with_positions: bool) -> torch.Tensor:
    """Greedy decoding with the eager forward alone: the inputs the ONNX model takes, its cache fed back."""
    batch, length = ids.shape
    tokens, past, step_ids = ids, None, ids
    with torch.no_grad():
        for step in range(new_tokens):
            total = length + step
            kwargs: dict[str, Any] = dict(input_ids=step_ids, attention_mask=torch.ones((batch, total), dtype=torch.long),
                                          use_cache=True)
            if past is not None:
                kwargs["past_key_values"] = past
            if with_positions:
                kwargs["position_ids"] = torch.arange(total - step_ids.shape[1], total).expand(batch, -1)
            out = model(**kwargs)
            past = out.past_key_values
            step_ids = out.logits[:, -1].argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, step_ids], dim=1)
    return tokens
