"""The attention mask SDPA skips at run time, for attention modules that are not causal.

transformers' masks for ``scaled_dot_product_attention`` are not built when nothing is padded
(``masking_utils._ignore_causal_mask_sdpa``): the mask is ``None`` and the attention relies on
its module's ``is_causal``. Gemma and Gemma 2 set ``is_causal = not use_bidirectional_attention``
and PaliGemma's configuration sets ``use_bidirectional_attention=True`` on its text model, yet
the mask they build is causal. In eager mode the result therefore depends on the *values* of
``attention_mask``: without padding (and without a cache, or with an empty one) the mask is
skipped and every token attends to every other one; with padding the causal mask is built and
used. Under torch.export transformers never skips (it cannot read the values): the program
always holds the causal mask and differs from eager on every input without padding (0.17 on a
tiny PaliGemma, the very inputs it was exported with).

The replacement of ``create_causal_mask`` (and ``create_sliding_window_causal_mask``) in these
modeling modules returns the mask the original builds OR the condition under which eager skips
it, computed on tensors: ``mask | skip``. An all-true mask is the attention a skipped mask gives
a non-causal module (``is_causal`` is False: no causal pattern), and ``mask | False`` is the
mask. The program then follows eager for every input, padded or not. In eager mode the patch
changes nothing: where the original returns ``None`` so does the replacement, and where it
returns a mask the skip condition is false.

It acts only on configurations with ``use_bidirectional_attention=True`` and the ``sdpa``
attention: the ``eager`` attention never skips its mask.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

#: (modeling module, mask function) pairs patched where the module is imported: the families
#: whose attention module reads ``use_bidirectional_attention`` while their masks stay causal
MASK_FUNCTIONS = (
    ("transformers.models.gemma.modeling_gemma", "create_causal_mask"),
    ("transformers.models.gemma2.modeling_gemma2", "create_causal_mask"),
    ("transformers.models.gemma2.modeling_gemma2", "create_sliding_window_causal_mask"),
    ("transformers.models.paligemma.modeling_paligemma", "create_causal_mask"),
    ("transformers.models.paligemma.modeling_paligemma", "create_sliding_window_causal_mask"),
)


def _as_tensor(value: Any, device: Any) -> torch.Tensor:
    """An int, a SymInt or a tensor as a 0-d int64 tensor (a comparison of symbolic sizes in Python
    would add a guard on the example's sizes)."""
    if isinstance(value, torch.Tensor):
        return value.to(device=device, dtype=torch.int64).reshape(())
    return torch.full((), value, dtype=torch.int64, device=device)


def eager_skip_condition(
    config: Any,
    inputs_embeds: torch.Tensor,
    attention_mask: Any,
    past_key_values: Any,
    position_ids: Any,
    layer_idx: int,
    local_size: int | None,
) -> torch.Tensor | bool:
    """Whether the sdpa mask of transformers is skipped in eager mode (``None``, the attention relying
    on the module's ``is_causal``), as a 0-d bool tensor, or False when it never is for these arguments.

    The same conditions as ``masking_utils._ignore_causal_mask_sdpa`` and the packed-sequence
    detection of ``_preprocess_mask_arguments``, written without reading a value in Python."""
    from transformers import masking_utils as mu

    early_exit, mask_2d, packed, q_length, kv_length, q_offset, kv_offset = mu._preprocess_mask_arguments(
        config, inputs_embeds, attention_mask, past_key_values, position_ids, layer_idx
    )
    if early_exit:
        return False
    device = inputs_embeds.device
    kv = _as_tensor(kv_length, device)
    skip = torch.ones((), dtype=torch.bool, device=device)
    if packed is not None:  # a tensor under tracing; eager skips when every sequence is one sequence
        skip = skip & (packed[:, -1] == 0).all()
    if local_size is not None:
        skip = skip & (kv < local_size)
    padding = mu.prepare_padding_mask(mask_2d, kv_length, kv_offset)
    if padding is not None and padding.shape[-1] != kv_length:
        padding = padding[:, kv_offset: kv_offset + kv_length]
    q = _as_tensor(q_length, device)
    same_length = kv == q
    no_offset = _as_tensor(q_offset, device) == 0
    if padding is None:
        return skip & (same_length | no_offset)
    all_kept = padding.all()
    prefix_kept = padding[:, :q_length].all() & (~padding[:, q_length:]).all()
    return skip & ((same_length & all_kept) | (no_offset & prefix_kept))


def _acts_on(config: Any) -> bool:
    return getattr(config, "use_bidirectional_attention", None) is True and \
        getattr(config, "_attn_implementation", None) == "sdpa"


def make_mask_with_eager_skip(original: Any, sliding: bool) -> Any:
    """``create_causal_mask`` (``sliding=False``) or ``create_sliding_window_causal_mask`` returning
    ``mask | skip`` (see the module's docstring)."""
    signature = inspect.signature(original)

    def create_mask(*args: Any, **kwargs: Any) -> Any:
        mask = original(*args, **kwargs)
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        config = a["config"]
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or not _acts_on(config):
            return mask
        if not a.get("allow_is_causal_skip", True) or a.get("or_mask_function") is not None \
                or a.get("and_mask_function") is not None or a.get("block_sequence_ids") is not None:
            return mask  # eager builds the mask too
        past = a.get("past_key_values")
        layer_idx = a.get("layer_idx")
        if layer_idx is None:
            from transformers import masking_utils as mu

            if sliding:
                sliding_layers = getattr(past, "is_sliding", None) or []
                layer_idx = sliding_layers.index(True) if True in sliding_layers else 0
            else:
                layer_idx = mu.find_first_full_attention_index(past)
        skip = eager_skip_condition(
            config, a["inputs_embeds"], a["attention_mask"], past, a.get("position_ids"), layer_idx,
            getattr(config, "sliding_window", None) if sliding else None,
        )
        if skip is False:
            return mask
        return mask | skip

    create_mask.__wrapped__ = original  # type: ignore[attr-defined]
    return create_mask


def guard_mask_function(original: Any) -> str | None:
    """Skips the patch when masking_utils lacks the helpers the condition reuses."""
    from transformers import masking_utils as mu

    missing = [name for name in ("_preprocess_mask_arguments", "prepare_padding_mask", "find_first_full_attention_index")
               if not hasattr(mu, name)]
    if missing:
        return f"transformers.masking_utils has no {missing}"
    names = set(inspect.signature(original).parameters)
    needed = {"config", "inputs_embeds", "attention_mask", "past_key_values", "position_ids"}
    return None if needed <= names else f"the mask function's signature changed: {sorted(names)}"
