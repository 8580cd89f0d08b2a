"""State-space (Mamba) layers of transformers made exportable with a dynamic sequence.

Without the ``mamba_ssm`` kernels, the Mamba mixer of transformers computes its
selective scan (``mamba_selective_scan``) with a Python loop over the sequence::

    for index in range(seq_len):
        ssm_state = discrete_A[:, :, index] * ssm_state + deltaB_u[:, :, index]
        scan_outputs.append(ssm_state @ C[:, index, :, None])

:func:`torch.export.export` unrolls that loop: the graph only works for the
sequence length of the example and the dynamic dimension ``seq`` is
specialized (``Found the following conflicts between user-specified ranges and
inferred ranges``). The associative-scan path of transformers is not taken
while exporting (no ONNX translation).

The patch runs the same recurrence with :func:`torch._higher_order_ops.scan.scan`
(one step per position, the state as the carry): torch.export keeps one
``scan`` node whatever the length, which the exporters convert into an ONNX
``Scan``. Each step computes exactly what one iteration of the loop did, so the
results are the ones of eager. The functions patched are the copies of
``mamba_selective_scan`` in Mamba, FalconMamba, Jamba and Zamba (the same code).
With ``mambapy`` installed and ``use_mambapy=True``, the original runs.

With a filled cache, the mixers of Mamba, FalconMamba and Jamba branch on the
length: one token (a decoding step) continues from the cached recurrent state
(``mamba_selective_state_update``), several tokens restart the scan from zeros
(the kernel's full-sequence path, which takes no initial state). torch.export
keeps the branch of the example (``seq >= 2``), and nothing in the ONNX model
stops a one-token input: the decoding step would silently start from zeros. The
patched ``MambaMixer.forward`` computes both cases in one graph: the
convolution always reads the cached state followed by the new tokens (for one
token, the values of ``causal_conv1d_update``) and the scan starts from
``where(seq_len == 1, cached state, zeros)``, so that one exported model
matches eager for every length. Zamba's mixer, whose independent Mamba heads each
have their own projections, runs the same per head.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch
import torch.nn.functional as F

from .registry import Patch

#: the modules of transformers holding a copy of ``mamba_selective_scan``
SELECTIVE_SCAN_MODULES = (
    "transformers.models.mamba.modeling_mamba",
    "transformers.models.falcon_mamba.modeling_falcon_mamba",
    "transformers.models.jamba.modeling_jamba",
    "transformers.models.zamba.modeling_zamba",
)


def _scan_step(input_dtype: torch.dtype):
    def step(state: torch.Tensor, x: tuple[torch.Tensor, torch.Tensor, torch.Tensor]):
        discrete_a, delta_b_u, c = x
        state = discrete_a * state + delta_b_u
        output = torch.matmul(state.to(input_dtype), c.unsqueeze(-1)).squeeze(-1)
        return state, output

    return step


def selective_scan_recurrence(
    discrete_A: torch.Tensor,
    deltaB_u: torch.Tensor,
    C: torch.Tensor,
    input_dtype: torch.dtype,
    initial_state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The recurrence of the selective scan as one :func:`scan` over the sequence.

    :param discrete_A: ``(batch, intermediate, seq, state)``
    :param deltaB_u: ``(batch, intermediate, seq, state)``
    :param C: ``(batch, seq, state)``
    :param input_dtype: the dtype the outputs are computed in
    :param initial_state: ``(batch, intermediate, state)``, zeros if None
    :return: the outputs ``(batch, intermediate, seq)`` and the last state
        ``(batch, intermediate, state)``
    """
    from torch._higher_order_ops.scan import scan

    batch_size, intermediate_size, _, state_size = deltaB_u.shape
    if initial_state is None:
        init = torch.zeros(
            (batch_size, intermediate_size, state_size), dtype=deltaB_u.dtype, device=deltaB_u.device
        )
    else:
        init = initial_state.to(deltaB_u.dtype).contiguous()
    xs = (discrete_A.permute(2, 0, 1, 3), deltaB_u.permute(2, 0, 1, 3), C.transpose(0, 1))
    last_state, outputs = scan(_scan_step(input_dtype), init, xs)
    return outputs.permute(1, 2, 0), last_state


def discretize(
    hidden_states: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    delta_bias: torch.Tensor | None,
    delta_softplus: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(discrete_A, deltaB_u)`` of the selective scan; ``B`` is ``(batch, seq, state)``."""
    if delta_bias is not None:
        dt = dt + delta_bias.to(dt.dtype)[..., None]
    if delta_softplus:
        dt = F.softplus(dt)
    discrete_A = torch.exp(A[None, :, None, :] * dt[:, :, :, None])
    discrete_B = dt[:, :, :, None] * B[:, None, :, :].float()
    deltaB_u = discrete_B * hidden_states[:, :, :, None].float()
    return discrete_A, deltaB_u


def _mambapy_available() -> bool:
    try:
        from transformers.utils.import_utils import is_mambapy_available
    except ImportError:
        return False
    return bool(is_mambapy_available())


def _make_selective_scan(original: Any) -> Any:
    def mamba_selective_scan(
        hidden_states: torch.Tensor,
        dt: torch.Tensor,
        A: torch.Tensor,
        B: torch.Tensor,
        C: torch.Tensor,
        D: torch.Tensor | None = None,
        z: torch.Tensor | None = None,
        delta_bias: torch.Tensor | None = None,
        delta_softplus: bool = False,
        return_last_state: bool = False,
        use_mambapy: bool = False,
        use_associative_scan: bool = False,
        **kwargs: Any,
    ) -> Any:
        if use_mambapy and _mambapy_available():
            return original(
                hidden_states, dt, A, B, C, D=D, z=z, delta_bias=delta_bias, delta_softplus=delta_softplus,
                return_last_state=return_last_state, use_mambapy=use_mambapy,
                use_associative_scan=use_associative_scan, **kwargs,
            )
        # the layout of the kernel: B, C given as (batch, state, seq)
        B = B.transpose(1, 2)
        C = C.transpose(1, 2)
        discrete_A, deltaB_u = discretize(hidden_states, dt, A, B, delta_bias, delta_softplus)
        scan_output, ssm_state = selective_scan_recurrence(discrete_A, deltaB_u, C, hidden_states.dtype)
        if D is not None:
            scan_output = scan_output + hidden_states * D[None, :, None]
        if z is not None:
            scan_output = scan_output * F.silu(z)
        if return_last_state:
            return scan_output, ssm_state
        return scan_output

    mamba_selective_scan.__wrapped__ = original  # type: ignore[attr-defined]
    return mamba_selective_scan


#: (module, mixer class) whose forward branches on ``seq_len == 1`` with a filled cache;
#: FalconMamba and Jamba add RMS norms on dt, B and C, the rest is Mamba's code
MIXERS = (
    ("transformers.models.mamba.modeling_mamba", "MambaMixer"),
    ("transformers.models.falcon_mamba.modeling_falcon_mamba", "FalconMambaMixer"),
    ("transformers.models.jamba.modeling_jamba", "JambaMambaMixer"),
)


def _one_token(seq_len: Any, device: torch.device) -> torch.Tensor:
    """``seq_len == 1`` as a tensor, not a Python bool torch.export would freeze."""
    return torch.full((), seq_len, dtype=torch.int64, device=device) == 1


def _cached_mixer_forward(
    module_name: str,
    original: Any,
    self: Any,
    hidden_states: torch.Tensor,
    cache_params: Any = None,
    attention_mask: torch.Tensor | None = None,
    **kwargs: Any,
) -> torch.Tensor:
    """The mixer's forward with one graph for every length once the cache is filled."""
    recurrent_state = None
    recording = cache_params is not None and cache_params.is_recording_past(self.layer_idx)
    if cache_params is not None and not self.training and not recording:
        recurrent_state = cache_params.get_recurrent_state(self.layer_idx, state_idx=0)
    if recurrent_state is None or hasattr(self.config, "_is_quantized"):
        # no filled cache: one path whatever the length, the patched selective scan
        return original(
            self, hidden_states, cache_params=cache_params, attention_mask=attention_mask, **kwargs
        )
    mamba = importlib.import_module(module_name)
    seq_len, dtype = hidden_states.shape[1], hidden_states.dtype
    hidden_states = mamba.apply_mask_to_padding_states(hidden_states, attention_mask)
    projected_states = self.in_proj(hidden_states).transpose(1, 2)
    A = -torch.exp(self.A_log.float())
    hidden_states_B_C, gate = projected_states.chunk(2, dim=1)
    # the cached convolution state followed by the new tokens: with one token, the
    # same values as causal_conv1d_update
    hidden_states_B_C = cache_params.update_conv_state(
        hidden_states_B_C, self.layer_idx, conv_kernel_size=self.conv_kernel_size
    )
    hidden_states_B_C = mamba.causal_conv1d_fn(
        hidden_states_B_C, self.conv1d.weight.squeeze(1), self.conv1d.bias, activation=self.activation
    )[:, :, -seq_len:]
    hidden_states_B_C = mamba.apply_mask_to_padding_states(
        hidden_states_B_C.transpose(1, 2), attention_mask
    )
    time_step, B, C = torch.split(
        self.x_proj(hidden_states_B_C),
        [self.time_step_rank, self.ssm_state_size, self.ssm_state_size],
        dim=-1,
    )
    if hasattr(self, "b_layernorm"):
        # FalconMamba, Jamba: norms on dt, B and C
        time_step = self.dt_layernorm(time_step)
        B = self.b_layernorm(B)
        C = self.c_layernorm(C)
    time_step = self.dt_proj.weight @ time_step.transpose(1, 2)
    time_proj_bias = self.dt_proj.bias.float() if self.dt_proj.bias is not None else None
    x = hidden_states_B_C.transpose(1, 2)
    discrete_A, deltaB_u = discretize(x, time_step, A, B, time_proj_bias, True)
    # eager: one token continues from the cached state (selective_state_update),
    # several tokens start from zeros (the kernel's full-sequence path)
    initial_state = torch.where(
        _one_token(seq_len, x.device), recurrent_state, torch.zeros_like(recurrent_state)
    )
    scan_output, final_state = selective_scan_recurrence(discrete_A, deltaB_u, C, x.dtype, initial_state)
    scan_output = (scan_output + x * self.D.float()[None, :, None]) * F.silu(gate)
    cache_params.update_recurrent_state(final_state, self.layer_idx)
    return self.out_proj(scan_output.transpose(1, 2).to(dtype))


def _cached_multihead_mixer_forward(
    module_name: str,
    original: Any,
    self: Any,
    hidden_states: torch.Tensor,
    cache_params: Any = None,
    attention_mask: torch.Tensor | None = None,
    **kwargs: Any,
) -> torch.Tensor:
    """The forward of a mixer of independent Mamba heads (each with its own ``x_proj`` and
    ``dt_proj``: Zamba) with one graph for every length once the cache is filled."""
    recurrent_state = None
    recording = cache_params is not None and cache_params.is_recording_past(self.layer_idx)
    if cache_params is not None and not self.training and not recording:
        recurrent_state = cache_params.get_recurrent_state(self.layer_idx, state_idx=0)
    if recurrent_state is None:
        return original(
            self, hidden_states, cache_params=cache_params, attention_mask=attention_mask, **kwargs
        )
    mamba = importlib.import_module(module_name)
    batch_size, seq_len, _ = hidden_states.shape
    dtype = hidden_states.dtype
    heads, head_dim = self.n_mamba_heads, self.mamba_head_dim
    hidden_states = mamba.apply_mask_to_padding_states(hidden_states, attention_mask)
    projected_states = self.in_proj(hidden_states).transpose(1, 2)
    hidden_states_B_C, gate = projected_states.view(batch_size, -1, 2, seq_len).chunk(2, dim=2)
    hidden_states_B_C = hidden_states_B_C.squeeze(2).contiguous()
    gate = gate.reshape(batch_size, heads, head_dim, seq_len).transpose(0, 1)
    # the cached convolution state followed by the new tokens: with one token, the
    # same values as causal_conv1d_update
    hidden_states_B_C = cache_params.update_conv_state(
        hidden_states_B_C, self.layer_idx, conv_kernel_size=self.conv_kernel_size
    )
    hidden_states_B_C = mamba.causal_conv1d_fn(
        hidden_states_B_C, self.conv1d.weight.squeeze(1), self.conv1d.bias, activation=self.activation
    )[:, :, -seq_len:]
    hidden_states_B_C = mamba.apply_mask_to_padding_states(hidden_states_B_C.transpose(1, 2), attention_mask)
    x = hidden_states_B_C.transpose(1, 2).reshape(batch_size, heads, head_dim, seq_len).transpose(0, 1)
    ssm_parameters = (self.x_proj_weight[:, None] @ x).transpose(-1, -2)
    time_step, B, C = torch.split(
        ssm_parameters, [self.time_step_rank, self.ssm_state_size, self.ssm_state_size], dim=-1
    )
    time_step = self.dt_proj_weight[:, None] @ time_step.transpose(-1, -2)
    time_proj_bias = self.dt_proj_bias.float() if self.dt_proj_bias is not None else None
    A = -torch.exp(self.A_log.float())
    # eager: one token continues from the cached state (selective_state_update),
    # several tokens start from zeros (the kernel's full-sequence path)
    initial_state = torch.where(
        _one_token(seq_len, x.device), recurrent_state, torch.zeros_like(recurrent_state)
    )
    outputs, final_states = [], []
    for head in range(heads):
        discrete_A, deltaB_u = discretize(
            x[head], time_step[head], A[head], B[head],
            time_proj_bias[head] if time_proj_bias is not None else None, True,
        )
        output, final_state = selective_scan_recurrence(
            discrete_A, deltaB_u, C[head], x.dtype, initial_state[:, head]
        )
        output = (output + x[head] * self.D[head].float()[None, :, None]) * F.silu(gate[head])
        outputs.append(output)
        final_states.append(final_state)
    cache_params.update_recurrent_state(torch.stack(final_states, dim=1), self.layer_idx)
    return self.out_proj(torch.cat(outputs, dim=1).transpose(1, 2).to(dtype))


#: (module, mixer class) of independent Mamba heads, whose forward branches on ``seq_len == 1``
MULTIHEAD_MIXERS = (("transformers.models.zamba.modeling_zamba", "ZambaMambaMixer"),)


def _make_mixer_forward(module_name: str, cached_forward: Any = _cached_mixer_forward) -> Any:
    def make(original: Any) -> Any:
        def forward(
            self: Any,
            hidden_states: torch.Tensor,
            cache_params: Any = None,
            attention_mask: torch.Tensor | None = None,
            **kwargs: Any,
        ) -> torch.Tensor:
            return cached_forward(
                module_name, original, self, hidden_states, cache_params, attention_mask, **kwargs
            )

        forward.__wrapped__ = original  # type: ignore[attr-defined]
        return forward

    return make


def state_space_patches() -> list[Patch]:
    """The patches of the state-space layers: each copy of ``mamba_selective_scan``, each Mamba mixer."""
    return [
        Patch(
            name=f"{module.rsplit('.', 2)[-2]}.mamba_selective_scan",
            kind="transformers",
            target=f"{module}.mamba_selective_scan",
            make=_make_selective_scan,
            expected_args=("hidden_states", "dt", "A", "B", "C", "D", "z", "delta_bias", "return_last_state"),
            doc="the selective scan's Python loop over the sequence as one torch scan "
            "(ONNX Scan), so that the sequence length stays dynamic",
        )
        for module in SELECTIVE_SCAN_MODULES
    ] + [
        Patch(
            name=f"{class_name}.forward",
            kind="transformers",
            target=f"{module}.{class_name}.forward",
            make=_make_mixer_forward(module),
            expected_args=("self", "hidden_states", "cache_params", "attention_mask"),
            doc="with a filled cache, one graph for one token (decoding, from the cached recurrent "
            "state) and several tokens (from zeros, like eager): no branch on the sequence length",
        )
        for module, class_name in MIXERS
    ] + [
        Patch(
            name=f"{class_name}.forward",
            kind="transformers",
            target=f"{module}.{class_name}.forward",
            make=_make_mixer_forward(module, _cached_multihead_mixer_forward),
            expected_args=("self", "hidden_states", "cache_params", "attention_mask"),
            doc="with a filled cache, one graph for one token (decoding, from the cached recurrent "
            "state of each head) and several tokens (from zeros, like eager): no branch on the "
            "sequence length",
        )
        for module, class_name in MULTIHEAD_MIXERS
    ]
