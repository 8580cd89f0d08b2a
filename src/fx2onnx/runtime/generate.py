"""Greedy decoding on onnxruntime with a model :func:`fx2onnx.to_onnx` exported with a cache.

The loop does what ``model.generate(do_sample=False)`` of :epkg:`transformers` does
for a decoder: a first call (*prefill*) on the whole prompt with an empty cache
(past length 0), then one call per new token, the present keys and values of a
call fed back as the past of the next one. Which output feeds which input is
read from the model's metadata (``fx2onnx.cache``, written by
:func:`fx2onnx.to_onnx`: an output at the same place in the returned structure as
a cache input), never from names given by the user.

The cache stays in onnxruntime memory: the outputs are bound with an
:class:`onnxruntime.IOBinding`, onnxruntime allocates them, and the
:class:`onnxruntime.OrtValue` it returns are bound as the next inputs; only the
logits of the last position are read into numpy.

A batch is left padded (``attention_mask`` holds 0 for the pads); the positions
are computed from the mask as transformers computes them (cumulated sum minus
one, 0 on the pads) when the model takes ``position_ids``. A sequence which
produced one of ``eos_token_id`` gets ``pad_token_id`` afterwards and the loop
stops when every sequence is finished.

.. code-block:: python

    import copy, fx2onnx, torch
    from fx2onnx.models import get_tiny_model

    tiny = get_tiny_model("llama", with_cache=True)
    with fx2onnx.torch_export_patches(patch_transformers=True):
        onx = fx2onnx.to_onnx(tiny.model, (), kwargs=copy.deepcopy(tiny.inputs),
                              dynamic_shapes=tiny.dynamic_shapes)
    tokens = fx2onnx.generate(onx, torch.tensor([[5, 6, 7]]), max_new_tokens=20)
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any, Sequence

import numpy as np
import onnx

#: the metadata key :func:`fx2onnx.to_onnx` writes (cache input name -> output name)
CACHE_METADATA_KEY = "fx2onnx.cache"
#: inputs the loop computes itself, beside the cache
_TOKEN_INPUTS = ("input_ids", "attention_mask", "position_ids")
_NUMPY_TYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(bfloat16)": np.uint16,  # bound through its ONNX type, see _empty_value
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
}


@dataclasses.dataclass(frozen=True)
class CacheSignature:
    """What the loop feeds and reads: the token inputs the model takes, its logits and its cache.

    ``cache`` lists ``(input name, output name, initial shape, ONNX type)``: the initial
    shape has ``-1`` for the batch and 0 on the axis the cache grows along.
    """

    logits: str
    has_attention_mask: bool
    has_position_ids: bool
    cache: tuple[tuple[str, str, tuple[int, ...], str], ...]

    @classmethod
    def from_session(cls, session: Any) -> "CacheSignature":
        """Reads the signature of an :class:`onnxruntime.InferenceSession` (raises a ValueError
        naming what the loop cannot feed)."""
        inputs = {i.name: i for i in session.get_inputs()}
        outputs = [o.name for o in session.get_outputs()]
        metadata = session.get_modelmeta().custom_metadata_map
        if "input_ids" not in inputs:
            raise ValueError(f"The model has no input 'input_ids' (inputs: {list(inputs)}): it is not a decoder "
                             "taking token ids.")
        if CACHE_METADATA_KEY not in metadata:
            raise ValueError(
                f"The model has no metadata {CACHE_METADATA_KEY!r} pairing its cache inputs with its outputs: "
                "export it with fx2onnx.to_onnx and a cache (past_key_values=DynamicCache(...)) in kwargs."
            )
        pairs: dict[str, str] = json.loads(metadata[CACHE_METADATA_KEY])
        missing = [n for n in pairs if n not in inputs] + [n for n in pairs.values() if n not in outputs]
        if missing:
            raise ValueError(f"The cache pairs of the metadata name {missing}, absent from the model "
                             f"(inputs {list(inputs)}, outputs {outputs}).")
        unknown = [n for n in inputs if n not in pairs and n not in _TOKEN_INPUTS]
        if unknown:
            raise ValueError(f"The generation loop cannot feed the inputs {unknown}: it feeds {list(_TOKEN_INPUTS)} "
                             "and the cache.")
        others = [n for n in outputs if n not in pairs.values()]
        logits = "logits" if "logits" in others else (others[0] if len(others) == 1 else None)
        if logits is None:
            raise ValueError(f"Cannot tell which output holds the logits among {others}.")
        batch = inputs["input_ids"].shape[0]
        cache = tuple(
            (name, output, _initial_shape(inputs[name], batch), inputs[name].type) for name, output in pairs.items()
        )
        return cls(logits, "attention_mask" in inputs, "position_ids" in inputs, cache)


def _initial_shape(info: Any, batch_dim: Any) -> tuple[int, ...]:
    """The shape of an empty cache input: -1 for the batch, 0 on the axis it grows along.

    A key or value is ``(batch, heads, past_seq, head_dim)``; the count of tokens a
    cache of sliding layers carries (``tokens_seen``, :mod:`fx2onnx.patches.caches`) is
    ``(0, tokens_seen)``: both have one dynamic axis beside the batch.
    """
    shape = list(info.shape)
    batched = isinstance(batch_dim, str) and bool(shape) and shape[0] == batch_dim
    growing = [i for i, d in enumerate(shape) if not isinstance(d, int) and not (i == 0 and batched)]
    if len(growing) != 1:
        raise ValueError(
            f"Cache input {info.name!r} of shape {shape} is not a key/value cache: the loop starts from an empty "
            f"cache, which needs one dynamic axis beside the batch ({batch_dim!r}), this one has {len(growing)}. "
            "A recurrent state (state-space models) is not supported."
        )
    return tuple(-1 if i == 0 and batched else 0 if i in growing else int(d) for i, d in enumerate(shape))


@dataclasses.dataclass
class GenerationTimes:
    """Where the time of the last :meth:`OnnxGenerator.generate` went (seconds).

    ``decode_model`` sums the calls to onnxruntime after the first one; ``decode_total``
    is the time of the same steps in the loop (feeds, bindings, argmax included).
    """

    prefill_total: float = 0.0
    prefill_model: float = 0.0
    decode_total: float = 0.0
    decode_model: float = 0.0
    decode_steps: int = 0
    #: seconds outside the model's run, one per decode step
    step_overheads: list[float] = dataclasses.field(default_factory=list)

    @property
    def tokens_per_second(self) -> float:
        """New tokens per second, the prefill included."""
        total = self.prefill_total + self.decode_total
        return (self.decode_steps + 1) / total if total else float("nan")

    @property
    def overhead_per_token(self) -> float:
        """Seconds per decoded token spent outside the model's run."""
        return (self.decode_total - self.decode_model) / self.decode_steps if self.decode_steps else float("nan")

    @property
    def median_overhead(self) -> float:
        """Median of the seconds per decode step outside the model's run (robust to a busy machine)."""
        return float(np.median(self.step_overheads)) if self.step_overheads else float("nan")

    @property
    def overhead_share(self) -> float:
        """Share of a decode step spent outside the model's run."""
        return (self.decode_total - self.decode_model) / self.decode_total if self.decode_total else float("nan")


class OnnxGenerator:
    """An onnxruntime session and its :class:`CacheSignature`, ready to generate many times.

    :param model: an ONNX model exported by :func:`fx2onnx.to_onnx` with a cache (a
        :class:`onnx.ModelProto`, a path or an :class:`onnxruntime.InferenceSession`)
    :param providers: onnxruntime providers when a session is created (default: CPU)
    """

    def __init__(self, model: Any, providers: Sequence[str] | None = None):
        if hasattr(model, "io_binding"):
            self.session = model
        else:
            from ..validation import make_session

            if not isinstance(model, (onnx.ModelProto, str, os.PathLike)):
                raise TypeError(f"model must be an onnx.ModelProto, a path or an InferenceSession, "
                                f"got {type(model).__name__}.")
            self.session = make_session(model, providers)
        self.signature = CacheSignature.from_session(self.session)
        self.last_times: GenerationTimes | None = None

    def generate(
        self,
        input_ids: Any,
        max_new_tokens: int,
        attention_mask: Any = None,
        eos_token_id: int | Sequence[int] | None = None,
        pad_token_id: int | None = None,
    ) -> Any:
        """Greedy decoding; see :func:`fx2onnx.generate`."""
        ids, mask, as_torch = _check_inputs(input_ids, attention_mask, max_new_tokens)
        sig = self.signature
        if not sig.has_position_ids and (mask == 0).any():
            raise ValueError("The model has no input 'position_ids': with left padding its positions would count "
                             "the pads (transformers counts from the first token). Export it with position_ids "
                             "or generate without padding.")
        if not sig.has_attention_mask and (mask == 0).any():
            raise ValueError("The model has no input 'attention_mask': it cannot be given padded sequences.")
        eos = np.array([] if eos_token_id is None else np.atleast_1d(eos_token_id), dtype=np.int64)
        pad = int(eos[0]) if pad_token_id is None and eos.size else pad_token_id
        batch = ids.shape[0]
        positions = np.where(mask == 0, 0, np.cumsum(mask, axis=1) - 1).astype(np.int64)

        past = {name: _empty_value(shape, batch, type_) for name, _, shape, type_ in sig.cache}
        binding = self.session.io_binding()
        outputs = [sig.logits] + [out for _, out, _, _ in sig.cache]
        unfinished = np.ones(batch, dtype=bool)
        new_tokens: list[np.ndarray] = []
        times = GenerationTimes()
        step_ids, step_positions = ids, positions
        for step in range(max_new_tokens):
            begin = time.perf_counter()
            binding.bind_cpu_input("input_ids", step_ids)
            if sig.has_attention_mask:
                binding.bind_cpu_input("attention_mask", mask)
            if sig.has_position_ids:
                binding.bind_cpu_input("position_ids", step_positions)
            for name, value in past.items():
                binding.bind_ortvalue_input(name, value)
            binding.clear_binding_outputs()
            for name in outputs:
                binding.bind_output(name, "cpu")
            model_begin = time.perf_counter()
            self.session.run_with_iobinding(binding)
            model_time = time.perf_counter() - model_begin
            values = binding.get_outputs()
            for (name, _, _, _), value in zip(sig.cache, values[1:]):
                past[name] = value
            logits = values[0].numpy()[:, -1, :]
            next_tokens = logits.argmax(axis=-1).astype(np.int64)
            if eos.size:
                next_tokens = np.where(unfinished, next_tokens, pad)
                unfinished &= ~np.isin(next_tokens, eos)
            new_tokens.append(next_tokens)
            step_ids = next_tokens[:, None]
            mask = np.concatenate([mask, np.ones((batch, 1), dtype=np.int64)], axis=1)
            step_positions = step_positions[:, -1:] + 1
            elapsed = time.perf_counter() - begin
            if step == 0:
                times.prefill_total, times.prefill_model = elapsed, model_time
            else:
                times.decode_total += elapsed
                times.decode_model += model_time
                times.decode_steps += 1
                times.step_overheads.append(elapsed - model_time)
            if not unfinished.any():
                break
        binding.clear_binding_inputs()
        binding.clear_binding_outputs()
        self.last_times = times
        result = np.concatenate([ids, np.stack(new_tokens, axis=1)], axis=1)
        if as_torch:
            import torch

            return torch.from_numpy(result)
        return result


def _check_inputs(input_ids: Any, attention_mask: Any, max_new_tokens: int) -> tuple[np.ndarray, np.ndarray, bool]:
    """``(ids, mask, as_torch)``: int64 contiguous arrays, and whether the caller gave torch tensors."""
    as_torch = type(input_ids).__module__.startswith("torch")
    ids = np.ascontiguousarray(input_ids.detach().cpu().numpy() if as_torch else np.asarray(input_ids)).astype(np.int64)
    if ids.ndim != 2 or ids.shape[1] == 0:
        raise ValueError(f"input_ids must be a 2D tensor (batch, prompt length > 0), got shape {ids.shape}.")
    if not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}.")
    if attention_mask is None:
        return ids, np.ones(ids.shape, dtype=np.int64), as_torch
    mask = attention_mask.detach().cpu().numpy() if hasattr(attention_mask, "detach") else np.asarray(attention_mask)
    mask = np.ascontiguousarray(mask).astype(np.int64)
    if mask.shape != ids.shape:
        raise ValueError(f"attention_mask has shape {mask.shape}, input_ids {ids.shape}: they must be equal.")
    if (mask[:, 1:] < mask[:, :-1]).any() or not mask[:, -1].all():
        raise ValueError("attention_mask must be left padded (0 for the pads, then 1 up to the last token), "
                         "as transformers expects for generation with decoders.")
    return ids, mask, as_torch


def _empty_value(shape: tuple[int, ...], batch: int, onnx_type: str) -> Any:
    """An OrtValue of ``shape`` (-1 replaced by the batch size), the first past of the cache."""
    import onnxruntime

    if onnx_type not in _NUMPY_TYPES:
        raise ValueError(f"Cache inputs of type {onnx_type} are not supported.")
    array = np.zeros(tuple(batch if d == -1 else d for d in shape), dtype=_NUMPY_TYPES[onnx_type])
    if onnx_type == "tensor(bfloat16)":
        return onnxruntime.OrtValue.ortvalue_from_numpy_with_onnx_type(array, onnx.TensorProto.BFLOAT16)
    return onnxruntime.OrtValue.ortvalue_from_numpy(array)


def generate(
    model: Any,
    input_ids: Any,
    max_new_tokens: int,
    attention_mask: Any = None,
    eos_token_id: int | Sequence[int] | None = None,
    *,
    pad_token_id: int | None = None,
    providers: Sequence[str] | None = None,
) -> Any:
    """Greedy decoding on onnxruntime, the tokens ``model.generate(do_sample=False)`` returns.

    :param model: an ONNX model exported by :func:`fx2onnx.to_onnx` with a cache (a
        :class:`onnx.ModelProto`, a path or an :class:`onnxruntime.InferenceSession`;
        :class:`OnnxGenerator` keeps the session for many calls)
    :param input_ids: the prompts, int64 ``(batch, length)``, left padded
    :param max_new_tokens: the number of tokens to generate at most
    :param attention_mask: 1 for a token, 0 for a pad (left padding); default: no pad
    :param eos_token_id: one or several end-of-sequence tokens: a sequence which
        produced one is finished and gets ``pad_token_id`` afterwards; the loop stops
        when all are finished
    :param pad_token_id: the token of finished sequences (default: the first eos token,
        as transformers)
    :param providers: onnxruntime providers (default: CPU)
    :return: the prompts followed by the new tokens, ``(batch, length + new)``, int64,
        a :class:`torch.Tensor` if ``input_ids`` is one (as transformers returns), a
        numpy array otherwise

    The first call runs the whole prompt with an empty cache; the cache then stays
    in onnxruntime memory (see the module :mod:`fx2onnx.runtime.generate`).
    """
    return OnnxGenerator(model, providers).generate(input_ids, max_new_tokens, attention_mask, eos_token_id,
                                                     pad_token_id)
