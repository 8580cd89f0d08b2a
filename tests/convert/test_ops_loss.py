"""Converters of loss functions (forward): cross entropy, nll, bce, kl_div, l1, smooth l1, huber."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import Fn2, check_export


WEIGHT = torch.tensor([0.5, 1.0, 2.0, 1.5, 0.7])


def _logits_and_classes(n=4, extra=()):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, 5, *extra, generator=gen)
    t = torch.randint(0, 5, (n, *extra), generator=gen)
    t.view(-1)[0] = -100
    return x, t


CLASS_LOSSES = {
    "cross_entropy": lambda x, t: F.cross_entropy(x, t),
    "cross_entropy_sum_weight": lambda x, t: F.cross_entropy(x, t, weight=WEIGHT, reduction="sum"),
    "cross_entropy_none": lambda x, t: F.cross_entropy(x, t, reduction="none"),
    "cross_entropy_weighted_mean": lambda x, t: F.cross_entropy(x, t, weight=WEIGHT),
    "cross_entropy_smoothing": lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1),
    "cross_entropy_smoothing_weight": lambda x, t: F.cross_entropy(x, t, weight=WEIGHT, label_smoothing=0.2),
    "cross_entropy_smoothing_none": lambda x, t: F.cross_entropy(x, t, reduction="none", label_smoothing=0.2),
    "cross_entropy_ignore_index": lambda x, t: F.cross_entropy(x, t.clamp(min=0), ignore_index=2),
    "nll": lambda x, t: F.nll_loss(F.log_softmax(x, 1), t),
    "nll_weight_sum": lambda x, t: F.nll_loss(F.log_softmax(x, 1), t, weight=WEIGHT, reduction="sum"),
}


@pytest.mark.parametrize("name", list(CLASS_LOSSES))
def test_class_losses(name):
    x, t = _logits_and_classes()
    x2, t2 = _logits_and_classes(6)
    check_export(
        Fn2(CLASS_LOSSES[name]), (x, t), dynamic_shapes=({0: "batch"}, {0: "batch"}), inputs2=((x2, t2), None)
    )


def test_cross_entropy_spatial():
    x, t = _logits_and_classes(2, (3, 4))
    check_export(Fn2(lambda x, t: (F.cross_entropy(x, t), F.cross_entropy(x, t, reduction="none"))), (x, t))


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_probabilities(smoothing):
    gen = torch.Generator().manual_seed(0)
    x, p = torch.randn(4, 5, generator=gen), torch.rand(4, 5, generator=gen).softmax(1)
    fn = lambda x, p: (
        F.cross_entropy(x, p, label_smoothing=smoothing),
        F.cross_entropy(x, p, weight=WEIGHT, reduction="none"),
    )  # noqa: E731
    check_export(Fn2(fn), (x, p))


ELEMENT_LOSSES = {
    "bce_with_logits": lambda x, t: F.binary_cross_entropy_with_logits(x * 20, t),
    "bce_with_logits_weights": lambda x, t: F.binary_cross_entropy_with_logits(
        x, t, weight=t + 0.5, pos_weight=torch.full((6,), 2.0), reduction="sum"
    ),
    "bce": lambda x, t: F.binary_cross_entropy(x.sigmoid(), t, reduction="none"),
    "bce_weight": lambda x, t: F.binary_cross_entropy(x.sigmoid(), t, weight=t + 1),
    "kl_div": lambda x, t: F.kl_div(F.log_softmax(x, 1), t, reduction="batchmean"),
    "kl_div_log_target": lambda x, t: F.kl_div(F.log_softmax(x, 1), t.log(), reduction="sum", log_target=True),
    "kl_div_zero_target": lambda x, t: F.kl_div(F.log_softmax(x, 1), (t - 0.5).relu(), reduction="none"),
    "l1": lambda x, t: (F.l1_loss(x, t), F.l1_loss(x, t, reduction="none")),
    "smooth_l1": lambda x, t: (
        F.smooth_l1_loss(x * 2, t),
        F.smooth_l1_loss(x, t, beta=0.3, reduction="sum"),
        F.smooth_l1_loss(x, t, beta=0.0),
    ),
    "huber": lambda x, t: (F.huber_loss(x * 2, t), F.huber_loss(x, t, delta=0.4, reduction="none")),
    "mse": lambda x, t: F.mse_loss(x, t),
}


@pytest.mark.parametrize("name", list(ELEMENT_LOSSES))
def test_elementwise_losses(name):
    gen = torch.Generator().manual_seed(0)
    x, t = torch.randn(3, 6, generator=gen), torch.rand(3, 6, generator=gen)
    x2, t2 = torch.randn(5, 6, generator=gen), torch.rand(5, 6, generator=gen)
    check_export(
        Fn2(ELEMENT_LOSSES[name]), (x, t), dynamic_shapes=({0: "batch"}, {0: "batch"}), inputs2=((x2, t2), None)
    )
