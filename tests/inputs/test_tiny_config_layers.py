"""The tiny configurations of the folder sweep hold for any number of layers: the per-layer lists an override
writes for two layers repeat periodically, a read-only ``num_hidden_layers`` sets the decoder's count, and the
test folder writer keeps a ``bos_token_id`` a configuration requires."""

from __future__ import annotations

from fx2onnx.inputs.discover import Architecture, _small_layer_types, tiny_config
from fx2onnx.weights.repeat_layers import layer_stack
from fx2onnx.testing.tokenizer import write_checkpoint_folder


def _arch(name: str, config: str, model: str) -> Architecture:
    return Architecture(name=name, kind="causal", config_class_name=config, model_class_name=model)


def test_layer_lists_repeat_to_the_number_of_layers():
    lfm2_moe = tiny_config(_arch("lfm2_moe", "Lfm2MoeConfig", "Lfm2MoeForCausalLM"), num_hidden_layers=6)
    assert lfm2_moe.layer_types == ["conv", "full_attention"] * 3
    neo = tiny_config(_arch("gpt_neo", "GPTNeoConfig", "GPTNeoForCausalLM"), num_hidden_layers=6)
    assert neo.attention_layers == ["global", "local"] * 3
    # read-only: the sum of the encoder's and the decoder's counts
    prophetnet = tiny_config(_arch("prophetnet", "ProphetNetConfig", "ProphetNetForCausalLM"), num_hidden_layers=6)
    assert prophetnet.num_decoder_layers == 6


def test_a_layer_pattern_repeats_so_that_layers_stamp():
    # a period fitting three times is kept; a longer one becomes one layer of each kind, in their order
    assert _small_layer_types(["a", "b", "a", "b", "a", "b", "a", "b"], 6) == ["a", "b"] * 3
    assert _small_layer_types(["s"] * 5 + ["f"] + ["s"] * 5 + ["f"] + ["s", "s"], 6) == ["s", "f"] * 3
    assert _small_layer_types(["c", "f", "s", "c", "s", "c"], 6) == ["c", "f", "s"] * 2
    assert _small_layer_types(["s"] * 5 + ["f"], 2) == ["s", "f"]
    # Gemma 3's five sliding layers for one global: six tiny layers in three periods, found by the stamping
    import torch

    gemma3 = tiny_config(_arch("gemma3_text", "Gemma3TextConfig", "Gemma3ForCausalLM"), num_hidden_layers=6)
    assert gemma3.layer_types == ["sliding_attention", "full_attention"] * 3
    with torch.device("meta"):
        model = _arch("gemma3_text", "Gemma3TextConfig", "Gemma3ForCausalLM").model_class()(gemma3)
    assert layer_stack(model, gemma3).period == 2


def test_a_required_bos_token_id_is_the_tokenizer_s(tmp_path):
    config = tiny_config(_arch("modernbert-decoder", "ModernBertDecoderConfig", "ModernBertDecoderForCausalLM"),
                         num_hidden_layers=1)
    config.architectures = ["ModernBertDecoderForCausalLM"]
    write_checkpoint_folder(config, tmp_path, dtype="float32")
    assert isinstance(config.bos_token_id, int) and config.bos_token_id < config.vocab_size


def test_zamba_s_tiny_task_config_is_tiny():
    # the generic shortening of its 76 layer types left 2 for 4 layers: the values were refused and the 7B default
    # built (14 GB); its types come from the period: two hybrid layers sharing the transformer
    from fx2onnx.inputs.tasks import TaskArchitecture, tiny_task_config

    config = tiny_task_config(TaskArchitecture("text-classification", "zamba", "ZambaForSequenceClassification"))
    assert config.hidden_size == 64 and config.num_hidden_layers == 4
    assert config.layers_block_type == ["linear_attention", "linear_attention", "hybrid", "hybrid"]
