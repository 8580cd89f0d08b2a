"""Small vision models shared by the benchmarks and the profiling examples.

.. code-block:: python

    import torch
    from fx2onnx.zoo.vision import small_cnn

    model = small_cnn()
    print(model(torch.randn(2, 3, 32, 32)).shape)  # torch.Size([2, 10])
"""

from __future__ import annotations

import torch


def small_cnn(channels: tuple[int, int] = (16, 32), classes: int = 10, seed: int | None = 0) -> torch.nn.Module:
    """Two convolutions (the first with a batch norm), a max pool, a global average pool
    and a linear classifier; in eval mode, weights seeded with ``seed`` (None: not seeded).
    It takes images ``[batch, 3, height, width]`` of any size and returns ``[batch, classes]``."""
    if seed is not None:
        torch.manual_seed(seed)
    first, second = channels
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, first, 3, padding=1),
        torch.nn.BatchNorm2d(first),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(first, second, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(second, classes),
    ).eval()
