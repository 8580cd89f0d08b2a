"""
.. _l-plot-exporter-capture-check:

When torch.export is wrong: the capture check
=============================================

:func:`torch.export.export` traces the model with fake tensors: it cannot read values. Code
that decides something from values has to take one path under tracing, and when that path is
not the one eager takes on the same inputs, the exported program computes something else
than the model. transformers does this in a few places (its attention masks are skipped at run
time when nothing is padded, see :mod:`fx2onnx.patches.sdpa_skip`). A converter faithful to the
program then writes a wrong ONNX model, and nothing fails.

:func:`fx2onnx.to_onnx` therefore runs the exported program on the example inputs and
compares it with eager before converting anything (``check_capture=True``, the default).

A model whose eager path depends on values
------------------------------------------

The attention below skips its mask when nothing is padded, as transformers' SDPA masks do,
but only in eager mode: under tracing it always builds the causal mask.
"""

import torch

import fx2onnx


class Attention(torch.nn.Module):
    def forward(self, scores, mask):
        if not torch.compiler.is_compiling() and bool(mask.all()):
            return scores.softmax(-1)  # nothing padded: every token sees every other one
        causal = torch.ones(scores.shape[-2:], dtype=torch.bool).tril()
        return scores.masked_fill(~(causal & mask[:, None, :]), float("-inf")).softmax(-1)


class Model(torch.nn.Module):
    def __init__(self, attention: torch.nn.Module):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.attention = attention

    def forward(self, x, mask):
        return self.attention(self.proj(x) @ x.transpose(-1, -2), mask)


torch.manual_seed(0)
model = Model(Attention()).eval()
x = torch.randn(2, 4, 8)
mask = torch.ones(2, 4, dtype=torch.bool)  # no padding

# %%
# The export refuses
# ------------------
#
# The error names the outputs that differ, by how much, and the first submodule whose outputs
# the program does not reproduce (the eager outputs are recorded with hooks, the program's
# nodes know their module).

try:
    fx2onnx.to_onnx(model, (x, mask))
except fx2onnx.CaptureMismatchError as e:
    print(e)
    caught = e
assert "'attention'" in str(caught)

# %%
# Without the check the same export gives a model that is wrong on the very inputs it was
# exported with: ``check_capture=False`` skips the check, ``"warn"`` warns instead of raising.

onx = fx2onnx.to_onnx(model, (x, mask), check_capture=False)
report = fx2onnx.validate(onx, model, (x, mask))
print(report)
assert not report.ok

# %%
# The fix: decide with tensors
# ----------------------------
#
# The skip becomes a tensor condition: the mask is all true when nothing is padded. The
# program is the same in eager mode and under tracing, and it is right for padded inputs too.


class TensorAttention(torch.nn.Module):
    def forward(self, scores, mask):
        causal = torch.ones(scores.shape[-2:], dtype=torch.bool).tril()
        keep = (causal & mask[:, None, :]) | mask.all()
        return scores.masked_fill(~keep, float("-inf")).softmax(-1)


fixed = Model(TensorAttention()).eval()
fixed.proj.load_state_dict(model.proj.state_dict())
dynamic = ({0: "batch", 1: "seq"}, {0: "batch", 1: "seq"})
onx = fx2onnx.to_onnx(fixed, (x, mask), dynamic_shapes=dynamic)

padded = torch.ones(3, 6, dtype=torch.bool)
padded[0, 4:] = False
for inputs in [(x, mask), (torch.randn(3, 6, 8), padded)]:
    # the original model on the same inputs is the reference: the fix changed no result
    report = fx2onnx.validate(onx, model, inputs)
    print(tuple(inputs[0].shape), report)
    assert report.ok

# %%
# What the check costs
# --------------------
#
# One eager run and one run of the exported program on the example inputs: a fraction of the
# export (``bench/bench_capture_check.py`` measures it on the supported-models zoo). It does
# not run when the weights are on the ``meta`` device (a checkpoint exported without loading
# it: the exported folder is validated afterwards instead), when the model is an
# ExportedProgram already, or when the program draws random numbers.
