"""Random weights a comparison with eager can see through.

Libraries initialize some weights so that a fresh model starts close to the identity:
timm's LayerScale (``gamma = 1e-5``), the zero-initialized last norm of every ResNet block,
classifier heads scaled by ``1e-3``, diffusers' zero convolutions. With such weights whole
branches add nothing to the outputs, and a zoo row comparing the ONNX model with eager cannot
see a wrong conversion inside them: timm's DINOv3 ViT exported at one image size and run at
another, with its rotary embedding frozen at the export's grid, gave logits equal to eager's within
1e-10, because every attention block was scaled by 1e-5.

:func:`spread_degenerate_weights` replaces these weights by seeded random values of a useful
scale before a row computes anything, so that every branch contributes to the outputs.

.. code-block:: python

    import torch
    from fx2onnx.zoo.checkable import spread_degenerate_weights

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    torch.nn.init.zeros_(model[0].weight)
    print(spread_degenerate_weights(model))  # ['0.weight', '1.weight', '1.bias']
"""

from __future__ import annotations

import math

import torch

#: a matrix (or convolution kernel) whose values are all below this is "scaled toward zero"
TINY = 1e-3
#: standard deviation given to a constant vector (a norm's weight or bias, a layer scale)
SPREAD = 0.1


def spread_degenerate_weights(model: torch.nn.Module, seed: int = 0) -> list[str]:
    """Gives random values to the parameters that make branches of ``model`` invisible.

    * a parameter of two or more dimensions whose values are all below :data:`TINY` in
      absolute value (a zero-initialized or down-scaled head, projection or convolution)
      gets ``N(0, 1 / fan_in)`` values;
    * a vector whose values are all equal (a layer scale ``1e-5``, a norm's ``1`` weight
      or ``0`` bias, a zero bias) gets ``N(v, SPREAD)`` values, ``v`` the constant when it
      is at least 0.5 in absolute value, 0 otherwise.

    Parameters of one element and integer parameters are left alone. Returns the names of
    the parameters changed (the model is changed in place, deterministically for ``seed``).
    """
    generator = torch.Generator().manual_seed(seed)
    changed = []
    with torch.no_grad():
        for name, param in model.named_parameters():
            if not param.is_floating_point() or param.numel() < 2 or param.device.type == "meta":
                continue
            values = param.detach().float()
            if param.ndim >= 2 and float(values.abs().max()) < TINY:
                fan_in = param[0].numel()
                new = torch.randn(param.shape, generator=generator) / math.sqrt(fan_in)
            elif param.ndim == 1 and bool((values == values[0]).all()):
                constant = float(values[0])
                center = constant if abs(constant) >= 0.5 else 0.0
                new = center + SPREAD * torch.randn(param.shape, generator=generator)
            else:
                continue
            param.copy_(new.to(param.dtype))
            changed.append(name)
    return changed
