"""spread_degenerate_weights: the weights that hide a branch from a comparison with eager get random values."""

import torch

from fx2onnx.zoo.checkable import spread_degenerate_weights


class ScaledBranch(torch.nn.Module):
    """A residual block as timm builds it: the branch scaled by a LayerScale of 1e-5, a head scaled to 1e-4."""

    def __init__(self):
        super().__init__()
        self.branch = torch.nn.Linear(8, 8)
        self.gamma = torch.nn.Parameter(torch.full((8,), 1e-5))
        self.norm = torch.nn.LayerNorm(8)
        self.head = torch.nn.Linear(8, 3)
        with torch.no_grad():
            self.head.weight.mul_(1e-4 / self.head.weight.abs().max())
            self.head.bias.zero_()

    def forward(self, x, flip: bool = False):
        y = self.branch(x)
        if flip:  # what a wrong conversion of the branch would compute
            y = -y
        return self.head(self.norm(x + self.gamma * y))


def test_hidden_branch_becomes_visible():
    torch.manual_seed(0)
    model = ScaledBranch()
    x = torch.randn(4, 8)
    # before: a wrong branch is invisible at the zoo's tolerance (atol 1e-4)
    assert (model(x) - model(x, flip=True)).abs().max() < 1e-6
    changed = spread_degenerate_weights(model, seed=0)
    assert sorted(changed) == ["gamma", "head.bias", "head.weight", "norm.bias", "norm.weight"]
    assert (model(x) - model(x, flip=True)).abs().max() > 1e-2
    assert model(x).abs().max() > 1e-2
    # the norm's weight stays around 1, the layer scale around 0
    with torch.no_grad():
        assert abs(float(model.norm.weight.mean()) - 1) < 0.2 and abs(float(model.gamma.mean())) < 0.2


def test_deterministic_and_leaves_random_weights():
    torch.manual_seed(0)
    first, second = ScaledBranch(), ScaledBranch()
    second.load_state_dict(first.state_dict())
    branch = first.branch.weight.clone()
    spread_degenerate_weights(first, seed=3)
    spread_degenerate_weights(second, seed=3)
    for a, b in zip(first.parameters(), second.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.testing.assert_close(first.branch.weight, branch, rtol=0, atol=0)  # random already: kept
    assert spread_degenerate_weights(torch.nn.Linear(1, 1)) == []  # one-element bias, random weight
