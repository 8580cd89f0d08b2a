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
"""

from __future__ import annotations

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
    discrete_A: torch.Tensor, deltaB_u: torch.Tensor, C: torch.Tensor, input_dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """The recurrence of the selective scan as one :func:`scan` over the sequence.

    :param discrete_A: ``(batch, intermediate, seq, state)``
    :param deltaB_u: ``(batch, intermediate, seq, state)``
    :param C: ``(batch, seq, state)``
    :param input_dtype: the dtype the outputs are computed in
    :return: the outputs ``(batch, intermediate, seq)`` and the last state
        ``(batch, intermediate, state)``
    """
    from torch._higher_order_ops.scan import scan

    batch_size, intermediate_size, _, state_size = deltaB_u.shape
    init = torch.zeros(
        (batch_size, intermediate_size, state_size), dtype=deltaB_u.dtype, device=deltaB_u.device
    )
    xs = (discrete_A.permute(2, 0, 1, 3), deltaB_u.permute(2, 0, 1, 3), C.transpose(0, 1))
    last_state, outputs = scan(_scan_step(input_dtype), init, xs)
    return outputs.permute(1, 2, 0), last_state


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
        input_dtype = hidden_states.dtype
        if delta_bias is not None:
            dt = dt + delta_bias.to(dt.dtype)[..., None]
        if delta_softplus:
            dt = F.softplus(dt)
        # the layout of the kernel: B, C given as (batch, state, seq)
        B = B.transpose(1, 2)
        C = C.transpose(1, 2)
        discrete_A = torch.exp(A[None, :, None, :] * dt[:, :, :, None])
        discrete_B = dt[:, :, :, None] * B[:, None, :, :].float()
        deltaB_u = discrete_B * hidden_states[:, :, :, None].float()
        scan_output, ssm_state = selective_scan_recurrence(discrete_A, deltaB_u, C, input_dtype)
        if D is not None:
            scan_output = scan_output + hidden_states * D[None, :, None]
        if z is not None:
            scan_output = scan_output * F.silu(z)
        if return_last_state:
            return scan_output, ssm_state
        return scan_output

    mamba_selective_scan.__wrapped__ = original  # type: ignore[attr-defined]
    return mamba_selective_scan


def state_space_patches() -> list[Patch]:
    """The patches of the state-space layers (one per copy of ``mamba_selective_scan``)."""
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
    ]
