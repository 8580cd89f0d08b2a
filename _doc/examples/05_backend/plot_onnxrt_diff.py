"""
.. _l-plot-onnxrt-diff:

The backend's forward and backward ONNX graphs, compared result by result
=========================================================================

When :func:`torch.compile` trains a model with the backend
:func:`fx2onnx.backend.make_onnxruntime_backend`, two ONNX models run on
:epkg:`onnxruntime`: the forward graph and the backward graph aot_autograd built.
If a gradient is wrong, which node is it? :func:`fx2onnx.compare_onnx_execution`
runs two models keeping every intermediate result and aligns them.
This example dumps both graphs of a tiny Llama (one training step) and compares

* the forward graph with the ONNX model ``torch.onnx.export`` builds from the same
  aten graph (another set of converters),
* the backward graph with the one the backend builds with ``optimize=True``
  (constant folding and onnxscript's rewrite rules).

Every pair of aligned results must match within ``atol=1e-4``.

Record the graphs and their inputs
----------------------------------

The backend calls one :class:`fx2onnx.backend.GraphRunner` per graph. A subclass
of :class:`fx2onnx.backend.OrtBackend` wraps each runner to keep the first inputs it
receives (weights, token ids, then the tensors saved for the backward): the feeds
of the comparisons.
"""

import copy
import logging
import os
import tempfile
import textwrap
import warnings

import matplotlib.pyplot as plt
import onnx
import onnx_ir as ir
import torch

import fx2onnx
from fx2onnx.backend import OrtBackend, make_onnxruntime_backend
from fx2onnx.zoo import get_tiny_model


class RecordingBackend(OrtBackend):
    def __init__(self, **kwargs):
        super().__init__(make_onnxruntime_backend(**kwargs).options)
        self.feeds = {}

    def compile_graph(self, gm, example_inputs, kind="forward"):
        runner = super().compile_graph(gm, example_inputs, kind)

        def call(args):
            meta = runner.model.meta
            # a tensor saved transposed for the backward is fed as stored: the model takes it permuted
            perms = dict(meta.get("input_perms", {}))
            feeds = {
                n: (args[i].permute(perms[i]) if i in perms else args[i]).detach().numpy().copy()
                for n, i in zip(meta["input_names"], meta["input_indices"])
            }
            self.feeds.setdefault(runner.name, feeds)
            return runner(args)

        call._boxed_call = True  # aot_autograd gives the arguments as one list
        return call


tiny = get_tiny_model("llama")


def one_step(backend):
    torch._dynamo.reset()  # forget what dynamo compiled before (other examples, other backends)
    compiled, ids = (
        torch.compile(copy.deepcopy(tiny.model).train(), backend=backend),
        tiny.inputs["input_ids"],
    )
    compiled(input_ids=ids, labels=ids).loss.backward()
    return {r.name: r for r in backend.runners}


raw_backend = RecordingBackend()
with fx2onnx.dump_onnx("llama", folder=tempfile.mkdtemp(prefix="onnxrt_diff_")) as dumped:
    raw = one_step(raw_backend)
optimized = one_step(RecordingBackend(optimize=True))
print([os.path.basename(p) for p in dumped])
assert sorted(raw) == sorted(optimized) == ["g0_forward", "g1_backward"]
for name in raw:
    print(f"{name}: {raw[name].node_count} nodes, optimized {optimized[name].node_count} nodes")

# %%
# The forward graph against torch.onnx.export
# -------------------------------------------
#
# The runner keeps the aten graph (``runner.gm``) it converted:
# ``torch.onnx.export`` exports that same graph with the recorded inputs. Its
# inputs have other names, the comparison maps them by position. ``torch.onnx.export``
# folds what static shapes make constant (positions, mask indices): those results
# exist only in the backend's model, every result of the other one is found there,
# but the copies of the weights the graph returns unchanged.

warnings.filterwarnings("ignore")
logging.getLogger("torch.onnx").setLevel(logging.ERROR)


def wrapped(text: str) -> str:
    """The lines of a comparison's text wider than the page wrapped (the table's rows are narrower)."""
    return "\n".join(
        textwrap.fill(line, 110, subsequent_indent="    ") if len(line) > 120 else line
        for line in text.splitlines()
    )


forward_onnx = onnx.load(next(p for p in dumped if p.endswith("g0_forward_0.onnx")))
fw_feeds = raw_backend.feeds["g0_forward"]
fw_args = tuple(torch.from_numpy(fw_feeds[n]) for n in raw["g0_forward"].model.meta["input_names"])
other = torch.onnx.export(raw["g0_forward"].gm, fw_args, dynamo=True, verbose=False).model_proto
fw_diff = fx2onnx.compare_onnx_execution(forward_onnx, other, fw_feeds, atol=1e-4)
print(wrapped(fw_diff.summary()))
start = next(k for k, r in enumerate(fw_diff.rows) if r.op_type1 == "Softmax")
print(wrapped(fw_diff.to_text(start=start - 4, max_rows=8, show_values=False)))
assert fw_diff.first_divergence is None and fw_diff.count("diff") == 0
# the weights the forward graph returns as they are (saved for the backward pass) are handed
# back by the backend without any node; torch.onnx.export copies each with an Identity
passthrough = [r for r in fw_diff.rows if r.status == "only2"]
print(f"inputs returned as they are: {len(passthrough)}")
assert all(r.op_type2 == "Identity" for r in passthrough)
assert fw_diff.count("same") >= len(other.graph.node) - len(passthrough)
# the loss, first output of both models, is the same
loss_row = next(r for r in fw_diff.rows if r.name1 == forward_onnx.graph.output[0].name)
print(f"loss: {loss_row.name1} vs {loss_row.name2}, max abs diff {loss_row.max_abs_diff:.1e}")
assert loss_row.status == "same" and loss_row.max_abs_diff < 1e-5

# %%
# The backward graph, without and with optimization
# -------------------------------------------------
#
# Both backends received the same backward graph; the optimized model has fewer
# nodes. Every result of the optimized model is found in the raw one with the same
# values, and so are the gradients (the outputs).

bw_models = [ir.to_proto(backend["g1_backward"].model) for backend in (raw, optimized)]
bw_diff = fx2onnx.compare_onnx_execution(*bw_models, raw_backend.feeds["g1_backward"], atol=1e-4)
print(wrapped(bw_diff.summary()))
print(wrapped(bw_diff.to_text(start=len(bw_diff.rows) - 6, show_values=False)))
assert bw_diff.first_divergence is None and bw_diff.count("diff") == bw_diff.count("only2") == 0
paired = bw_diff.to_frame().query("status == 'same'")
print(f"max abs diff over {len(paired)} paired results: {paired.max_abs_diff.max():.1e}")
assert paired.max_abs_diff.max() < 1e-4

# %%
# The alignment
# -------------
#
# Each point is a pair of aligned results; a result found in one model only is
# drawn at the top. A straight diagonal would mean the same nodes in both models.

fig, axes = plt.subplots(2, 1, figsize=(7.4, 7))  # stacked: the page's width
titles = ["forward: fx2onnx vs torch.onnx.export", "backward: raw vs optimized"]
for ax, title, diff in zip(axes, titles, [fw_diff, bw_diff]):
    frame = diff.to_frame()
    both, alone = frame[frame.status == "same"], frame[frame.status == "only1"]
    ax.plot(both.index1, both.index2, ".", label="same values")
    ax.plot(
        alone.index1,
        [frame.index2.max() + 5] * len(alone),
        "|",
        color="red",
        label="only in the first model",
    )
    ax.set_xlabel("result index, first model")
    ax.set_ylabel("result index, second model")
    ax.set_title(title)
    ax.legend()
fig.tight_layout()
