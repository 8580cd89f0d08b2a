"""Greedy decoding on onnxruntime with a model :func:`fx2onnx.to_onnx` exported with a cache.

The loop does what ``model.generate(do_sample=False)`` of :epkg:`transformers` does
for a decoder: a first call (*prefill*) on the whole prompt with an empty cache
(past length 0; the recurrent states of state-space layers at zero), then one call per
new token, the present keys and values of a call fed back as the past of the next one. Which output feeds which input is
read from the model's metadata (``fx2onnx.cache``, written by
:func:`fx2onnx.to_onnx`: an output at the same place in the returned structure as
a cache input), never from names given by the user.

The cache stays in onnxruntime memory: every step runs with
``InferenceSession.run_with_ortvaluevector``, onnxruntime allocates the outputs, and
the values it returns are fed as the next inputs without a copy. When the loop creates
the session, it adds the argmax of the last position's logits to the graph
(:func:`add_next_token`): the outputs of a step, the next token first and then the
cache, are the next step's inputs as they come, no Python object is made per value and
only ``batch`` integers are read into numpy; the loop then costs a few calls per token
(the attention mask and the positions are views of arrays made once). A session given
by the caller runs as it is: the logits are read and the argmax taken in numpy.

A model which updates its cache in place (metadata ``fx2onnx.cache_in_place``, written by
:mod:`fx2onnx.optimizer.rules.cache_in_place`) runs through an ``IOBinding`` instead: one
buffer per cache input, bound as the input and as its output, so that a step writes the new
positions and copies nothing else; it holds the prompt and :attr:`OnnxGenerator.cache_chunk`
new tokens, and is copied into one twice as large when full.

A batch is left padded (``attention_mask`` holds 0 for the pads); the positions
are computed from the mask as transformers computes them (cumulated sum minus
one, 0 on the pads) when the model takes ``position_ids``. A sequence which
produced one of ``eos_token_id`` gets ``pad_token_id`` afterwards and the loop
stops when every sequence is finished.

.. code-block:: python

    import copy, fx2onnx, torch
    from fx2onnx.zoo import get_tiny_model

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
import re
import time
from typing import Any, Callable, Sequence

import numpy as np
import onnx

from ..formats import CACHE_METADATA_KEY, IN_PLACE_METADATA_KEY
from ..ort_values import ort_value_to_numpy
from .sampling import Sampling

#: the names of the states of transformers' linear caches (:mod:`fx2onnx.patches.linear_cache`),
#: which start at zero: ``past_key_values_conv_3`` as to_onnx names them, ``past_conv.3`` as transformers.js does;
#: ``past_key_values_linear_cache_3``, MiniMax's sum of ``K^T V`` (its prefill starts it at zeros)
_RECURRENT = re.compile(r"(^|[_.])(conv|recurrent|ssm|linear_cache)[_.]\d")
#: the output :func:`add_next_token` adds
NEXT_TOKEN = "fx2onnx_next_token"
#: inputs the loop computes itself, beside the cache
_TOKEN_INPUTS = ("input_ids", "attention_mask", "position_ids")
#: optimum's input choosing a merged decoder's branch (false: no cache yet)
CACHE_BRANCH = "use_cache_branch"
_NUMPY_TYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(bfloat16)": np.uint16,  # fed with its ONNX type, see _ortvalue
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
}


@dataclasses.dataclass(frozen=True)
class CacheSignature:
    """What the loop feeds and reads: the token inputs the model takes, its logits and its cache.

    ``cache`` lists ``(input name, output name, initial shape, ONNX type)``: the initial
    shape has ``-1`` for the batch and 0 on the axis the cache grows along (a recurrent
    state has none and starts at zero).
    """

    logits: str
    has_attention_mask: bool
    has_position_ids: bool
    cache: tuple[tuple[str, str, tuple[int, ...], str], ...]
    #: the output :func:`add_next_token` added (the argmax of the last logits), if any
    next_token: str | None = None
    #: inputs fed the same value at every step (a speech decoder's cross-attention keys and values)
    constants: tuple[str, ...] = ()
    #: the model takes optimum's ``use_cache_branch`` (an encoder-decoder's merged decoder): false at the first step
    has_cache_branch: bool = False

    @classmethod
    def from_session(cls, session: Any, constants: Sequence[str] = ()) -> "CacheSignature":
        """Reads the signature of an :class:`onnxruntime.InferenceSession` (raises a ValueError
        naming what the loop cannot feed); ``constants`` names the inputs the caller feeds
        unchanged at every step."""
        inputs = {i.name: i for i in session.get_inputs()}
        outputs = [o.name for o in session.get_outputs()]
        metadata = session.get_modelmeta().custom_metadata_map
        if "input_ids" not in inputs:
            raise ValueError(f"The model has no input 'input_ids' (inputs: {list(inputs)}): it is not a decoder "
                             "taking token ids.")
        # no metadata: a decoder without a cache (the loop runs the whole sequence at every step)
        pairs: dict[str, str] = json.loads(metadata.get(CACHE_METADATA_KEY, "{}"))
        missing = [n for n in pairs if n not in inputs] + [n for n in pairs.values() if n not in outputs]
        if missing:
            raise ValueError(f"The cache pairs of the metadata name {missing}, absent from the model "
                             f"(inputs {list(inputs)}, outputs {outputs}).")
        absent = [n for n in constants if n not in inputs]
        if absent:
            raise ValueError(f"The model has no inputs {absent} (inputs: {list(inputs)}).")
        unknown = [n for n in inputs if n not in pairs and n not in _TOKEN_INPUTS and n not in constants
                   and n != CACHE_BRANCH]
        if unknown and CACHE_METADATA_KEY not in metadata:
            raise ValueError(
                f"The model has no metadata {CACHE_METADATA_KEY!r} pairing its cache inputs with its outputs and "
                f"takes {unknown}: export it with fx2onnx.to_onnx and a cache (past_key_values=DynamicCache(...)) "
                "in kwargs.")
        if unknown:
            raise ValueError(f"The generation loop cannot feed the inputs {unknown}: it feeds {list(_TOKEN_INPUTS)} "
                             "and the cache.")
        logits = _logits_name(outputs, pairs)
        batch = inputs["input_ids"].shape[0]
        cache = tuple(
            (name, output, _initial_shape(inputs[name], batch), inputs[name].type) for name, output in pairs.items()
        )
        return cls(logits, "attention_mask" in inputs, "position_ids" in inputs, cache,
                   NEXT_TOKEN if NEXT_TOKEN in outputs else None, tuple(constants), CACHE_BRANCH in inputs)


def _logits_name(outputs: Sequence[str], pairs: dict[str, str]) -> str:
    """The output holding the logits: ``logits``, or the only output beside the cache."""
    others = [n for n in outputs if n not in pairs.values() and n != NEXT_TOKEN]
    logits = "logits" if "logits" in others else (others[0] if len(others) == 1 else None)
    if logits is None:
        raise ValueError(f"Cannot tell which output holds the logits among {others}.")
    return logits


def add_next_token(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` with one more output, :data:`NEXT_TOKEN`: the argmax of the logits
    of the last position, ``(batch, 1)`` int64, the ``input_ids`` of the next step (``model`` itself for a decoder
    without a cache, whose loop reads the logits).

    The loop then reads ``batch`` integers a step instead of ``batch x vocabulary`` logits, and
    feeds the values onnxruntime returns back as they come (:class:`OnnxGenerator`). ArgMax
    keeps the first of equal values, as numpy's argmax does.
    """
    metadata = {p.key: p.value for p in model.metadata_props}
    if CACHE_METADATA_KEY not in metadata:  # a decoder without a cache: its loop reads the logits
        return model
    outputs = {o.name: o for o in model.graph.output}
    logits = _logits_name(list(outputs), json.loads(metadata[CACHE_METADATA_KEY]))
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    graph = copy.graph
    helper, prefix = onnx.helper, NEXT_TOKEN + "_"
    last = logits
    if outputs[logits].type.tensor_type.elem_type != onnx.TensorProto.FLOAT:  # ArgMax on float (exact cast)
        graph.node.append(helper.make_node("Cast", [last], [prefix + "float"], to=onnx.TensorProto.FLOAT))
        last = prefix + "float"
    graph.node.extend([
        helper.make_node("Constant", [], [prefix + "minus_one"],
                         value=helper.make_tensor(prefix + "minus_one", onnx.TensorProto.INT64, [], [-1])),
        helper.make_node("Gather", [last, prefix + "minus_one"], [prefix + "last"], axis=1),
        helper.make_node("ArgMax", [prefix + "last"], [NEXT_TOKEN], axis=-1, keepdims=1),
    ])
    batch = outputs[logits].type.tensor_type.shape.dim[0]
    graph.output.append(helper.make_tensor_value_info(
        NEXT_TOKEN, onnx.TensorProto.INT64, [batch.dim_param or batch.dim_value or None, 1]))
    return copy


def _initial_shape(info: Any, batch_dim: Any) -> tuple[int, ...]:
    """The shape of the first value of a cache input: -1 for the batch, 0 on the axis it grows along.

    A key or value is ``(batch, heads, past_seq, head_dim)``; the count of tokens a
    cache of sliding layers carries (``tokens_seen``, :mod:`fx2onnx.patches.caches`) is
    ``(0, tokens_seen)``: both have one dynamic axis beside the batch and start empty. A
    recurrent state (the convolution and SSM states of state-space and hybrid models,
    :mod:`fx2onnx.patches.linear_cache`) has none: it keeps its shape and starts at zero, as
    transformers initializes it (a causal convolution over a zero state is the one over
    zero padding, a recurrence from a zero state the one of the first token). Only the
    states named so (:data:`_RECURRENT`) start at zero: another state may not (RWKV's
    running maximum starts at -1e38) and is refused.
    """
    shape = list(info.shape)
    batched = isinstance(batch_dim, str) and bool(shape) and shape[0] == batch_dim
    growing = [i for i, d in enumerate(shape) if not isinstance(d, int) and not (i == 0 and batched)]
    if not growing and batched and _RECURRENT.search(info.name):  # a recurrent state, zeros of its shape
        return tuple(-1 if i == 0 else int(d) for i, d in enumerate(shape))
    if len(growing) != 1:
        raise ValueError(
            f"Cache input {info.name!r} of shape {shape} is neither a key/value cache (one dynamic axis beside the "
            f"batch {batch_dim!r}: this one has {len(growing)}) nor a state of transformers' linear caches (conv_<i>, "
            "recurrent_<i>, ssm_<i>, linear_cache_<i>: zero at the start; RWKV's state is not)."
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

    def record(self, step: int, elapsed: float, model_time: float) -> None:
        """Adds one step of a loop: the first one is the prefill, the others decode steps."""
        if step == 0:
            self.prefill_total, self.prefill_model = elapsed, model_time
        else:
            self.decode_total += elapsed
            self.decode_model += model_time
            self.decode_steps += 1
            self.step_overheads.append(elapsed - model_time)

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
    :param session_options: :class:`onnxruntime.SessionOptions` when a session is created
    :param next_token: when a session is created, add the argmax of the last logits to the
        graph (:func:`add_next_token`): a step reads ``batch`` token ids instead of the
        logits and feeds onnxruntime's outputs back as they are; a model whose weights are in
        an external file, or a session, is run as it is (its logits read, the argmax in numpy)
    :param constant_inputs: inputs fed the same value at every step, given to :meth:`generate`
        (``constants``): the cross-attention keys and values of a speech decoder
    """

    def __init__(self, model: Any, providers: Sequence[str] | None = None, session_options: Any = None,
                 next_token: bool = True, constant_inputs: Sequence[str] = ()):
        if hasattr(model, "io_binding"):
            self.session = model
        else:
            if not isinstance(model, (onnx.ModelProto, str, os.PathLike)):
                raise TypeError(f"model must be an onnx.ModelProto, a path or an InferenceSession, "
                                f"got {type(model).__name__}.")
            self.session = _make_session(model, providers, session_options, next_token)
        self.signature = CacheSignature.from_session(self.session, constant_inputs)
        import onnxruntime
        from onnxruntime.capi import _pybind_state

        # the C++ classes run_with_ortvaluevector takes (the Python OrtValue wraps them)
        self._C = _pybind_state
        self._device = _pybind_state.OrtDevice(_pybind_state.OrtDevice.cpu(), _pybind_state.OrtDevice.default_memory(), 0)
        self._run_options = onnxruntime.RunOptions()
        # no graph capture: onnxruntime's run_with_iobinding reads this entry at every run, and a missing one
        # costs a raised and caught exception (0.15 ms a step, a tenth of a small int4 model's step)
        self._run_options.add_run_config_entry("gpu_graph_id", "-1")
        self.last_times: GenerationTimes | None = None
        metadata = self.session.get_modelmeta().custom_metadata_map
        #: the model updates its cache in place (:mod:`fx2onnx.optimizer.rules.cache_in_place`): each
        #: past input and its present output are bound to one buffer (grown when full)
        self.in_place = metadata.get(IN_PLACE_METADATA_KEY) == "1"
        #: with the cache in place: the new tokens the first buffer holds beyond the prompt (doubled when full)
        self.cache_chunk = 256
        #: the source of candidates :meth:`generate` verifies several at a time when it gets none
        #: (:mod:`fx2onnx.runtime.speculative`: ``PromptLookup(10)``, ``DraftModel(folder)``); None: one token a run
        self.speculation: Any = None

    def _bind_in_place(self, empty: list[np.ndarray], capacity: int, fixed: list[Any], first_output: str) -> Any:
        """The session's IOBinding with every cache input and its output bound to one buffer
        of ``capacity`` positions (``empty`` gives the other dimensions), and the constants."""
        from onnxruntime import OrtValue

        binding = self.session.io_binding()
        binding.bind_output(first_output, "cpu")  # the first of the outputs the binding returns
        self._grow_in_place(binding, capacity, empty)
        for name, value in zip(self.signature.constants, fixed):
            binding.bind_ortvalue_input(name, OrtValue(value))
        return binding

    def _grow_in_place(self, binding: Any, capacity: int, current: list[np.ndarray]) -> None:
        """Binds buffers of ``capacity`` positions to every cache input and its output, the
        positions of ``current`` (the former buffers, or the empty cache) copied at their start;
        ``self._buffers`` keeps them (an OrtValue made from numpy shares its buffer)."""
        from onnxruntime import OrtValue

        self._buffers: list[tuple[np.ndarray, Any]] = []
        for (name, output, shape, type_), old in zip(self.signature.cache, current):
            axis = shape.index(0)
            full = np.zeros(old.shape[:axis] + (capacity,) + old.shape[axis + 1:], dtype=old.dtype)
            full[(slice(None),) * axis + (slice(0, old.shape[axis]),)] = old
            value = OrtValue(_ortvalue(self._C, full, type_, self._device))
            self._buffers.append((full, value))
            binding.bind_ortvalue_input(name, value)
            binding.bind_ortvalue_output(output, value)

    def _bind_step_output(self, binding: Any, name: str, first: Any) -> np.ndarray | None:
        """Binds an array to the output ``name`` for the steps after the prompt, shaped as ``first`` (the
        prompt's value) with one position: the array, or None where its type is read otherwise (bfloat16) or
        its shape is not ``(batch, positions, ...)``."""
        from onnxruntime import OrtValue

        shape = first.shape()
        types = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64}
        if first.data_type() not in types or len(shape) < 2:
            return None
        array = np.empty((shape[0], 1, *shape[2:]), dtype=types[first.data_type()])
        self._step_output = OrtValue(_ortvalue(self._C, array, first.data_type(), self._device))
        binding.bind_ortvalue_output(name, self._step_output)
        return array

    def _constants(self, constants: dict[str, Any]) -> list[Any]:
        """The C++ values of the constant inputs, in the order of the signature."""
        sig = self.signature
        self._kept: list[np.ndarray] = []
        missing = [n for n in sig.constants if n not in constants]
        extra = [n for n in constants if n not in sig.constants]
        if missing or extra:
            raise ValueError(f"constants must give the inputs {list(sig.constants)}: {missing} missing, {extra} unknown.")
        types = {i.name: i.type for i in self.session.get_inputs()}
        values = []
        for name in sig.constants:
            value = constants[name]
            if hasattr(value, "_ortvalue"):  # onnxruntime.OrtValue
                values.append(value._ortvalue)
            elif isinstance(value, np.ndarray):
                array = np.ascontiguousarray(value)
                self._kept.append(array)  # the value shares its buffer
                values.append(_ortvalue(self._C, array, types[name], self._device))
            else:
                values.append(value)  # the C++ OrtValue itself
        return values

    def generate(
        self,
        input_ids: Any,
        max_new_tokens: int,
        attention_mask: Any = None,
        eos_token_id: int | Sequence[int] | None = None,
        pad_token_id: int | None = None,
        sampling: Sampling | None = None,
        streamer: Callable[[np.ndarray], None] | None = None,
        constants: dict[str, Any] | None = None,
        position_ids: np.ndarray | None = None,
        speculation: Any = None,
    ) -> Any:
        """Greedy decoding or sampling; see :func:`fx2onnx.generate`. ``constants`` gives the
        value of each input of ``constant_inputs``: an :class:`onnxruntime.OrtValue` (kept in
        onnxruntime memory, not copied) or a numpy array (which must outlive the call).
        ``position_ids`` gives the prompt's positions, ``(..., batch, length)``, where they are not
        the count of its tokens (Qwen2-VL's rows of multimodal positions,
        :func:`fx2onnx.runtime.mrope.rope_index`): every later token takes the largest position of
        its sequence plus one, plus two..., in every row (transformers' ``rope_deltas``). ``speculation``
        (default :attr:`speculation`) proposes candidate tokens each run verifies several at a time, one
        sequence (:mod:`fx2onnx.runtime.speculative`): greedy, the same tokens."""
        speculation = self.speculation if speculation is None else speculation
        if not self.signature.cache:  # a decoder without a cache: the whole sequence at every step
            if speculation is not None or constants or position_ids is not None:
                raise ValueError("The decoder has no cache: it generates without speculation, constants nor "
                                 "position_ids.")
            return _generate_without_cache(self, input_ids, max_new_tokens, attention_mask, eos_token_id,
                                           pad_token_id, sampling, streamer)
        if speculation is not None:
            if constants or position_ids is not None:
                raise ValueError("Speculative decoding runs a text decoder: no constants, no position_ids.")
            return speculation.generate(self, input_ids, max_new_tokens, attention_mask, eos_token_id, pad_token_id,
                                        sampling, streamer)
        ids, mask, as_torch = _check_inputs(input_ids, attention_mask, max_new_tokens)
        chooser = sampling.chooser() if sampling is not None and sampling.needs_logits else None
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
        steps = np.arange(1, max_new_tokens + 1, dtype=np.int64)[:, None, None]
        if position_ids is None:
            positions = np.where(mask == 0, 0, np.cumsum(mask, axis=1) - 1).astype(np.int64)
            later_positions = positions[:, -1:][None] + steps
        else:
            if not sig.has_position_ids:
                raise ValueError("position_ids given, but the model has no input 'position_ids'.")
            positions = np.ascontiguousarray(position_ids, dtype=np.int64)
            if positions.ndim < 2 or positions.shape[-2:] != ids.shape:
                raise ValueError(f"position_ids has shape {positions.shape}, input_ids {ids.shape}: give positions "
                                 "(..., batch, length).")
            top = positions.reshape(-1, batch, ids.shape[1]).max(axis=(0, 2))  # (batch,)
            later = top[None, :, None] + steps  # (new tokens, batch, 1), then every row
            later_positions = np.ascontiguousarray(np.broadcast_to(
                later.reshape(max_new_tokens, *(1,) * (positions.ndim - 2), batch, 1),
                (max_new_tokens, *positions.shape[:-1], 1)))

        # the empty cache (the arrays stay referenced: an OrtValue made from numpy shares its buffer)
        empty = [_empty_array(shape, batch, type_) for _, _, shape, type_ in sig.cache]
        past = [_ortvalue(self._C, array, type_, self._device) for array, (_, _, _, type_) in zip(empty, sig.cache)]
        # input_ids first, then the cache: the outputs of a step, the next token first, are the
        # beginning of the next step's inputs as they come, without a Python object per value
        feed_names = ["input_ids"] + [name for name, _, _, _ in sig.cache]
        feed_names += ["attention_mask"] * sig.has_attention_mask + ["position_ids"] * sig.has_position_ids
        fixed = self._constants(constants or {})
        feed_names += list(sig.constants) + [CACHE_BRANCH] * sig.has_cache_branch
        branches = [np.array([False]), np.array([True])]  # use_cache_branch: the first step computes the cross cache
        fused = sig.next_token is not None and chooser is None
        fetch_names = [sig.next_token if fused else sig.logits] + [out for _, out, _, _ in sig.cache]
        devices = [self._device] * len(fetch_names)
        run, from_numpy, device, vector = self.session.run_with_ortvaluevector, self._C.OrtValue.ortvalue_from_numpy, \
            self._device, self._C.OrtValueVector
        run_options, n_fetches = self._run_options, len(fetch_names)
        # the masks and positions of every step, made once: a step takes a view (contiguous but
        # for a mask of a batch > 1, copied then)
        length = ids.shape[1]
        full_mask = np.ones((batch, length + max_new_tokens), dtype=np.int64)
        full_mask[:, :length] = mask
        unfinished, stops = np.ones(batch, dtype=bool), bool(eos.size)
        eos_set = set(eos.tolist())
        new_tokens: list[np.ndarray] = []
        times = GenerationTimes()
        step_mask, step_positions = mask, positions
        feeds = vector()
        feeds.push_back(from_numpy(ids, device))
        for value in past:
            feeds.push_back(value)
        # a buffer for the prompt and the first cache_chunk tokens, twice as large when full (a generation
        # stopped early by its end token does not hold memory for max_new_tokens)
        capacity = length + min(max_new_tokens, self.cache_chunk)
        binding = self._bind_in_place(empty, capacity, fixed, fetch_names[0]) if self.in_place else None
        step_ids = ids
        # with the cache in place, the token ids and positions of the steps after the prompt are written into two
        # arrays bound once (binding an array took 7-9 us, a third of the loop's time on a tiny model)
        one_ids = np.zeros((batch, 1), dtype=np.int64)
        one_positions = np.zeros(later_positions.shape[1:], dtype=np.int64)
        # with the cache in place, the steps after the prompt write their first output (the logits of one position,
        # or the next token) into one array bound once: no value is wrapped nor copied to be read
        step_output: np.ndarray | None = None
        for step in range(max_new_tokens):
            begin = time.perf_counter()
            if binding is not None:  # the cache stays where it is bound: the token inputs alone change
                if length + step > capacity:
                    capacity = min(2 * capacity, length + max_new_tokens)
                    self._grow_in_place(binding, capacity, [full for full, _ in self._buffers])
                # onnxruntime's C++ binding and session: the Python wrappers wrap every output (the cache's too)
                # in a Python object at each step; the arrays bound stay alive until the next step
                native = binding._iobinding
                if step < 2:  # the prompt's arrays, then the two written at every later step
                    native.bind_ortvalue_input("input_ids", from_numpy(step_ids if step == 0 else one_ids, device))
                    if sig.has_position_ids:
                        native.bind_ortvalue_input(
                            "position_ids", from_numpy(step_positions if step == 0 else one_positions, device))
                if sig.has_attention_mask:
                    native.bind_input("attention_mask", step_mask)
                # bound again at each step (in its place, the first): onnxruntime allocates it, the logits
                # change shape after the prompt
                if step_output is None:
                    binding.bind_output(fetch_names[0], "cpu")
                model_begin = time.perf_counter()
                self.session._sess.run_with_iobinding(native, run_options)
                model_time = time.perf_counter() - model_begin
                fetches = [native.get_outputs()[0]] if step_output is None else [None]
                if step == 0:
                    step_output = self._bind_step_output(binding, fetch_names[0], fetches[0])
            else:
                if sig.has_attention_mask:
                    feeds.push_back(from_numpy(step_mask, device))
                if sig.has_position_ids:
                    feeds.push_back(from_numpy(step_positions, device))
                for value in fixed:
                    feeds.push_back(value)
                if sig.has_cache_branch:
                    feeds.push_back(from_numpy(branches[step > 0], device))
                fetches = vector()
                model_begin = time.perf_counter()
                run(run_options, feed_names, feeds, fetch_names, fetches, devices)
                model_time = time.perf_counter() - model_begin
            if fetches[0] is None and fused:  # the array bound to the output: the next token
                next_tokens = step_output[:, 0].copy()
            elif fetches[0] is None and chooser is None:  # the logits of the last position
                next_tokens = step_output[:, -1, :].argmax(axis=-1).astype(np.int64, copy=False)
            elif fetches[0] is None:
                sequences = np.concatenate([ids, *(t[:, None] for t in new_tokens)], axis=1)
                next_tokens = chooser(step_output[:, -1, :], sequences, full_mask[:, : length + step])
            elif fused:
                next_tokens = fetches[0].numpy()[:, 0].copy()  # not a view of a buffer the next step reuses
            elif chooser is None:
                next_tokens = _last_logits(fetches[0]).argmax(axis=-1).astype(np.int64, copy=False)
            else:
                sequences = np.concatenate([ids, *(t[:, None] for t in new_tokens)], axis=1)
                next_tokens = chooser(_last_logits(fetches[0]), sequences, full_mask[:, : length + step])
            # compared with each end token (numpy's isin took 30-80 us a step); one sequence is running here
            if stops and batch == 1:
                unfinished[0] = int(next_tokens[0]) not in eos_set
            elif stops:
                next_tokens = np.where(unfinished, next_tokens, pad)
                unfinished &= ~(next_tokens[:, None] == eos).any(axis=1)
            new_tokens.append(next_tokens)
            if streamer is not None:
                streamer(next_tokens)
            if binding is not None:
                one_ids[:, 0] = next_tokens
            elif fused and (not stops or batch == 1 or unfinished.all()):
                feeds = fetches  # the next token and the cache, as onnxruntime returned them
            else:  # the logits were read, or a finished sequence is fed its pad token
                step_ids = np.ascontiguousarray(next_tokens[:, None])
                feeds = vector()
                feeds.push_back(from_numpy(step_ids, device))
                for i in range(1, n_fetches):
                    feeds.push_back(fetches[i])
            step_mask = full_mask[:, : length + step + 1]
            if batch > 1:
                step_mask = np.ascontiguousarray(step_mask)
            step_positions = later_positions[step]
            if binding is not None:
                one_positions[...] = step_positions
            elapsed = time.perf_counter() - begin
            times.record(step, elapsed, model_time)
            if stops and not (unfinished[0] if batch == 1 else unfinished.any()):
                break
        self.last_times = times
        result = np.concatenate([ids, np.stack(new_tokens, axis=1)], axis=1)
        if as_torch:
            import torch

            return torch.from_numpy(result)
        return result


def _generate_without_cache(self: Any, input_ids: Any, max_new_tokens: int, attention_mask: Any, eos_token_id: Any,
                            pad_token_id: int | None, sampling: Any, streamer: Any) -> Any:
    """:meth:`OnnxGenerator.generate` for a decoder without a cache (a model which cannot decode after one: OpenAI
    GPT, XLNet, RWKV...): each step runs the whole sequence so far and reads the logits of its last position."""
    ids, mask, as_torch = _check_inputs(input_ids, attention_mask, max_new_tokens)
    sig = self.signature
    if not sig.has_position_ids and (mask == 0).any():
        raise ValueError("The model has no input 'position_ids': with left padding its positions would count "
                         "the pads (transformers counts from the first token). Generate without padding.")
    chooser = sampling.chooser() if sampling is not None and sampling.needs_logits else None
    eos = np.array([] if eos_token_id is None else np.atleast_1d(eos_token_id), dtype=np.int64)
    pad = int(eos[0]) if pad_token_id is None and eos.size else pad_token_id
    unfinished = np.ones(ids.shape[0], dtype=bool)
    sequences, full_mask = ids, mask
    times = GenerationTimes()
    for step in range(max_new_tokens):
        begin = time.perf_counter()
        feeds = {"input_ids": sequences}
        if sig.has_attention_mask:
            feeds["attention_mask"] = full_mask
        if sig.has_position_ids:
            feeds["position_ids"] = np.where(full_mask == 0, 0, np.cumsum(full_mask, axis=1) - 1).astype(np.int64)
        (logits,) = self.session.run([sig.logits], feeds)
        model_time = time.perf_counter() - begin
        last = np.asarray(logits[:, -1, :], dtype=np.float32)
        next_tokens = last.argmax(axis=-1).astype(np.int64) if chooser is None else chooser(last, sequences, full_mask)
        if eos.size:
            next_tokens = np.where(unfinished, next_tokens, pad)
            unfinished &= ~(next_tokens[:, None] == eos).any(axis=1)
        if streamer is not None:
            streamer(next_tokens)
        sequences = np.concatenate([sequences, next_tokens[:, None]], axis=1)
        full_mask = np.concatenate([full_mask, np.ones((full_mask.shape[0], 1), dtype=np.int64)], axis=1)
        elapsed = time.perf_counter() - begin
        times.record(step, elapsed, model_time)
        if eos.size and not unfinished.any():
            break
    self.last_times = times
    if as_torch:
        import torch

        return torch.from_numpy(sequences)
    return sequences


def _last_logits(value: Any) -> np.ndarray:
    """The logits of the last position, ``(batch, vocabulary)`` float32, from the C++ OrtValue
    of ``(batch, length, vocabulary)`` logits (bfloat16 ones read through their bits)."""
    if value.data_type() == "tensor(bfloat16)":
        from onnxruntime import OrtValue

        wrapper = OrtValue(value)
        return ort_value_to_numpy(wrapper)[:, -1, :].astype(np.float32)
    return value.numpy()[:, -1, :]


def _make_session(model: Any, providers: Sequence[str] | None, options: Any, next_token: bool) -> Any:
    """The session of a ModelProto or a path, :data:`NEXT_TOKEN` added when ``next_token`` and
    the weights are in the model; ``options`` (changed: no memory pattern) or the default ones."""
    import onnxruntime

    if isinstance(model, (str, os.PathLike)):
        if not os.path.exists(model):
            raise FileNotFoundError(f"ONNX model {str(model)!r} does not exist.")
        proto = onnx.load(str(model), load_external_data=False) if next_token else None
        if proto is None or _has_external_data(proto):  # the session resolves the weights' file from the path
            source: Any = str(model)
        else:
            source = add_next_token(proto).SerializeToString()
    else:
        if _has_external_data(model):
            raise ValueError(
                "The ModelProto refers to weights in an external data file (to_onnx returns it so when it "
                "saved the weights apart): give the path of the saved .onnx file instead."
            )
        source = (add_next_token(model) if next_token else model).SerializeToString()
    if options is None:
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
    # onnxruntime plans a run's memory for the shapes of its inputs and keeps the plan for the next run of the
    # same shapes: a decoder's mask grows at every step, no shape comes again, and each step paid for a plan
    # (on the benchmark Llama float32, 10 % of a step's CPU time, the gap to onnxruntime-genai's loop)
    options.enable_mem_pattern = False
    return onnxruntime.InferenceSession(source, options, providers=list(providers or ["CPUExecutionProvider"]))


def _has_external_data(model: onnx.ModelProto) -> bool:
    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)


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


def _empty_array(shape: tuple[int, ...], batch: int, onnx_type: str) -> np.ndarray:
    """An empty array of ``shape`` (-1 replaced by the batch size), the first past of the cache."""
    if onnx_type not in _NUMPY_TYPES:
        raise ValueError(f"Cache inputs of type {onnx_type} are not supported.")
    return np.zeros(tuple(batch if d == -1 else d for d in shape), dtype=_NUMPY_TYPES[onnx_type])


def _ortvalue(C: Any, array: np.ndarray, onnx_type: str, device: Any) -> Any:
    """The onnxruntime value (``C``: its C++ classes) sharing the buffer of ``array``
    (which must outlive it)."""
    if onnx_type == "tensor(bfloat16)":
        return C.OrtValue.ortvalue_from_numpy_with_onnx_type(array, onnx.TensorProto.BFLOAT16)
    return C.OrtValue.ortvalue_from_numpy(array, device)


def generate(
    model: Any,
    input_ids: Any,
    max_new_tokens: int,
    attention_mask: Any = None,
    eos_token_id: int | Sequence[int] | None = None,
    *,
    pad_token_id: int | None = None,
    providers: Sequence[str] | None = None,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int | None = 50,
    top_p: float = 1.0,
    repetition_penalty: float = 1.0,
    seed: int | None = None,
    streamer: Callable[[np.ndarray], None] | None = None,
    speculation: Any = None,
) -> Any:
    """Greedy decoding or sampling on onnxruntime, the tokens ``model.generate(...)`` returns.

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
    :param do_sample: draw the tokens (default: greedy); ``temperature``, ``top_k``,
        ``top_p``, ``repetition_penalty`` as transformers defines them, ``seed`` the seed of
        the draws (see :class:`fx2onnx.runtime.sampling.Sampling`)
    :param streamer: called after each step with the ``(batch,)`` new tokens
    :param speculation: verify several candidate tokens per run of the model (one sequence; greedy: the
        same tokens): ``PromptLookup(10)`` (transformers' ``prompt_lookup_num_tokens=10``) or
        ``DraftModel(draft)`` (transformers' ``assistant_model=draft``) of :mod:`fx2onnx.runtime.speculative`
    :return: the prompts followed by the new tokens, ``(batch, length + new)``, int64,
        a :class:`torch.Tensor` if ``input_ids`` is one (as transformers returns), a
        numpy array otherwise

    The first call runs the whole prompt with an empty cache; the cache then stays
    in onnxruntime memory (see the module :mod:`fx2onnx.runtime.generate`).
    """
    sampling = Sampling(do_sample, temperature, top_k, top_p, repetition_penalty, seed)
    return OnnxGenerator(model, providers).generate(input_ids, max_new_tokens, attention_mask, eos_token_id,
                                                     pad_token_id, sampling=sampling, streamer=streamer,
                                                     speculation=speculation)
