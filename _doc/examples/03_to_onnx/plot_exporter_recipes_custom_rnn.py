"""
.. _l-plot-exporter-recipes-custom-rnn:

to_onnx and recurrent layers: LSTM, GRU and RNN with a dynamic sequence length
==============================================================================

``nn.LSTM``, ``nn.GRU`` and ``nn.RNN`` loop over time inside torch's own operators
(``aten.lstm``...). :func:`torch.export.export` computes their output shapes by running
that loop, so the sequence length becomes the example's: a model exported with a
dynamic sequence is refused. :func:`fx2onnx.to_onnx` keeps the length symbolic during
its capture and converts each layer to ONNX's ``LSTM`` / ``GRU`` / ``RNN``, or to a
``Scan`` over the time steps where onnxruntime has no kernel (projections, float64).
Packed sequences (``pack_padded_sequence``) export too, the lengths as an input.

The model: a bidirectional LSTM, then a GRU
-------------------------------------------
"""

import warnings

import matplotlib.pyplot as plt
import torch

import fx2onnx
from fx2onnx.validation import validate

# torch's own notices, not about the export: torch.export on the list of weights nn.LSTM refreshes,
# eager torch on an LSTM with projections (oneDNN has no kernel for it)
warnings.filterwarnings("ignore", message=r"The tensor attributes .*_flat_weights")
warnings.filterwarnings("ignore", message="LSTM with projections is not supported with oneDNN")


class Tagger(torch.nn.Module):
    """Features of every time step -> a score per step and the last hidden states."""

    def __init__(self, proj_size: int = 0):
        super().__init__()
        self.lstm = torch.nn.LSTM(
            8, 16, num_layers=2, batch_first=True, bidirectional=True, proj_size=proj_size
        )
        self.gru = torch.nn.GRU(2 * (proj_size or 16), 12, batch_first=True)
        self.head = torch.nn.Linear(12, 3)

    def forward(self, x):
        y, (h, _) = self.lstm(x)
        z, _ = self.gru(y)
        return self.head(z), h


torch.manual_seed(0)
model = Tagger().eval()
x = torch.randn(2, 10, 8)
dynamic_shapes = ({0: "batch", 1: "seq"},)

# %%
# torch.export alone refuses the dynamic sequence
# -----------------------------------------------

try:
    torch.export.export(
        model, (x,), dynamic_shapes=({0: torch.export.Dim("batch"), 1: torch.export.Dim("seq")},)
    )
except Exception as e:  # the loop over time made the length a constant
    print(type(e).__name__, ":", str(e).strip().splitlines()[1].strip())

# %%
# to_onnx keeps one node per layer
# --------------------------------

onx = fx2onnx.to_onnx(model, (x,), dynamic_shapes=dynamic_shapes)
print("nodes:", [n.op_type for n in onx.graph.node])
print("input:", [d.dim_param or d.dim_value for d in onx.graph.input[0].type.tensor_type.shape.dim])
assert {"LSTM", "GRU"} <= {n.op_type for n in onx.graph.node}

# %%
# The model is right at every length, one step included, and for other batches.

lengths = [1, 3, 10, 40, 100]
differences = {}
for seq in lengths:
    report = validate(onx, model, (torch.randn(3, seq, 8),), atol=1e-5)
    assert report.ok, report
    differences.setdefault("LSTM + GRU (float32)", []).append(report.max_abs)
print("max differences:", ["%.1e" % d for d in differences["LSTM + GRU (float32)"]])

# %%
# Projections and float64: a Scan over the time steps
# ---------------------------------------------------
#
# ONNX's ``LSTM`` has no projection (``proj_size``) and onnxruntime's kernels refuse
# float64: such a layer becomes a ``Scan`` whose body applies torch's gates; the input
# projection of every step is one MatMul before the loop.

variants = {
    "LSTM with projections (float32)": (Tagger(proj_size=6).eval(), torch.float32, 1e-5),
    "LSTM + GRU (float64)": (Tagger().double().eval(), torch.float64, 1e-12),
}
for label, (variant, dtype, atol) in variants.items():
    scanned = fx2onnx.to_onnx(variant, (x.to(dtype),), dynamic_shapes=dynamic_shapes)
    print(label, "->", sorted({n.op_type for n in scanned.graph.node} & {"LSTM", "GRU", "Scan"}))
    for seq in lengths:
        report = validate(scanned, variant, (torch.randn(3, seq, 8, dtype=dtype),), atol=atol)
        assert report.ok, report
        differences.setdefault(label, []).append(report.max_abs)

# %%
# The differences from eager by sequence length (float32 within 1e-5; float64 near
# the machine's precision).

fig, axes = plt.subplots(3, 1, figsize=(7.4, 7), sharex=True)  # stacked: the page's width
for ax, (label, values) in zip(axes, differences.items()):
    ax.bar([str(n) for n in lengths], values, color="#4c72b0")
    ax.set_title(label, fontsize=10)
    ax.set_xlabel("sequence length")
    ax.ticklabel_format(axis="y", style="sci", scilimits=(0, 0))
for ax in axes:
    ax.set_ylabel("max |onnxruntime - eager|", fontsize=8)
fig.suptitle("One exported model for every sequence length")
fig.tight_layout()

# %%
# Packed sequences: each sequence stops at its own length
# -------------------------------------------------------
#
# Sentences of different lengths are padded, then packed (``pack_padded_sequence``) so that
# the layers skip the padding. The packed sizes come from the values of ``lengths``:
# torch.export (and ``torch.onnx.export(dynamo=True)``) fail there. to_onnx keeps the padded
# batch and gives the lengths to ONNX's ``sequence_lens``; the output is cut at the longest
# length, as ``pad_packed_sequence`` does.


class PackedTagger(Tagger):
    def forward(self, x, lengths):
        packed = torch.nn.utils.rnn.pack_padded_sequence(
            x, lengths, batch_first=True, enforce_sorted=False
        )
        y, (h, _) = self.lstm(packed)
        z, _ = self.gru(y)
        z, _ = torch.nn.utils.rnn.pad_packed_sequence(z, batch_first=True)
        return self.head(z), h


packed_model, example = PackedTagger().eval(), (x, torch.tensor([10, 7]))
try:
    torch.export.export(packed_model, example)
except Exception as e:
    print(type(e).__name__, ":", str(e).strip().splitlines()[0][:90])

packed_onx = fx2onnx.to_onnx(
    packed_model, example, dynamic_shapes=({0: "batch", 1: "seq"}, {0: "batch"})
)
for lens in ([4, 9, 2], [1, 1, 1], [12, 5, 8]):
    inputs = (torch.randn(3, 12, 8), torch.tensor(lens))
    report = validate(packed_onx, packed_model, inputs, atol=1e-5)
    assert report.ok, report
    print(
        f"lengths {lens}: output {tuple(packed_model(*inputs)[0].shape)}, max difference "
        f"{report.max_abs:.1e}"
    )
