"""The file names transformers.js selects by dtype, and what a folder tells it (no export: milliseconds)."""

from __future__ import annotations

import json

from fx2onnx.deploy.transformersjs import (
    folder_refusal,
    transformersjs_cache_refusal,
    transformersjs_config_json,
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


def test_config_written_as_transformersjs_reads_it():
    import transformers

    # Nemotron-H's layer kinds under transformers 4's names, which transformers 5 reads back as its own
    config = transformersjs_config_json({"model_type": "nemotron_h",
                                         "layers_block_type": ["linear_attention", "moe", "full_attention", "mlp"]})
    assert config["layers_block_type"] == ["mamba", "moe", "attention", "mlp"]
    assert transformers.NemotronHConfig(layers_block_type=config["layers_block_type"]).layers_block_type == \
        ["linear_attention", "moe", "full_attention", "mlp"]
    # multi_query, the default of GPTBigCode's and Falcon's configurations, left out: transformers.js would feed
    # one fused key_value per layer; transformers reads the same value back
    for model_type, cls in (("gpt_bigcode", transformers.GPTBigCodeConfig), ("falcon", transformers.FalconConfig)):
        config = transformersjs_config_json({"model_type": model_type, "multi_query": True})
        assert "multi_query" not in config and cls(**config).multi_query is True
        assert transformersjs_cache_refusal(config, ["past_key_values.0.key", "past_key_values.0.value"]) is None
    assert transformersjs_config_json({"model_type": "falcon", "multi_query": False})["multi_query"] is False
    assert "fused key_value" in transformersjs_cache_refusal({"model_type": "x", "multi_query": True},
                                                             ["past_key_values.0.key"])


def test_caches_transformersjs_does_not_feed_are_refused(tmp_path):
    kv = ["past_key_values.0.key", "past_key_values.0.value"]
    assert transformersjs_cache_refusal({"model_type": "llama"}, kv) is None
    assert transformersjs_cache_refusal({"model_type": "lfm2"}, ["past_conv.0", *kv]) is None
    assert "decoder-only mbart" in transformersjs_cache_refusal({"model_type": "mbart", "is_encoder_decoder": False},
                                                                kv)
    assert "past_key_values_indexer_keys_0" in transformersjs_cache_refusal(
        {"model_type": "glm_moe_dsa"}, [*kv, "past_key_values_indexer_keys_0"])
    assert "cca_time1" in transformersjs_cache_refusal({"model_type": "zaya"}, kv)
    # a refused decoder: the reason in fx2onnx.json, no block promising the folder to transformers.js
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "trocr"}))
    (tmp_path / "fx2onnx.json").write_text(json.dumps({"task": "text-generation",
                                                       "cache_pairs": {k: k.replace("past_key_values", "present")
                                                                       for k in kv}}))
    why = write_transformersjs_config(tmp_path, "onnx/model.onnx", True)
    assert "decoder-only trocr" in why
    assert folder_refusal(tmp_path) == why
    assert "transformers.js_config" not in json.loads((tmp_path / "config.json").read_text())
