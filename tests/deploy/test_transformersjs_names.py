"""The file names transformers.js selects by dtype, and what a folder tells it (no export: milliseconds)."""

from __future__ import annotations

import json

from fx2onnx.deploy.transformersjs import (
    transformersjs_dtype,
    transformersjs_refusal,
    variant_file,
    write_transformersjs_config,
)


def test_variant_names_follow_transformersjs_suffixes():
    assert variant_file("onnx/model.onnx", None, "torch.float32") == "onnx/model.onnx"
    assert variant_file("onnx/model.onnx", "int4", "torch.float32") == "onnx/model_q4.onnx"
    assert variant_file("onnx/model.onnx", "int8", "torch.float32") == "onnx/model_quantized.onnx"
    assert variant_file("onnx/model.onnx", None, "torch.float16") == "onnx/model_fp16.onnx"
    assert variant_file("onnx/decoder_model_merged.onnx", "int4", "torch.float16") == \
        "onnx/decoder_model_merged_q4f16.onnx"
    # bfloat16: no file transformers.js selects, the name is kept and the export says why in one line
    assert variant_file("onnx/model.onnx", None, "torch.bfloat16") == "onnx/model.onnx"
    assert transformersjs_dtype(None, "torch.bfloat16") is None
    assert "bfloat16" in transformersjs_refusal(None, "torch.bfloat16")
    assert transformersjs_refusal("int4", "torch.float32") is None


def test_config_names_the_dtype_and_the_weights(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "t5"}))
    write_transformersjs_config(tmp_path, "onnx/encoder_model_q4.onnx", True, "q4")
    write_transformersjs_config(tmp_path, "onnx/decoder_model_merged_q4.onnx", True, "q4")
    block = json.loads((tmp_path / "config.json").read_text())["transformers.js_config"]
    assert block == {"use_external_data_format": {"encoder_model_q4.onnx": 1, "decoder_model_merged_q4.onnx": 1},
                     "dtype": "q4"}


def test_qwen2_vl_text_sizes_where_transformersjs_reads_them(tmp_path):
    # transformers.js sizes Qwen2-VL's cache from the top of config.json (transformers 4's layout); transformers 5
    # writes them in text_config only: they are copied up, and transformers reads the same configuration
    text = {"num_hidden_layers": 2, "num_key_value_heads": 2, "num_attention_heads": 4, "hidden_size": 64}
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2_vl", "text_config": text}))
    write_transformersjs_config(tmp_path, "onnx/decoder_model_merged.onnx", True)
    config = json.loads((tmp_path / "config.json").read_text())
    assert {k: config[k] for k in text} == text
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llava", "text_config": text}))
    write_transformersjs_config(tmp_path, "onnx/decoder_model_merged.onnx", True)
    assert "hidden_size" not in json.loads((tmp_path / "config.json").read_text())
