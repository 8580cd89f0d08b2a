"""Candidates from a checkpoint's own multi-token-prediction head (transformers' ``generate(use_mtp=True)``).

A folder exported from a checkpoint holding such a head (DeepSeek V3, GLM-4-MoE, Step-3.7:
:mod:`fx2onnx.deploy.mtp`) has ``onnx/mtp.onnx`` and a decoder returning its last hidden states. After each
run of the decoder, the head takes the hidden states of the positions the run kept and the tokens one
position on (the last one the token the run chose), extends its own cache with them and gives the logits of
the token after: the candidate the next run verifies with the pending token, as transformers'
``MTPCandidateGenerator`` with one head. Its cache holds kept positions only, never rolled back. Greedy,
the tokens of plain greedy decoding.

.. code-block:: python

    from fx2onnx.runtime.folder import FolderGenerator
    from fx2onnx.runtime.mtp import MultiTokenPrediction

    gen = FolderGenerator("glm4_moe_onnx")
    gen.generator.speculation = MultiTokenPrediction("glm4_moe_onnx")
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .folder import FOLDER_METADATA, _read_json, session_options
from .generate import CacheSignature, _empty_array
from .speculative import HIDDEN_OUTPUT, SequenceDecoder, Speculation

#: the input of the head taking the decoder's hidden states
HIDDEN_INPUT = "last_hidden_states"


class MultiTokenPrediction(Speculation):
    """One candidate a run from the folder's multi-token-prediction head.

    :param folder: a folder exported with its head (``fx2onnx.json`` has ``"mtp"``)
    :param threads: onnxruntime's intra-op threads of the head's session
    """

    target_outputs = (HIDDEN_OUTPUT,)

    def __init__(self, folder: str | os.PathLike, threads: int | None = None):
        import onnxruntime

        folder = os.fspath(folder)
        record = _read_json(os.path.join(folder, FOLDER_METADATA)).get("mtp")
        if not record:
            raise ValueError(f"The folder {folder!r} has no multi-token-prediction head: its checkpoint has none "
                             "(num_mtp_layers and the weights of the layers after the last), or it was exported "
                             "before fx2onnx exported them.")
        self.session = onnxruntime.InferenceSession(os.path.join(folder, record["file"]), session_options(threads),
                                                    providers=["CPUExecutionProvider"])
        self.signature = CacheSignature.from_session(self.session, constants=(HIDDEN_INPUT,))
        self.num_tokens = int(record.get("layers", 1))

    def reset(self, eos: set[int], chooser: Any = None) -> None:
        super().reset(eos, chooser)
        sig = self.signature
        self._past = [_empty_array(shape, 1, type_) for _, _, shape, type_ in sig.cache]
        self._next: list[int] = []
        self._scores: Any = None

    def propose(self, tokens: list[int], k: int) -> list[int]:
        if self._scores is not None:
            self.candidate_scores = self._scores[: min(k, len(self._next))]
        return self._next[:k]

    def observe(self, target: SequenceDecoder, start: int, valid: int, tokens: list[int]) -> None:
        """The head reads the ``valid`` kept positions of the run (hidden states at ``p``, token at ``p + 1``)."""
        sig = self.signature
        hidden = target.extras[0][:, :valid]
        cached = self._past[0].shape[2] if self._past else 0
        ids = np.array([tokens[start + 1: start + 1 + valid]], dtype=np.int64)
        feeds = {"input_ids": ids, HIDDEN_INPUT: np.ascontiguousarray(hidden, dtype=np.float32)}
        if sig.has_attention_mask:
            feeds["attention_mask"] = np.ones((1, cached + valid), dtype=np.int64)
        if sig.has_position_ids:
            feeds["position_ids"] = np.arange(start + 1, start + 1 + valid, dtype=np.int64)[None]
        feeds.update({name: value for (name, _, _, _), value in zip(sig.cache, self._past)})
        outputs = self.session.run([sig.logits] + [out for _, out, _, _ in sig.cache], feeds)
        self._past = outputs[1:]
        logits = outputs[0][0, -1].astype(np.float32, copy=False)
        chooser = self.chooser
        if chooser is None:
            self._next, self._scores = [int(logits.argmax())], None
            return
        import torch

        prefix = np.array([tokens])
        row = chooser.scores(logits[None], prefix, np.ones_like(prefix))
        probs = row.softmax(dim=-1)
        self._next = [int(probs.argmax() if not chooser.sampling.do_sample else
                          torch.multinomial(probs, 1, generator=chooser.generator)[0, 0])]
        self._scores = row if chooser.sampling.do_sample else None
