"""The example cache of a decoder read from the model itself: a prefill on a few tokens returns the cache
the model really keeps, whatever its layers hold.

A configuration tells the shape of a plain key/value cache (``[batch, kv_heads, seq, head_dim]`` per layer),
not the others: the latent keys of multi-head latent attention (DeepSeek V2 / V3), the convolution and
recurrent states of linear-attention and state-space layers (Qwen3-Next, LFM2, Falcon-H1, Bamba, Jamba...),
a configuration field the model ignores (a GPT-NeoX config carrying ``num_key_value_heads``). Here the model
built from the configuration runs a prefill with ``use_cache=True`` and the cache it returns gives the
classes of its layers and every state's shape and dtype. The prefill runs

* on the CPU with random weights when the model is small (:data:`CPU_PREFILL_PARAMETERS`),
* on the meta device otherwise, in bfloat16 (the meta kernel of the experts' grouped products takes no other
  type) and without a mask (a mask of ones is checked by value): shapes only, no weight in memory. A model whose
  forward still reads a value there raises :class:`PrefillError` and the caller keeps the cache read from the
  configuration.

Every floating point state is then replaced by seeded random values in the export's dtype (the structure is
rebuilt through the pytree flattening of :mod:`fx2onnx.patches.caches`, as ``torch.export`` rebuilds it). The
dynamic dimensions follow from two prefills of other sizes: a dimension which changes with the batch is
``batch``, with the past length ``past_seq``, the count of tokens a sliding cache carries ``tokens_seen``;
the others (a convolution state's kernel, a recurrent state's width) are static.

.. code-block:: python

    import transformers
    from fx2onnx.inputs.model_cache import model_cache_inputs

    config = transformers.Lfm2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, vocab_size=99,
                                     layer_types=["conv", "full_attention"],
                                     architectures=["Lfm2ForCausalLM"])
    inputs, inputs2, shapes = model_cache_inputs(config)
    # [{0: 'batch'}, {0: 'batch', 2: 'past_seq'}, {0: 'batch', 2: 'past_seq'}]
    print(shapes["past_key_values"])
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

import torch
from torch.utils import _pytree as pytree

from ..flatten import cache_flattening

#: (batch, new tokens, past tokens) of the two input sets (those of the cache read from the configuration)
SIZES = ((2, 3, 5), (3, 4, 7))
#: a model of at most this many parameters runs its prefill on the CPU (random weights), a larger one on meta
CPU_PREFILL_PARAMETERS = 150_000_000


class PrefillError(RuntimeError):
    """The model could not run the prefill giving its cache (the caller keeps the configuration's)."""


class NoCacheReturned(PrefillError):
    """The model ran its prefill with ``use_cache=True`` and returned no cache (RWKV's ``state``, RecurrentGemma's
    states kept inside its modules): a cache read from the configuration would not be its own."""


class UnrebuildableCache(ValueError):
    """The model ran its prefill but its cache cannot be rebuilt from its tensors (as ``torch.export`` rebuilds it):
    the configuration's cache has the same classes, the export with a cache is refused."""


def _model_class(config: Any) -> type:
    import transformers  # deferred: heavy

    architectures = getattr(config, "architectures", None) or []
    cls = getattr(transformers, architectures[0], None) if architectures else None
    if cls is None:
        raise PrefillError(f"the config names no transformers class (architectures={architectures})")
    return cls


def _probe_model(config: Any) -> tuple[torch.nn.Module, torch.device]:
    """The model of ``config``: in float32 on the CPU with random weights when small, else in bfloat16 on meta
    (the states are given the export's dtype afterwards)."""
    cls = _model_class(config)
    config = copy.deepcopy(config)
    config.use_cache = True
    with torch.device("meta"):
        # bfloat16: the meta kernel of the experts' grouped matrix products takes no other type
        meta = cls._from_config(config, dtype=torch.bfloat16)
    if sum(p.numel() for p in meta.parameters()) > CPU_PREFILL_PARAMETERS:
        return meta.eval(), torch.device("meta")
    del meta
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = cls._from_config(config, dtype=torch.float32)
    return model.eval(), torch.device("cpu")


def prefill_cache(model: torch.nn.Module, batch: int, past: int, device: torch.device | str = "cpu") -> Any:
    """The cache ``model`` returns after a prefill of ``past`` tokens on a batch of ``batch`` sequences."""
    vocab = int(getattr(model.config, "vocab_size", 0) or 16)
    ids = (torch.arange(batch * past, dtype=torch.int64).reshape(batch, past) % max(vocab - 3, 1) + 3).to(device)
    # no padding: no mask (a mask of ones is checked by value, which the meta device cannot read)
    mask = None if torch.device(device).type == "meta" else torch.ones((batch, past), dtype=torch.int64, device=device)
    try:
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=mask, use_cache=True)
    except Exception as e:  # noqa: BLE001 - the model's forward raises what its code raises
        reason = str(e).splitlines()[0][:200] if str(e) else ""
        raise PrefillError(f"{type(model).__name__} cannot run a prefill on {device} "
                           f"({type(e).__name__}: {reason})") from e
    cache = getattr(out, "past_key_values", None)
    if cache is None:  # state-space models (Mamba, Mamba2) return theirs as cache_params
        cache = getattr(out, "cache_params", None)
    if cache is None:
        raise NoCacheReturned(f"{type(model).__name__} returns no past_key_values nor cache_params after a prefill "
                              "with use_cache=True: its folder cannot be exported with a cache")
    return cache


#: the words of a :func:`decode_step_refusal` whose model reads its whole sequence again after a cache (CPM-Ant):
#: transformers' ``generate`` feeds it so, which a decoder without a cache does not reproduce either
WHOLE_SEQUENCE = "reads the whole sequence at every step"


def decode_step_refusal(config: Any, sizes: tuple[int, int, int] = SIZES[0]) -> str | None:
    """Why the causal LM of ``config`` cannot serve a folder's decoder, where it cannot: the line saying that
    its forward does not decode new tokens from a cache (CPM-Ant reads the whole sequence again at every step,
    ProphetNet's decoder takes one token at a time once it has a cache), None where a step runs. The model runs
    on the CPU with random weights (None for a model too large for it): a prefill of ``past`` tokens, then a
    step of ``seq`` new tokens with the cache it returned, as a folder's decoder runs it."""
    try:
        model, device = _probe_model(config)
    except Exception:  # noqa: BLE001 - the configuration does not build its model: the export says so
        return None
    if device.type != "cpu" or cache_argument(type(model)) != "past_key_values":
        return None
    batch, seq, past = sizes
    name = type(model).__name__
    vocab = int(getattr(model.config, "vocab_size", 0) or 16)
    positions = "position_ids" in inspect.signature(type(model).forward).parameters
    for new in (1, seq):  # one token (a step of generate), then several (a prompt after a cache)
        try:
            cache = prefill_cache(model, batch, past)
        except PrefillError:
            return None
        ids = torch.arange(batch * new, dtype=torch.int64).reshape(batch, new) % max(vocab - 3, 1) + 3
        kwargs: dict[str, Any] = {"attention_mask": torch.ones((batch, past + new), dtype=torch.int64)}
        if positions:
            kwargs["position_ids"] = torch.arange(past, past + new, dtype=torch.int64).expand(batch, -1)
        try:
            with torch.no_grad():
                logits = model(input_ids=ids, past_key_values=cache, use_cache=True, **kwargs).logits
        except Exception as e:  # noqa: BLE001 - the model's forward raises what its code raises
            if new == 1 and _reads_whole_sequence(model, batch, past, vocab):
                return (f"{name} {WHOLE_SEQUENCE}, not the new tokens after its cache: a "
                        "folder's decoder cannot run it")
            reason = str(e).splitlines()[0][:70] if str(e) else ""
            return (f"{name} cannot run {new} new token(s) after its cache ({type(e).__name__}: {reason}): a "
                    "folder's decoder needs it")
        if logits.shape[1] != new:
            return (f"{name} returns {logits.shape[1]} positions for {new} new token(s) after its cache (its forward "
                    f"{WHOLE_SEQUENCE}): a folder's decoder needs it")
    return None


def _reads_whole_sequence(model: torch.nn.Module, batch: int, past: int, vocab: int) -> bool:
    """True when ``model`` decodes one token from its cache given the whole sequence again (CPM-Ant)."""
    try:
        cache = prefill_cache(model, batch, past)
        ids = torch.arange(batch * (past + 1), dtype=torch.int64).reshape(batch, past + 1) % max(vocab - 3, 1) + 3
        with torch.no_grad():
            return model(input_ids=ids, past_key_values=cache, use_cache=True).logits.shape[1] == 1
    except Exception:  # noqa: BLE001 - the model's forward raises what its code raises
        return False


def _leaves(cache: Any) -> tuple[list[str], list[torch.Tensor], Any]:
    """The names (``key_0``, ``conv_1``, ``tokens_seen``...), tensors and spec of a cache's flattening."""
    with cache_flattening(cache):
        keyed, spec = pytree.tree_flatten_with_path(cache)
    names = [str(getattr(path[-1], "key", path[-1])) if path else "" for path, _ in keyed]
    return names, [leaf for _, leaf in keyed], spec


def random_like_cache(cache: Any, dtype: torch.dtype, generator: torch.Generator) -> Any:
    """A cache of the same structure as ``cache`` (its layers rebuilt as ``torch.export`` rebuilds them) whose
    floating point states are seeded random values of their shapes in ``dtype``, on the CPU; integer states
    (counts) keep their values, an empty tensor its shape."""
    _, leaves, spec = _leaves(cache)
    fresh = []
    for leaf in leaves:
        if leaf.is_floating_point():
            fresh.append(torch.randn(tuple(leaf.shape), generator=generator).to(dtype))
        elif leaf.device.type == "meta":
            fresh.append(torch.zeros(tuple(leaf.shape), dtype=leaf.dtype))
        else:
            fresh.append(leaf.detach().clone())
    with cache_flattening(cache):
        return pytree.tree_unflatten(fresh, spec)


def cache_dynamic_shapes(first: Any, second: Any, sizes: tuple[tuple[int, int, int], ...] = SIZES) -> list[Any]:
    """One spec per tensor of the cache's flattening: the axes whose size differs between the caches of two
    prefills of ``sizes`` named ``batch``, ``past_seq`` (``tokens_seen`` for the count a sliding cache carries),
    ``dim_<a>_<b>`` for another; None for a state of fixed shape but for its batch."""
    names1, leaves1, _ = _leaves(first)
    names2, leaves2, _ = _leaves(second)
    if names1 != names2:
        raise PrefillError(f"two prefills give caches of different structures ({names1} and {names2})")
    (b1, _, p1), (b2, _, p2) = sizes
    known = {(b1, b2): "batch", (p1, p2): "past_seq"}
    specs: list[Any] = []
    for name, a, b in zip(names1, leaves1, leaves2):
        if a.dim() != b.dim():
            raise PrefillError(f"the cache state {name!r} has ranks {a.dim()} and {b.dim()} after two prefills")
        spec = {}
        for axis, (x, y) in enumerate(zip(a.shape, b.shape)):
            if x != y:
                label = known.get((x, y), f"dim_{x}_{y}")
                spec[axis] = "tokens_seen" if name == "tokens_seen" and label == "past_seq" else label
        specs.append(spec or None)
    return _nested_like(specs, _leaves(first)[2])


def _nested_like(flat: list[Any], treespec: Any) -> list[Any]:
    """``flat`` (one spec per tensor) nested as the cache's flattening nests its children: a list of the tensors'
    specs for a ``DynamicCache``, ``[[self-attention specs], [cross-attention specs]]`` for an
    ``EncoderDecoderCache`` (``torch.export`` matches ``dynamic_shapes`` to the tree, level by level)."""
    if all(child.is_leaf() for child in treespec.children()):
        return flat
    leaves = iter(flat)

    def walk(spec: Any) -> Any:
        return next(leaves) if spec.is_leaf() else [walk(child) for child in spec.children()]

    return walk(treespec)


def cache_summary(cache: Any) -> list[tuple[str, tuple[int, ...], torch.dtype]]:
    """``(name, shape, dtype)`` of every state of a cache, in flattening order."""
    names, leaves, _ = _leaves(cache)
    return [(n, tuple(t.shape), t.dtype) for n, t in zip(names, leaves)]


def model_cache_inputs(
    config: Any, dtype: torch.dtype = torch.float32, seed: int = 0, position_ids: bool = True,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Two input sets of a causal LM (``input_ids``, ``attention_mask``, ``position_ids``,
    ``past_key_values``: the cache the model of ``config`` returns, random states in ``dtype``) of the sizes
    :data:`SIZES`, and their dynamic shapes. Raises :class:`PrefillError` when the model cannot run the
    prefill (a model too large for the CPU whose forward reads values on the meta device), when the
    configuration does not build its model, or when the cache it returns cannot be flattened and rebuilt
    (the caller's error then comes from the export itself)."""
    try:
        return _model_cache_inputs(config, dtype, seed, position_ids)
    except (PrefillError, UnrebuildableCache):
        raise
    except Exception as e:  # noqa: BLE001 - the model's constructor and the cache classes raise what their code raises
        reason = str(e).splitlines()[0][:200] if str(e) else ""
        raise PrefillError(f"no cache read from the model ({type(e).__name__}: {reason})") from e


def model_caches(config: Any, sizes: tuple[tuple[int, int, int], ...], dtype: torch.dtype,
                 generator: torch.Generator) -> tuple[list[Any], list[Any]]:
    """The caches the model of ``config`` returns after prefills of two ``sizes`` (``(batch, new tokens, past
    tokens)`` each), their states seeded random values in ``dtype``, and their dynamic shapes: the cache of
    :func:`model_cache_inputs` for a caller whose example inputs have other sizes (an image-text decoder piece
    whose text model keeps convolution states). Raises :class:`PrefillError` as :func:`model_cache_inputs`."""
    model, device = _probe_model(config)
    caches = [prefill_cache(model, batch, past, device) for batch, _, past in sizes]
    del model
    specs = cache_dynamic_shapes(caches[0], caches[1], sizes)
    return [random_like_cache(cache, dtype, generator) for cache in caches], specs


def cache_argument(model_class: type) -> str:
    """The argument of ``model_class.forward`` taking the cache: ``past_key_values``, or ``cache_params`` for the
    state-space models (Mamba, Mamba2, FalconMamba)."""
    parameters = inspect.signature(model_class.forward).parameters
    return "cache_params" if "cache_params" in parameters and "past_key_values" not in parameters \
        else "past_key_values"


def _model_cache_inputs(config: Any, dtype: torch.dtype, seed: int, position_ids: bool) -> tuple[dict, dict, dict]:
    model, device = _probe_model(config)
    caches = [prefill_cache(model, batch, past, device) for batch, _, past in SIZES]
    name = type(model).__name__
    argument = cache_argument(type(model))
    if argument == "cache_params":
        # a state-space model decodes without positions nor a mask over the past (as generate calls it)
        position_ids = False
    del model
    try:
        random_like_cache(caches[0], dtype, torch.Generator().manual_seed(seed))
    except Exception as e:  # noqa: BLE001 - a cache class's constructor raises what its code raises
        layers = sorted({type(layer).__name__ for layer in getattr(caches[0], "layers", [])})
        reason = str(e).splitlines()[0][:160] if str(e) else ""
        raise UnrebuildableCache(
            f"{name} keeps a {type(caches[0]).__name__} (layers {', '.join(layers)}) that cannot be rebuilt from its "
            f"tensors ({type(e).__name__}: {reason}): its folder cannot be exported with a cache yet") from e
    specs = cache_dynamic_shapes(caches[0], caches[1])
    generator = torch.Generator().manual_seed(seed)
    vocab = int(config.vocab_size)
    sets = []
    for (batch, seq, past), cache in zip(SIZES, caches):
        inputs: dict[str, Any] = {"input_ids": torch.randint(3, vocab, (batch, seq), generator=generator)}
        if argument == "past_key_values":
            inputs["attention_mask"] = torch.ones((batch, past + seq), dtype=torch.int64)
        if position_ids:
            inputs["position_ids"] = torch.arange(past, past + seq, dtype=torch.int64).expand(batch, -1).contiguous()
        inputs[argument] = random_like_cache(cache, dtype, generator)
        sets.append(inputs)
    shapes: dict[str, Any] = {}
    for key in sets[0]:
        if key == "attention_mask":
            shapes[key] = {0: "batch", 1: "total_seq"}
        elif key == argument:
            shapes[key] = specs
        else:
            shapes[key] = {0: "batch", 1: "seq"}
    return sets[0], sets[1], shapes
