"""Inputs and dynamic shapes for a discovered architecture, two sets of other sizes.

A cache is the one the model itself returns after a first forward pass on a
prefix (a ``DynamicCache`` with sliding layers, an ``EncoderDecoderCache``, a
state-space cache...), so that every architecture gets the cache it really uses.
The dynamic shapes are read from the two input sets: every dimension whose size
differs between them is dynamic and named after what it is (``batch``, ``seq``,
``past_seq``, ``total_seq``, ``encoder_seq``).
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
from typing import Any

import torch

from ..inputs.discover import Architecture, tiny_model
from ..patches.cache_check import CacheStateLostError, check_cache_round_trip
from ..validation import cache_flattening

#: (batch, seq, past_seq) of the two input sets; the second cache is longer than
#: any sliding window of the tiny configurations (8)
SIZES = ((2, 3, 5), (3, 4, 11))
#: encoder length = seq + this
ENCODER_EXTRA = 3


class CacheFlatteningError(TypeError):
    """The cache a model returns cannot be flattened for torch.export (a failure of the capture step)."""


@dataclasses.dataclass
class ZooModel:
    """A discovered architecture built: the model, two input sets and their dynamic shapes."""

    #: the model type
    name: str
    #: the tiny model, in eval mode
    model: torch.nn.Module
    #: its configuration
    config: Any
    #: the input set of the export (keyword inputs)
    inputs: dict[str, Any]
    #: an input set of other shapes, to check the dynamic model
    inputs2: dict[str, Any]
    #: the dynamic shapes of the inputs, by input name
    dynamic_shapes: dict[str, Any]

    def copy_inputs(self, index: int) -> dict[str, Any]:
        """A deep copy of one input set (a forward pass updates a cache in place)."""
        return copy.deepcopy(self.inputs if index == 0 else self.inputs2)


def _cache_name(model: torch.nn.Module) -> str | None:
    parameters = inspect.signature(model.forward).parameters
    for name in ("past_key_values", "cache_params", "past_key_value", "mems", "state"):
        if name in parameters:
            return name
    return None


def _prefill(model: torch.nn.Module, arch: Architecture, batch: int, past: int, vocab: int,
             generator: torch.Generator, encoder: dict[str, Any]) -> Any:
    """The cache the model returns after ``past`` tokens."""
    ids = torch.randint(3, vocab, (batch, past), generator=generator)
    kwargs: dict[str, Any] = dict(use_cache=True)
    if arch.kind == "seq2seq":
        kwargs.update(encoder, decoder_input_ids=ids)
    else:
        kwargs.update(input_ids=ids, attention_mask=torch.ones((batch, past), dtype=torch.int64))
    with torch.no_grad():
        out = model(**kwargs)
    for name in ("past_key_values", "cache_params", "mems", "state"):
        cache = getattr(out, name, None)
        if cache is not None:
            return cache
    raise ValueError(f"{type(model).__name__} returned no cache after a forward pass with use_cache=True.")


def _input_set(model, arch: Architecture, config, sizes, with_cache: bool, generator) -> dict[str, Any]:
    batch, seq, past = sizes
    vocab = int(getattr(config, "vocab_size", 1024) or 1024)
    parameters = inspect.signature(model.forward).parameters
    inputs: dict[str, Any] = {}
    encoder: dict[str, Any] = {}
    if arch.kind == "seq2seq":
        encoder_seq = seq + ENCODER_EXTRA
        encoder = {
            "input_ids": torch.randint(3, vocab, (batch, encoder_seq), generator=generator),
            "attention_mask": torch.ones((batch, encoder_seq), dtype=torch.int64),
        }
        inputs.update(encoder)
        inputs["decoder_input_ids"] = torch.randint(3, vocab, (batch, seq), generator=generator)
    else:
        inputs["input_ids"] = torch.randint(3, vocab, (batch, seq), generator=generator)
        if "attention_mask" in parameters:
            total = seq + (past if with_cache else 0)
            inputs["attention_mask"] = torch.ones((batch, total), dtype=torch.int64)
    if with_cache:
        name = _cache_name(model)
        if name is None:
            raise ValueError(f"{type(model).__name__}.forward takes no cache argument.")
        inputs[name] = _prefill(model, arch, batch, past, vocab, generator, encoder)
        if name == "cache_params":
            # state-space models decode without a mask (as generate calls them): a mask over
            # the cached and the new tokens is refused by their forward
            inputs.pop("attention_mask", None)
        if name == "cache_params" and "cache_position" in parameters:
            inputs["cache_position"] = torch.arange(past, past + seq, dtype=torch.int64)
    return inputs


def _dimension_names(with_cache: bool, kind: str) -> dict[tuple[int, int], str]:
    (b1, s1, p1), (b2, s2, p2) = SIZES
    names = {(b1, b2): "batch", (s1, s2): "seq"}
    if with_cache:
        names[(p1, p2)] = "past_seq"
        names[(p1 + s1, p2 + s2)] = "total_seq"
    if kind == "seq2seq":
        names[(s1 + ENCODER_EXTRA, s2 + ENCODER_EXTRA)] = "encoder_seq"
    return names


def infer_dynamic_shapes(inputs: Any, inputs2: Any, names: dict[tuple[int, int], str]) -> Any:
    """Dynamic shapes from two input sets: a dimension of other size in the second set is dynamic.

    Transformers caches are described by their flattened children (the list
    :func:`fx2onnx.register_cache_serialization` defines). A dynamic dimension
    whose pair of sizes is not in ``names`` is named ``dim_<size1>_<size2>``.
    """
    from torch.utils import _pytree as pytree

    def walk(a: Any, b: Any) -> Any:
        if isinstance(a, torch.Tensor):
            if a.shape == b.shape:
                return None
            if a.dim() != b.dim():
                raise ValueError(f"Two input sets give tensors of ranks {a.dim()} and {b.dim()}.")
            spec = {i: names.get((x, y), f"dim_{x}_{y}") for i, (x, y) in enumerate(zip(a.shape, b.shape)) if x != y}
            return spec or None
        if isinstance(a, dict):
            return {k: walk(v, b[k]) for k, v in a.items()}
        if isinstance(a, (list, tuple)):
            return type(a)(walk(x, y) for x, y in zip(a, b))
        if a is None or isinstance(a, (bool, int, float, str)):
            return None
        node = pytree.SUPPORTED_NODES.get(type(a))
        if node is None:
            raise TypeError(f"Cannot describe the dynamic shapes of a {type(a).__name__}: not a pytree node.")
        children_a, _ = node.flatten_fn(a)
        children_b, _ = node.flatten_fn(b)
        if len(children_a) != len(children_b):
            raise ValueError(f"The two {type(a).__name__} of the input sets have a different structure.")
        return [walk(x, y) for x, y in zip(children_a, children_b)]

    with cache_flattening((inputs, inputs2)):
        return walk(inputs, inputs2)


def build_zoo_model(arch: Architecture, with_cache: bool, seed: int = 0) -> ZooModel:
    """The model of ``arch`` (seeded random weights), two input sets and the dynamic shapes."""
    model, config = tiny_model(arch, seed=seed)
    # no use_cache argument (torch.export would freeze a bool): the configuration says it
    config.use_cache = with_cache
    generator = torch.Generator().manual_seed(seed + 1)
    inputs = _input_set(model, arch, config, SIZES[0], with_cache, generator)
    inputs2 = _input_set(model, arch, config, SIZES[1], with_cache, generator)
    try:
        shapes = infer_dynamic_shapes(inputs, inputs2, _dimension_names(with_cache, arch.kind))
    except (AttributeError, TypeError, ValueError) as e:
        caches = sorted({type(layer).__name__ for v in inputs.values() for layer in getattr(v, "layers", [])})
        raise CacheFlatteningError(
            f"The cache of {arch.name} ({', '.join(caches) or 'no layers'}) cannot be flattened into tensors "
            f"for torch.export ({type(e).__name__}: {e}); fix: teach fx2onnx.patches.caches to flatten "
            f"these layers (register_cache_serialization)."
        ) from None
    _check_cache_round_trip(arch, inputs)
    return ZooModel(arch.name, model, config, inputs, inputs2, shapes)


def _check_cache_round_trip(arch: Architecture, inputs: dict[str, Any]) -> None:
    """A cache losing tensors when flattened fails the capture step with their names
    (instead of a size mismatch inside torch.export or a wrong model)."""

    try:
        with cache_flattening(inputs):
            check_cache_round_trip(inputs)
    except CacheStateLostError as e:
        raise CacheFlatteningError(f"{arch.name}: {e}") from None
