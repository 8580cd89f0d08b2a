"""Text in, text out from a folder ``python -m fx2onnx export`` wrote (``generate OUTDIR "prompt"``).

:class:`FolderGenerator` opens the decoder the folder's ``fx2onnx.json`` names (or
``onnx/model.onnx``, the layout transformers.js and optimum read; ``model.onnx`` for a folder of
the previous layout, opened with a :class:`OldLayoutWarning`) in onnxruntime, its tokenizer with
:epkg:`transformers` (offline: the files
of the folder), reads the end-of-sequence tokens of its ``generation_config.json``, and
generates with :class:`fx2onnx.runtime.OnnxGenerator`, greedy or sampled
(:class:`fx2onnx.runtime.sampling.Sampling`), the text given to a callback as it is decoded.

.. code-block:: python

    from fx2onnx.runtime.folder import FolderGenerator
    gen = FolderGenerator("qwen3_onnx")
    result = gen.generate_text("Write a story", max_new_tokens=20, on_text=print)
    print(result.text, result.decode_tokens_per_second)
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from typing import Any, Callable, Sequence

import numpy as np

from ..formats import FOLDER_METADATA  # noqa: F401 (the file fx2onnx.deploy.export_folder writes beside the model)
from .generate import GenerationTimes, OnnxGenerator
from .integrity import check_folder_files
from .sampling import Sampling

#: where a folder holds its decoder: where transformers.js and optimum look for it
DECODER_FILE = "onnx/model.onnx"
#: where the folders of the previous layout held it (the cache named ``past_key_values_key_<i>``)
OLD_DECODER_FILE = "model.onnx"


class OldLayoutWarning(UserWarning):
    """A folder written by the previous layout: our loop runs it, transformers.js and optimum do not."""


@dataclasses.dataclass
class TextResult:
    """The outcome of :meth:`FolderGenerator.generate_text`."""

    prompt_ids: list[int]
    new_ids: list[int]
    text: str | None
    times: GenerationTimes

    @property
    def prefill_tokens_per_second(self) -> float:
        t = self.times.prefill_total
        return len(self.prompt_ids) / t if t else float("nan")

    @property
    def decode_tokens_per_second(self) -> float:
        t = self.times.decode_total
        return self.times.decode_steps / t if t else float("nan")

    def summary(self) -> str:
        """One line: the tokens and speeds of the prefill and the decoding."""
        return (f"prefill: {len(self.prompt_ids)} tokens, {self.times.prefill_total:.3f} s "
                f"({self.prefill_tokens_per_second:.1f} tokens/s); decode: {self.times.decode_steps} tokens, "
                f"{self.times.decode_total:.3f} s ({self.decode_tokens_per_second:.1f} tokens/s)")


class TextStream:
    """Turns the tokens of one sequence into text as they come: the text decoded so far minus
    what was given already, held back while it ends in an incomplete character."""

    def __init__(self, tokenizer: Any, on_text: Callable[[str], None]):
        self.tokenizer, self.on_text = tokenizer, on_text
        self.ids: list[int] = []
        self.sent = 0

    def __call__(self, tokens: np.ndarray) -> None:
        self.ids.append(int(tokens[0]))
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if text.endswith("\ufffd"):
            return
        if len(text) > self.sent:
            self.on_text(text[self.sent:])
            self.sent = len(text)


def _read_json(path: str) -> dict[str, Any]:
    """The content of a JSON file of the folder, empty when missing; one line naming a broken one."""
    if not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path!r} is not JSON ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}): "
                         "the folder changed after the export; export it again.") from None


def session_options(threads: int | None = None) -> Any:
    """onnxruntime's session options of the folder loops: warnings silenced, ``threads`` intra-op
    threads when given (onnxruntime's choice otherwise)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    if threads:
        options.intra_op_num_threads = threads
    return options


def piece_sessions(folder: str, pieces: dict[str, dict[str, Any]], providers: Sequence[str] | None,
                   threads: int | None) -> dict[str, Any]:
    """One onnxruntime session per entry of ``pieces`` (``fx2onnx.json``'s piece entries, by name: each names its
    ``file``), with the options of the folder loops (:func:`session_options`)."""
    import onnxruntime

    options, providers = session_options(threads), list(providers or ["CPUExecutionProvider"])
    return {name: onnxruntime.InferenceSession(os.path.join(folder, piece["file"]), options, providers=providers)
            for name, piece in pieces.items()}


def open_pieces(
    folder: str, task: str, first: str, refusal: str, providers: Sequence[str] | None, threads: int | None,
) -> tuple[dict[str, Any], Any, list[str], OnnxGenerator]:
    """The pieces of a folder exported as an encoder (``first``: ``encoder``, ``vision``) and a decoder:
    ``(pieces, the first piece's session, its output names, the decoder's generator)``, the first
    piece's outputs fed unchanged to every decoder step. A folder of another task, or without both
    pieces, raises ValueError with ``refusal``."""
    import onnxruntime

    metadata = _read_json(os.path.join(folder, FOLDER_METADATA))
    pieces = metadata.get("pieces", {})
    if metadata.get("task") != task or not {first, "decoder"} <= set(pieces):
        raise ValueError(refusal.format(folder=repr(folder), task=repr(metadata.get("task"))))
    check_folder_files(folder, metadata)
    options = session_options(threads)
    providers = list(providers or ["CPUExecutionProvider"])
    session = onnxruntime.InferenceSession(os.path.join(folder, pieces[first]["file"]), options, providers=providers)
    names = list(pieces[first]["outputs"])
    decoder = OnnxGenerator(os.path.join(folder, pieces["decoder"]["file"]), providers, options, constant_inputs=names)
    return pieces, session, names, decoder


def warn_old_layout(folder: str, generator: OnnxGenerator) -> None:
    """One line (an :class:`OldLayoutWarning`) when the decoder of ``folder`` names its cache as the folders of the
    previous layout did (``past_key_values_key_<i>``, ``model.onnx`` at the root): it runs here, not in
    transformers.js nor optimum."""
    old = ("past_key_values_key_", "past_key_values_value_")
    if any(name.startswith(old) for name, *_ in generator.signature.cache):
        warnings.warn(f"{folder!r} was written by an older fx2onnx (its cache named past_key_values_key_<i>): it runs "
                      "here; export it again for transformers.js and optimum to load it.", OldLayoutWarning,
                      stacklevel=3)


class FolderGenerator:
    """The decoder, tokenizer and generation config of an exported folder.

    :param folder: a folder written by :func:`fx2onnx.deploy.export_folder`
    :param providers: onnxruntime providers (default: CPU)
    :param threads: onnxruntime's intra-op threads (default: onnxruntime's choice)
    """

    def __init__(self, folder: str | os.PathLike, providers: Sequence[str] | None = None, threads: int | None = None):
        self.folder = os.fspath(folder)
        metadata = _read_json(os.path.join(self.folder, FOLDER_METADATA))
        check_folder_files(self.folder, metadata)
        path = os.path.join(self.folder, metadata.get("decoder", DECODER_FILE))
        if "decoder" not in metadata and not os.path.isfile(path):
            path = os.path.join(self.folder, OLD_DECODER_FILE)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{self.folder!r} holds no {DECODER_FILE}: export a folder first with "
                                    "python -m fx2onnx export CHECKPOINT --out FOLDER.")
        self.generator = OnnxGenerator(path, providers, session_options(threads))
        warn_old_layout(self.folder, self.generator)
        generation = _read_json(os.path.join(self.folder, "generation_config.json"))
        config = _read_json(os.path.join(self.folder, "config.json"))
        self.eos_token_id = generation.get("eos_token_id", config.get("eos_token_id"))
        self.pad_token_id = generation.get("pad_token_id", config.get("pad_token_id"))
        self._tokenizer: Any = None

    @property
    def tokenizer(self) -> Any:
        """The folder's tokenizer (loaded on first use, offline); a ValueError when it has none."""
        if self._tokenizer is None:
            import transformers

            why = "an empty vocabulary"
            try:
                tokenizer = transformers.AutoTokenizer.from_pretrained(self.folder, local_files_only=True)
            except (OSError, ValueError, TypeError) as e:
                tokenizer, why = None, type(e).__name__
            # transformers builds a tokenizer of the config's class without its files: special tokens only
            if tokenizer is None or len(tokenizer.get_vocab()) <= len(set(tokenizer.all_special_tokens)):
                raise ValueError(f"{self.folder!r} has no tokenizer transformers can load ({why}): give token ids "
                                 "(--ids 1,2,3) or copy the tokenizer files into the folder.")
            self._tokenizer = tokenizer
        return self._tokenizer

    def encode(self, prompt: str, chat: bool = False) -> list[int]:
        """The token ids of ``prompt``; with ``chat``, of the prompt as a user message in the
        tokenizer's chat template (the assistant's turn opened)."""
        tok = self.tokenizer
        if chat:
            if not getattr(tok, "chat_template", None):
                raise ValueError(f"The tokenizer of {self.folder!r} has no chat template: generate without --chat.")
            ids = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                          tokenize=True, return_dict=False)
            return [int(i) for i in (ids["input_ids"] if isinstance(ids, dict) else ids)]
        return [int(i) for i in tok(prompt)["input_ids"]]

    def generate_text(
        self,
        prompt: str | Sequence[int],
        max_new_tokens: int = 32,
        sampling: Sampling | None = None,
        chat: bool = False,
        on_text: Callable[[str], None] | None = None,
    ) -> TextResult:
        """Generates after ``prompt`` (a text, or token ids: then no tokenizer is needed).

        :param on_text: receives the text as it is decoded (a text prompt only)
        :return: a :class:`TextResult` (``text`` is None for token ids)
        """
        as_text = isinstance(prompt, str)
        ids = self.encode(prompt, chat) if as_text else [int(i) for i in prompt]
        if not ids:
            raise ValueError("The prompt has no token.")
        stream = TextStream(self.tokenizer, on_text) if as_text and on_text is not None else None
        tokens = self.generator.generate(
            np.array([ids], dtype=np.int64), max_new_tokens, eos_token_id=self.eos_token_id,
            pad_token_id=self.pad_token_id, sampling=sampling, streamer=stream,
        )
        new = [int(t) for t in tokens[0, len(ids):]]
        text = self.tokenizer.decode(new, skip_special_tokens=True) if as_text else None
        return TextResult(ids, new, text, self.generator.last_times)

    def generate_texts(self, prompts: Sequence[str], max_new_tokens: int = 32, sampling: Sampling | None = None,
                       chat: bool = False) -> list[TextResult]:
        """Generates after every prompt of a batch, the shorter prompts padded on the left: every
        result's tokens are transformers' ``generate`` on the same padded batch (a sequence which
        ends is fed its pad token while the others go on)."""
        if not prompts:
            raise ValueError("Give at least one prompt.")
        encoded = [self.encode(p, chat) for p in prompts]
        if any(not ids for ids in encoded):
            raise ValueError("A prompt has no token.")
        length = max(len(ids) for ids in encoded)
        pad = self.pad_token_id if self.pad_token_id is not None else (np.atleast_1d(self.eos_token_id)[0]
                                                                      if self.eos_token_id is not None else 0)
        ids = np.full((len(encoded), length), int(pad), dtype=np.int64)
        mask = np.zeros((len(encoded), length), dtype=np.int64)
        for row, prompt_ids in enumerate(encoded):
            ids[row, length - len(prompt_ids):], mask[row, length - len(prompt_ids):] = prompt_ids, 1
        tokens = self.generator.generate(ids, max_new_tokens, attention_mask=mask, eos_token_id=self.eos_token_id,
                                         pad_token_id=self.pad_token_id, sampling=sampling)
        results = []
        for prompt_ids, row in zip(encoded, tokens):
            new = [int(t) for t in row[length:]]
            results.append(TextResult(prompt_ids, new, self.tokenizer.decode(new, skip_special_tokens=True),
                                      self.generator.last_times))
        return results
