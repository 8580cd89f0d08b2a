"""The generate column of the supported-models page: fx2onnx.generate vs transformers on zoo rows."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from fx2onnx.zoo.report import page_text  # noqa: E402
from fx2onnx.zoo.architectures import run_row  # noqa: E402


def _row(name, generate):
    return dict(architecture=name, kind="causal", exporter="to_onnx", cache=True, success=True, step=None,
                error=None, max_abs=1e-6, time=1.0, generate=generate)


# gemma2: sliding layers beside full ones; gptj: its new tokens hold its eos token (2), no stop;
# mamba: recurrent states (convolution, SSM) starting at zero, bamba: the same beside attention layers
@pytest.mark.parametrize("name", ["gemma2", "gptj", "mamba", "bamba"])
@pytest.mark.slow
def test_zoo_row_generates_like_transformers(name):
    row = run_row(name, "to_onnx", True)
    assert row["success"], row
    generate = row["generate"]
    assert generate == dict(new_tokens=20, matched=40, equal=True, first_difference=None, error=None)
    # no generation without a cache or with the other exporter
    assert "generate" not in run_row(name, "to_onnx", False)


def test_page_lists_generation_differences():
    rows = [
        _row("llama", dict(new_tokens=20, matched=40, equal=True, first_difference=None, error=None)),
        _row("olmo", dict(new_tokens=20, matched=31, equal=False, first_difference=11, error=None)),
        _row("mamba", dict(new_tokens=20, matched=0, equal=False, first_difference=None,
                           error="fx2onnx.generate: ValueError: cache_params")),
        _row("bart", dict(new_tokens=20, matched=38, equal=False, first_difference=19, error=None,
                          eager_loop_equal=True, cause="generate adds forced_eos_token_id=2")),
    ]
    no_generate = dict(_row("qwen2", None))
    no_generate.pop("generate")
    text = page_text(rows + [no_generate], {}, [])
    assert "1 of the 4 decoders compared generate the same tokens:" in text
    assert "1 other decoders whose cache row matches were computed before the column existed" in text
    assert "* ``olmo``: 31/40 new tokens equal, the first difference at new token 11" in text
    assert "* ``mamba``: fx2onnx.generate: ValueError: cache\\_params" in text
    assert ("* ``bart``: 38/40 new tokens equal, the first difference at new token 19; the tokens of a greedy "
            "loop on the eager forward: generate adds forced\\_eos\\_token\\_id=2") in text
    # a failing cell links to the section saying why
    assert "✔ 40/40" in text and ":ref:`✘ 31/40 <mdl-generation>`" in text and ":ref:`✘ error <mdl-generation>`" in text
    assert ".. _mdl-generation:" in text


# bart (BartForCausalLM): its generation config forces the eos token at the last step;
# roberta: generate feeds position_ids from 0, its forward counts from padding_idx + 1 without them
@pytest.mark.parametrize(("name", "cause"), [("bart", "forced_eos_token_id=2"), ("roberta", "position_ids from 0")])
@pytest.mark.slow
def test_difference_explained_by_an_eager_greedy_loop(name, cause):
    row = run_row(name, "to_onnx", True)
    assert row["success"], row
    generate = row["generate"]
    assert not generate["equal"] and generate["eager_loop_equal"] is True and cause in generate["cause"], generate
