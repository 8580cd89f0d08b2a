"""The pooling and normalization of a sentence-transformers folder, exported with its transformer.

A sentence-transformers folder is a transformers checkpoint with ``modules.json`` listing the modules applied in
turn: the transformer (at the folder's root), a pooling (``1_Pooling/config.json``) turning the token embeddings
into one vector per text, optionally a normalization (``2_Normalize``). Exported with no flag, such a folder gives
the model computing both, as optimum exports it: ``token_embeddings`` (the transformer's last hidden state) and
``sentence_embedding`` (pooled, normalized when the folder says so).

The pooling modes are those of sentence-transformers, by their definitions: ``cls`` (the first token kept by the
attention mask), ``lasttoken`` (the last one), ``mean`` (the mean of the tokens kept), ``mean_sqrt_len_tokens`` (their
sum divided by the square root of their count), ``max`` (the largest value of each dimension over the tokens kept),
``weightedmean`` (a mean weighted by the position, 1 for the first token kept); several modes are concatenated. The
configuration is read in both layouts: ``pooling_mode`` (a name or a list, sentence-transformers 6) or the
``pooling_mode_*_tokens`` booleans (the published folders).

.. code-block:: python

    from fx2onnx.deploy.sentence import read_sentence_modules

    # SentenceModules(modes=('mean',), normalize=True, ...)
    print(read_sentence_modules("all-MiniLM-L6-v2"))
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

import torch

#: the legacy booleans of ``1_Pooling/config.json`` and the mode each switches on
LEGACY_MODES = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max",
                "pooling_mode_mean_tokens": "mean", "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                "pooling_mode_weightedmean_tokens": "weightedmean", "pooling_mode_lasttoken": "lasttoken"}
#: the pooling modes exported
POOLING_MODES = tuple(LEGACY_MODES.values())
#: the module types read (the last part of ``modules.json``'s ``type``), the transformer first
KNOWN_MODULES = ("Transformer", "Pooling", "Normalize")


@dataclasses.dataclass(frozen=True)
class SentenceModules:
    """What ``modules.json`` of a sentence-transformers folder declares after the transformer."""

    modes: tuple[str, ...]
    normalize: bool
    #: the sub-folders of the modules (``1_Pooling``...), copied beside the exported model
    paths: tuple[str, ...]


def _read(path: str) -> object:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def read_sentence_modules(folder: str | os.PathLike) -> SentenceModules | None:
    """The modules of a sentence-transformers folder, None when the folder has no ``modules.json``.

    :raises ValueError: one line naming a module or a pooling mode this export does not compute (a Dense layer...)
    """
    folder = os.fspath(folder)
    listing = os.path.join(folder, "modules.json")
    if not os.path.isfile(listing):
        return None
    modules = sorted(_read(listing), key=lambda m: int(m.get("idx", 0)))  # type: ignore[arg-type, union-attr]
    kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
    unknown = [k for k in kinds if k not in KNOWN_MODULES]
    if unknown or not kinds or kinds[0] != "Transformer" or kinds.count("Pooling") != 1:
        raise ValueError(f"{listing} lists the modules {kinds}: exporting a sentence-transformers folder computes a "
                         f"Transformer at the root, one Pooling and an optional Normalize; export the transformer "
                         f"alone with --task feature-extraction after removing modules.json.")
    if modules[0].get("path", "") not in ("", "."):
        raise ValueError(f"{listing} puts the transformer in {modules[0]['path']!r}: export that sub-folder's "
                         "checkpoint, or save the model with its transformer at the root.")
    pooling = modules[kinds.index("Pooling")]
    config = _read(os.path.join(folder, pooling.get("path", "1_Pooling"), "config.json"))
    assert isinstance(config, dict)
    mode = config.get("pooling_mode")
    modes = tuple([mode] if isinstance(mode, str) else mode or [m for k, m in LEGACY_MODES.items() if config.get(k)])
    if not modes or any(m not in POOLING_MODES for m in modes):
        raise ValueError(f"the pooling of {folder!r} is {modes or 'none'}: sentence-transformers' modes are "
                         f"{list(POOLING_MODES)}.")
    if config.get("include_prompt", True) is False:
        raise ValueError(f"the pooling of {folder!r} leaves the prompt out (include_prompt false): the exported "
                         "model pools every token; set include_prompt to true or pool the token_embeddings yourself.")
    return SentenceModules(modes, "Normalize" in kinds, tuple(m["path"] for m in modules[1:] if m.get("path")))


def _at(tokens: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """The token at ``index`` (one per text) of ``tokens`` (batch, sequence, hidden)."""
    return tokens.gather(1, index.to(torch.int64).view(-1, 1, 1).expand(-1, 1, tokens.shape[-1])).squeeze(1)


class SentencePooling(torch.nn.Module):
    """The token embeddings ``(batch, sequence, hidden)`` to one vector per text, over the tokens the attention mask
    keeps (see the module for the modes), then divided by its norm when ``normalize``."""

    def __init__(self, modes: tuple[str, ...], normalize: bool):
        super().__init__()
        self.modes, self.normalize = modes, normalize

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        kept = mask.to(tokens.dtype).unsqueeze(-1)  # (batch, sequence, 1)
        count = kept.sum(dim=1).clamp(min=1e-9)
        positions = torch.arange(1, tokens.shape[1] + 1, dtype=tokens.dtype, device=tokens.device).view(1, -1, 1)
        first = mask.to(torch.int32).argmax(dim=1)  # the first token kept (0 when padded on the right)
        vectors = []
        for mode in self.modes:
            if mode == "cls":
                vectors.append(_at(tokens, first))
            elif mode == "lasttoken":
                vectors.append(_at(tokens * kept, tokens.shape[1] - 1 - mask.flip(1).to(torch.int32).argmax(dim=1)))
            elif mode == "max":
                vectors.append(tokens.masked_fill(kept == 0, float("-inf")).amax(dim=1))
            elif mode == "weightedmean":
                weights = kept * (positions - first.to(tokens.dtype).view(-1, 1, 1))
                vectors.append((tokens * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9))
            else:  # mean, mean_sqrt_len_tokens
                total = (tokens * kept).sum(dim=1)
                vectors.append(total / (count if mode == "mean" else count.sqrt()))
        pooled = torch.cat(vectors, dim=-1)
        return torch.nn.functional.normalize(pooled, p=2.0, dim=-1) if self.normalize else pooled


def copy_sentence_modules(folder: str | os.PathLike, modules: SentenceModules, out_dir: str | os.PathLike) -> None:
    """Copies the configuration files of the modules' sub-folders (``1_Pooling/config.json``...) into ``out_dir``:
    the folder keeps saying what its ``sentence_embedding`` computes."""
    for path in modules.paths:
        source = os.path.join(os.fspath(folder), path)
        if os.path.isdir(source):
            target = os.path.join(os.fspath(out_dir), path)
            os.makedirs(target, exist_ok=True)
            for name in os.listdir(source):
                if name.endswith(".json"):
                    shutil.copyfile(os.path.join(source, name), os.path.join(target, name))
