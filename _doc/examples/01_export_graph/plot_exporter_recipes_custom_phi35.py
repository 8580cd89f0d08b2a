"""
.. _l-plot-exporter-recipes-custom-phi35:

Export a phi-3.5-like model piece by piece
==========================================

A tiny model with the architecture of Phi-3.5 (:epkg:`transformers`'
``Phi3Config``: hidden size 64, 2 layers, 4 heads, a vocabulary of 100 tokens,
random weights) in which one submodule calls an operator the converter does
not know. The model fails to convert; :func:`fx2onnx.export_report` exports
every submodule on its own and points at the one to fix.

The model and the injected operator
-----------------------------------

The activation of the second layer is replaced by a custom operator
``phi35demo::fast_silu``, the way a model may call an optimized kernel.
torch.export captures it (it has a fake implementation), the ONNX converter
has no converter for it.
"""

import pandas
import torch

import fx2onnx
from fx2onnx.inspect.report import deepest_failures
from fx2onnx.zoo import get_tiny_model


@torch.library.custom_op("phi35demo::fast_silu", mutates_args=())
def fast_silu(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(x)


@fast_silu.register_fake
def _(x):
    return torch.empty_like(x)


class FastSiLU(torch.nn.Module):
    def forward(self, x):
        return fast_silu(x)


tiny = get_tiny_model(
    "phi3",
    with_cache=True,
    num_hidden_layers=2,
    hidden_size=64,
    intermediate_size=128,
    num_attention_heads=4,
    num_key_value_heads=4,
    vocab_size=100,
    seed=0,
)
model = tiny.model
model.model.layers[1].mlp.activation_fn = FastSiLU()
sizes = ["hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"]
print(type(model.config).__name__, {k: getattr(model.config, k) for k in sizes})
print({k: tuple(getattr(v, "shape", ())) or type(v).__name__ for k, v in tiny.inputs.items()})

# %%
# The report
# ----------
#
# The model is run once, every submodule records its inputs, then each one is
# exported on its own inside ``torch_export_patches`` (``patches=True``), which
# registers the cache class for torch.export. Linear, Dropout and Embedding
# layers always export: they are skipped to save time.

report = fx2onnx.export_report(
    model,
    (),
    tiny.inputs,
    dynamic_shapes=tiny.dynamic_shapes,
    patches=True,
    skip_classes=(torch.nn.Linear, torch.nn.Dropout, torch.nn.Embedding),
    as_frame=True,
)
pandas.set_option("display.width", 200)
pandas.set_option("display.max_columns", 20)
# the model itself is the row "<model>"; "-": nothing measured
shown = report.replace({"path": {"": "<model>"}})[
    ["path", "class", "status", "capture", "conversion", "validation", "max_abs"]
]
print(shown.to_string(index=False, na_rep="-"))

# %%
# Five rows fail, the activation and the four modules containing it. The
# innermost one is the culprit, its error names the operator.

culprits = deepest_failures(report.to_dict("records"))
error = report.set_index("path").loc[culprits[0], "error"]
print("culprit:", culprits, "\nerror:", error)
assert culprits == ["model.layers.1.mlp.activation_fn"]
assert "phi35demo" in error and "fast_silu" in error
assert set(report.loc[report["status"] != "OK", "path"]) == {
    "",
    "model",
    "model.layers.1",
    "model.layers.1.mlp",
    "model.layers.1.mlp.activation_fn",
}
assert (report.loc[report["status"] != "OK", "status"] == "FAIL conversion").all()
ok = report[report["status"] == "OK"]
assert len(ok) == len(report) - 5 and (ok["max_abs"] < 1e-4).all()
print(f"{len(ok)}/{len(report)} submodules export and match eager")

# %%
# Each submodule's status, by depth in the model: the failure goes up from the
# activation to the root.

depth = report["path"].map(lambda p: 0 if p == "" else p.count(".") + 1)
counts = pandas.crosstab(depth, report["status"])
ax = counts.plot.barh(
    stacked=True, figsize=(7, 3.5), color={"OK": "#55a868", "FAIL conversion": "#c44e52"}
)
ax.set_xlabel("submodules")
ax.set_ylabel("depth (0: the whole model)")
ax.set_title("export_report of a tiny Phi-3.5 with one unknown operator")
ax.figure.tight_layout()
assert counts.loc[0, "FAIL conversion"] == 1

# %%
# The fix: a converter for the operator
# -------------------------------------
#
# A :class:`fx2onnx.Dispatcher` gives the converter; the whole model now
# exports, and the ONNX model matches eager on the second set of inputs
# (other batch size, sequence and cache lengths).


def convert_fast_silu(ctx, node, x):
    return ctx.op.Mul(x, ctx.op.Sigmoid(x))


dispatcher = fx2onnx.Dispatcher({"phi35demo::fast_silu": convert_fast_silu})
with fx2onnx.torch_export_patches(patch_transformers=True):
    onx = fx2onnx.to_onnx(
        model, (), tiny.inputs, dynamic_shapes=tiny.dynamic_shapes, dispatcher=dispatcher
    )
for name, inputs in [("first", tiny.inputs), ("second", tiny.inputs2)]:
    check = fx2onnx.validate(onx, model, (), inputs)
    print(f"{name} input set: {check}")
    assert check.ok, check

# %%
# The fixed model generates what transformers' greedy ``generate`` does
# (:func:`fx2onnx.generate`, the cache kept in onnxruntime between the steps).

model.generation_config.eos_token_id = None  # 10 new tokens, no early stop
prompt = torch.tensor([[11, 42, 7, 64]])
expected = model.generate(
    prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=10, pad_token_id=0
)
assert torch.equal(fx2onnx.generate(onx, prompt, max_new_tokens=10), expected), expected
