"""The check of a model exported from a folder against eager, in any dtype.

A float32 export is compared with eager float32 at the usual tolerances. A bfloat16 or
float16 export cannot match float32 at those tolerances, and does not have to match eager
in its own dtype either (the kernels round in other places): it is compared with the
**float32** eager reference, and accepted when, output by output, it is as close to it as
eager in that dtype is, within a factor :data:`REDUCED_PRECISION_FACTOR` (plus ``atol``).
A right model is never reported as a mismatch; a wrong one is (a wrong model is much
further from float32 than the rounding of its dtype).

A float32 export outside ``atol + rtol * |expected|`` on some input set gets a second opinion
from eager **float64**, the reference neither float32 computation has: float32's rounding grows
through deep or recurrent stacks (HRM's loops, a mixture of experts) and on a logit near zero
``rtol`` gives no room. The set is accepted when, output by output, the export is as close to
eager float64 as eager float32 is, within :data:`REDUCED_PRECISION_FACTOR` (plus ``atol``): a
wrong model is far from float64 whatever float32 does. A model which cannot run in float64
keeps the float32 verdict. The float64 run is float64 throughout: where the model's code casts to float32 (an
RMSNorm's ``hidden_states.to(torch.float32)``, a router's ``.float()``, a softmax's ``dtype=torch.float32``), it casts
to float64 then (:class:`Float64Casts`); with those casts kept, the reference would share float32's rounding there
with eager float32 and not with the export, which rounds elsewhere, and a right export would look twice as far.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from typing import Any

import numpy as np
import torch

from ..validation import compare_outputs, flatten_outputs, run_onnx

#: how much further from the float32 reference than eager in the same dtype an export may be
REDUCED_PRECISION_FACTOR = 2.0


@dataclasses.dataclass
class FolderCheck:
    """The outcome of :func:`check_against_eager` on one input set."""

    ok: bool
    dtype: torch.dtype
    #: max abs difference to the float32 eager reference, per output
    onnx_diff: list[float]
    #: the same for eager in the export's dtype (empty for float32)
    eager_diff: list[float]
    atol: float
    rtol: float
    #: False for a quantized model: the differences are reported, not held to a tolerance
    held: bool = True
    #: a float32 export outside the float32 tolerance: its max abs difference to eager float64, per output
    float64_diff: list[float] = dataclasses.field(default_factory=list)
    #: the same for eager float32 (the rounding float32 itself makes)
    eager32_float64_diff: list[float] = dataclasses.field(default_factory=list)

    def __str__(self) -> str:
        status = "OK" if self.ok else "MISMATCH"
        worst = max(self.onnx_diff, default=0.0)
        if not self.held:
            return (f"quantized: max abs diff {worst:.3g} to eager float32 over {len(self.onnx_diff)} output(s) "
                    "(reported, not held to a tolerance)")
        if self.float64_diff:
            return (f"{status}: {len(self.onnx_diff)} output(s), max abs diff {worst:.3g} to eager float32 "
                    f"(atol={self.atol}, rtol={self.rtol}), {max(self.float64_diff):.3g} to eager float64; eager "
                    f"float32 is {max(self.eager32_float64_diff):.3g} away from float64 (accepted up to "
                    f"{REDUCED_PRECISION_FACTOR:g}x per output + {self.atol})")
        if not self.eager_diff:
            return (f"{status}: {len(self.onnx_diff)} output(s), max abs diff {worst:.3g} to eager "
                    f"(atol={self.atol}, rtol={self.rtol})")
        eager = max(self.eager_diff, default=0.0)
        name = str(self.dtype).replace("torch.", "")
        return (f"{status}: {len(self.onnx_diff)} output(s), max abs diff {worst:.3g} to eager float32; eager "
                f"{name} is {eager:.3g} away (accepted up to {REDUCED_PRECISION_FACTOR:g}x per output + {self.atol})")


def _as_dtype(inputs: dict[str, Any], dtype: torch.dtype) -> dict[str, Any]:
    """A copy of ``inputs`` whose floating point tensors (the cache's included) are in ``dtype``."""
    result = copy.deepcopy(inputs)

    def cast(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.to(dtype) if value.is_floating_point() else value
        if isinstance(value, (list, tuple)):  # the lists of tensors of a piece (a speech decoder's cache)
            return type(value)(cast(v) for v in value)
        if isinstance(value, dict):  # a linear-attention layer's states, one per index
            return {k: cast(v) for k, v in value.items()}
        return value

    cache = result.get("past_key_values")
    for layer in getattr(cache, "layers", []) or []:  # keys, values, convolution and recurrent states
        for attr, value in list(vars(layer).items()):
            if isinstance(value, (torch.Tensor, list, tuple, dict)):
                setattr(layer, attr, cast(value))
            elif isinstance(value, torch.dtype) and value.is_floating_point:  # the type new states are made in
                setattr(layer, attr, dtype)

    return {k: cast(v) for k, v in result.items()}


def _eager(model: torch.nn.Module, inputs: dict[str, Any]) -> list[np.ndarray]:
    with torch.no_grad():
        return [t.detach().float().numpy() for t in flatten_outputs(model(**copy.deepcopy(inputs)))]


def _max_diff(expected: list[np.ndarray], got: list[np.ndarray]) -> list[float]:
    if len(expected) != len(got):
        raise ValueError(f"Eager returns {len(expected)} tensors, the ONNX model {len(got)} outputs.")
    diffs = []
    for e, g in zip(expected, got):
        g = np.asarray(g, dtype=np.float64)
        diffs.append(float(np.abs(e.astype(np.float64) - g).max()) if e.shape == g.shape and e.size else
                     (0.0 if e.shape == g.shape else float("inf")))
    return diffs


def in_place_input_sets(input_sets: list[dict[str, Any]], names: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """The input sets a model updating its cache in place is checked on: onnxruntime's
    ``GroupQueryAttention`` refuses a past with more than one new token on a batch larger than
    one (an error, see :mod:`fx2onnx.optimizer.rules.cache_in_place`). A set of that kind
    becomes three the kernel runs: the prompt with an empty cache (the batch), the first
    sequence alone with its past, the last token alone with the past (the batch); the others
    are kept as they are. Returns the sets and their names (``names``: those of ``input_sets``)."""
    import copy

    sets, set_names = [], []
    for inputs, name in zip(input_sets, names):
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        batch, new = ids.shape
        past = mask.shape[1] - new
        if past == 0 or new == 1 or batch == 1 or "past_key_values" not in inputs:
            sets.append(inputs)
            set_names.append(name)
            continue
        prompt = copy.deepcopy(inputs)
        prompt["past_key_values"].crop(-past)  # transformers 5: the count of positions to remove
        prompt["attention_mask"] = mask[:, past:]
        first = copy.deepcopy(inputs)
        first["past_key_values"].batch_select_indices(torch.tensor([0]))
        first.update(input_ids=ids[:1], attention_mask=mask[:1])
        last = copy.deepcopy(inputs)
        last.update(input_ids=ids[:, -1:], attention_mask=torch.cat([mask[:, :past], mask[:, -1:]], dim=1))
        if "position_ids" in inputs:  # (batch, seq), or (rows, batch, seq): Qwen-VL's multimodal positions
            positions = inputs["position_ids"]
            prompt_mask = prompt["attention_mask"]
            counted = torch.where(prompt_mask == 0, 1, prompt_mask.cumsum(-1) - 1)
            prompt["position_ids"] = counted.expand(*positions.shape[:-2], *counted.shape).contiguous()
            first["position_ids"] = positions[..., :1, :]
            last["position_ids"] = positions[..., -1:]
        sets.extend([prompt, first, last])
        set_names.extend([f"{name}, its prompt with an empty cache", f"{name}, its first sequence",
                          f"{name}, its last token"])
    return sets, set_names


def check_against_eager(
    onnx_path: str, model32: torch.nn.Module, input_sets: list[dict[str, Any]], dtype: torch.dtype,
    atol: float = 1e-4, rtol: float = 1e-3,
) -> list[FolderCheck]:
    """Runs the ONNX model on each input set (its floating point tensors in ``dtype``) and
    compares it with ``model32`` (eager, float32); for a reduced precision ``dtype``, also with
    ``model32`` cast to ``dtype`` once every reference is computed (one copy of the weights
    in memory: ``model32`` is left in ``dtype``).
    """

    got = [run_onnx(onnx_path, (), _as_dtype(inputs, dtype)) for inputs in input_sets]
    references = [_eager(model32, _as_dtype(inputs, torch.float32)) for inputs in input_sets]
    if dtype == torch.float32:
        checks = []
        for reference, outputs in zip(references, got):
            report = compare_outputs([torch.from_numpy(r) for r in reference], outputs, atol=atol, rtol=rtol)
            checks.append(FolderCheck(report.ok, dtype, [d["abs"] for d in report.details], [], atol, rtol))
        failed = [i for i, c in enumerate(checks) if not c.ok]
        if failed:
            second = float64_opinion(model32, [input_sets[i] for i in failed], [references[i] for i in failed],
                                     [got[i] for i in failed])
            for i, (onnx_diff, eager_diff) in zip(failed, second or []):
                ok = all(o <= REDUCED_PRECISION_FACTOR * e + atol for o, e in zip(onnx_diff, eager_diff))
                checks[i] = dataclasses.replace(checks[i], ok=ok, float64_diff=onnx_diff,
                                                eager32_float64_diff=eager_diff)
        return checks
    model32.to(dtype)
    checks = []
    for inputs, reference, outputs in zip(input_sets, references, got):
        onnx_diff = _max_diff(reference, [np.asarray(g, dtype=np.float32) for g in outputs])
        eager_diff = _max_diff(reference, _eager(model32, _as_dtype(inputs, dtype)))
        ok = all(o <= REDUCED_PRECISION_FACTOR * e + atol for o, e in zip(onnx_diff, eager_diff))
        checks.append(FolderCheck(ok, dtype, onnx_diff, eager_diff, atol, rtol))
    return checks


class Float64Casts(torch.overrides.TorchFunctionMode):
    """Within it, a cast or a creation in float32 (``x.float()``, ``x.to(torch.float32)``, ``x.type(torch.float32)``,
    ``dtype=torch.float32``) gives float64: a model run in float64 stays in float64 where its code names float32."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.Tensor.float:
            func, args = torch.Tensor.double, args[:1]
        else:
            args = tuple(torch.float64 if a is torch.float32 else a for a in args)
            kwargs = {k: torch.float64 if v is torch.float32 else v for k, v in kwargs.items()}
        return func(*args, **kwargs)


def _float64_run(model: torch.nn.Module, inputs: dict[str, Any]) -> list[np.ndarray]:
    """The outputs of ``model`` (its tensors already float64) in float64 throughout (:class:`Float64Casts`), or with
    the model's own float32 casts where its code fails without them."""
    with torch.no_grad():
        try:
            with Float64Casts():
                outputs = model(**_as_dtype(inputs, torch.float64))
        except Exception:  # noqa: BLE001 - a kernel taking float32 only: the casts as the model makes them
            outputs = model(**_as_dtype(inputs, torch.float64))
    return [t.detach().double().numpy() for t in flatten_outputs(outputs)]


def float64_opinion(model32: torch.nn.Module, input_sets: list[dict[str, Any]], references: list[list[np.ndarray]],
                    got: list[list[np.ndarray]]) -> list[tuple[list[float], list[float]]] | None:
    """For each input set, the max abs differences to eager float64 of the export (``got``) and of eager float32
    (``references``), output by output; None when the model does not run in float64 (it is left in float32).

    The float32 tensors of ``model32`` are made float64 for the time of the runs and float32 again after
    (exactly: float32 to float64 and back loses nothing), so one copy of the weights is in memory. A mixture
    of experts runs transformers' eager experts (``grouped_mm`` takes no float64), restored after."""
    tensors = [t for t in [*model32.parameters(), *model32.buffers()] if t.dtype == torch.float32]
    experts = getattr(getattr(model32, "config", None), "_experts_implementation", None)
    switched = False
    try:
        for t in tensors:
            t.data = t.data.double()
        if experts not in (None, "eager"):
            with contextlib.suppress(Exception):  # a model without experts may refuse the setting: nothing to switch
                model32.set_experts_implementation("eager")
                switched = True
        opinions = []
        for inputs, reference, outputs in zip(input_sets, references, got):
            float64 = _float64_run(model32, inputs)
            opinions.append((_max_diff(float64, list(outputs)), _max_diff(float64, reference)))
        return opinions
    except Exception:  # noqa: BLE001 - a kernel without float64 (or any error of the model): the float32 verdict stays
        return None
    finally:
        for t in tensors:
            t.data = t.data.float()
        if switched:
            model32.set_experts_implementation(experts)


def eager_float32(folder: str) -> torch.nn.Module:
    """The folder's model in float32 as transformers loads it (no progress bar), the reference of the checks."""
    import transformers

    transformers.utils.logging.disable_progress_bar()
    try:
        architecture = transformers.AutoConfig.from_pretrained(folder).architectures[0]
        return getattr(transformers, architecture).from_pretrained(folder, dtype=torch.float32).eval()
    finally:
        transformers.utils.logging.enable_progress_bar()
