"""A token tagger's scores to entities, as transformers' token-classification pipeline returns them for each of its
aggregation strategies (``aggregation_strategy``).

``none`` gives one entity per token (its best label and score, the special tokens and the ``O`` label left out).
The other strategies group adjacent tokens into entities (``entity_group``: the label without its ``B-`` / ``I-``
prefix; a ``B-`` token starts a new group; the score is the mean of the tokens' scores; the word is the tokens
joined by the tokenizer). ``simple`` groups the tokens as they are; ``first``, ``average`` and ``max`` first make each
word one token (its sub-words: a WordPiece ``##`` token, a token whose text is shorter than its span), labelled by
its first token's best label, by the best label of the average of its tokens' scores, or by the token scoring
highest.

.. code-block:: python

    from fx2onnx.runtime.entities import tag_tokens, group_entities

    tagged = tag_tokens(text, tokens, ids, scores, special, offsets, tokenizer.unk_token_id,
                        word_pieces=True)
    print(group_entities(tagged, "first", id2label, tokenizer.convert_tokens_to_string))
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

#: the strategies of transformers' token-classification pipeline
AGGREGATIONS = ("none", "simple", "first", "average", "max")


def tag_tokens(text: str, tokens: list[str], ids: np.ndarray, scores: np.ndarray, special: np.ndarray,
               offsets: np.ndarray, unk_id: int | None, word_pieces: bool) -> list[dict[str, Any]]:
    """The tokens of ``text`` which are not special: their text (the span of the text for an unknown token), scores,
    span, position and whether they continue a word (``word_pieces``: the tokenizer marks the sub-words, so a token
    whose text differs in length from its span continues one; otherwise a token not after a space does)."""
    tagged = []
    for index, token_scores in enumerate(scores):
        if special[index]:
            continue
        start, end = (int(v) for v in offsets[index])
        word, span = tokens[index], text[start:end]
        continues = len(word) != len(span) if word_pieces else start > 0 and " " not in text[start - 1: start + 1]
        if int(ids[index]) == unk_id:
            word, continues = span, False
        tagged.append({"word": word, "scores": token_scores, "start": start, "end": end, "index": index,
                       "continues": continues})
    return tagged


def _label(id2label: dict[int, str], index: int) -> str:
    return id2label.get(int(index), f"LABEL_{int(index)}")


def _prefix(label: str) -> tuple[str, str]:
    """(``B`` or ``I``, the label without its prefix); a label without prefix continues."""
    return (label[0], label[2:]) if label[:2] in ("B-", "I-") else ("I", label)


def _words(tokens: list[dict[str, Any]], strategy: str, id2label: dict[int, str],
           join: Callable[[list[str]], str]) -> list[dict[str, Any]]:
    """Each word (a token and the tokens continuing it) as one entity labelled by ``strategy``."""
    words: list[list[dict[str, Any]]] = []
    for token in tokens:
        if words and token["continues"]:
            words[-1].append(token)
        else:
            words.append([token])
    entities = []
    for word in words:
        if strategy == "first":
            scores = word[0]["scores"]
        elif strategy == "max":
            scores = max(word, key=lambda t: t["scores"].max())["scores"]
        else:  # average
            scores = np.nanmean(np.stack([t["scores"] for t in word]), axis=0)
        best = int(scores.argmax())
        entities.append({"entity": _label(id2label, best), "score": float(scores[best]),
                         "word": join([t["word"] for t in word]), "start": word[0]["start"], "end": word[-1]["end"]})
    return entities


def group_entities(tokens: list[dict[str, Any]], strategy: str, id2label: dict[int, str],
                   join: Callable[[list[str]], str], ignore: tuple[str, ...] = ("O",)) -> list[dict[str, Any]]:
    """The entities of the tagged ``tokens`` (:func:`tag_tokens`) for ``strategy`` (one of :data:`AGGREGATIONS`),
    ``join`` making a word of tokens (the tokenizer's ``convert_tokens_to_string``), the labels ``ignore`` left out."""
    if strategy not in AGGREGATIONS:
        raise ValueError(f"the aggregation {strategy!r} is not one of transformers' {list(AGGREGATIONS)}.")
    if strategy in ("none", "simple"):
        entities = []
        for token in tokens:
            best = int(token["scores"].argmax())
            entities.append({"entity": _label(id2label, best), "score": float(token["scores"][best]),
                             "index": token["index"], "word": token["word"], "start": token["start"],
                             "end": token["end"]})
        if strategy == "none":
            return [e for e in entities if e["entity"] not in ignore]
    else:
        entities = _words(tokens, strategy, id2label, join)
    groups: list[list[dict[str, Any]]] = []
    for entity in entities:
        prefix, name = _prefix(entity["entity"])
        if groups and prefix != "B" and name == _prefix(groups[-1][-1]["entity"])[1]:
            groups[-1].append(entity)
        else:
            groups.append([entity])
    result = [{"entity_group": group[0]["entity"].split("-", 1)[-1],  # as transformers: the text after a dash
               "score": float(np.nanmean([e["score"] for e in group])),
               "word": join([e["word"] for e in group]), "start": group[0]["start"], "end": group[-1]["end"]}
              for group in groups]
    return [r for r in result if r["entity_group"] not in ignore]
