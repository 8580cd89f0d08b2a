"""A constant the user declared in ``dynamic_shapes`` (a flag given ``None``, a scalar given
``Dim.STATIC``) is recorded in the metadata and checked by validate, but not warned about."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from torch.export import Dim

import fx2onnx
from fx2onnx.frozen import METADATA_KEY, FrozenInputError, FrozenInputWarning


def _frozen(onx) -> dict:
    return json.loads({p.key: p.value for p in onx.metadata_props}[METADATA_KEY])


class Scaled(torch.nn.Module):
    def forward(self, x, flag: bool = True, n: int = 3, mode: str = "sum"):
        y = x * n if flag else x
        return y.sum(-1) if mode == "sum" else y.mean(-1)


def _no_frozen_warning(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("error", FrozenInputWarning)
        return fn()


def test_flags_given_none_are_not_warned_about():
    x = torch.randn(2, 3)
    ds = {"x": {0: "batch"}, "flag": None, "n": Dim.STATIC, "mode": None}
    onx = _no_frozen_warning(lambda: fx2onnx.to_onnx(Scaled(), (x, False, 3, "mean"), dynamic_shapes=ds))
    assert _frozen(onx) == {
        "flag": {"kind": "bool", "value": False, "declared_static": True},
        "n": {"kind": "int", "value": 3, "declared_static": True},
        "mode": {"kind": "str", "value": "mean", "declared_static": True},
    }
    assert fx2onnx.validate(onx, Scaled(), (torch.randn(5, 3), False, 3, "mean")).ok
    # still checked: another value is refused
    with pytest.raises(FrozenInputError, match=r"'flag'.*False.*True"):
        fx2onnx.validate(onx, Scaled(), (torch.randn(5, 3), True, 3, "mean"))


def test_constants_the_user_did_not_declare_are_warned_about():
    x = torch.randn(2, 3)
    # an int given None: it could be dynamic (Dim.DYNAMIC), the warning says how
    with pytest.warns(FrozenInputWarning, match=r"'n' to 3.*Dim.DYNAMIC.*Dim.STATIC") as record:
        onx = fx2onnx.to_onnx(Scaled(), (x, True, 3, "sum"), dynamic_shapes=({0: "batch"}, None, None, None))
    warned = " ".join(str(w.message) for w in record if issubclass(w.category, FrozenInputWarning))
    assert "'flag'" not in warned and "'mode'" not in warned
    assert "declared_static" not in _frozen(onx)["n"]
    # no dynamic_shapes at all: the user said nothing about any input
    with pytest.warns(FrozenInputWarning) as record:
        onx = fx2onnx.to_onnx(Scaled(), (x, True, 3, "sum"))
    warned = " ".join(str(w.message) for w in record if issubclass(w.category, FrozenInputWarning))
    assert "'flag'" in warned and "'n'" in warned and "'mode'" in warned
    assert not any(entry.get("declared_static") for entry in _frozen(onx).values())


@pytest.mark.slow
def test_transformers_flag_use_cache():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    )
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(3, 64, (2, 5), generator=torch.Generator().manual_seed(0))
    kwargs = {"input_ids": ids, "use_cache": False}
    ds = {"input_ids": {0: "batch", 1: "seq"}, "use_cache": None}
    onx = _no_frozen_warning(lambda: fx2onnx.to_onnx(model, (), kwargs, dynamic_shapes=ds))
    frozen = _frozen(onx)
    assert frozen["use_cache"] == {"kind": "bool", "value": False, "declared_static": True}
    ids2 = torch.randint(3, 64, (3, 7), generator=torch.Generator().manual_seed(1))
    report = fx2onnx.validate(onx, model, (), {"input_ids": ids2, "use_cache": False})
    assert report.ok, report
