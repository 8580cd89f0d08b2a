"""The cache read from the model for the decoders whose cache is not a plain ``DynamicCache``: an encoder used as
a decoder (its ``EncoderDecoderCache``: dynamic shapes nested as ``torch.export`` matches them) and a state-space
model (Mamba: the cache is its ``cache_params``, no mask nor positions), as the folder export builds them."""

from __future__ import annotations

import copy
import re

import pytest
import torch
import transformers
from torch.utils import _pytree as pytree

from fx2onnx.flatten import cache_flattening
from fx2onnx.inputs.folder_inputs import NoCacheDecoding, task_inputs
from fx2onnx.inputs.model_cache import cache_argument, decode_step_refusal, model_cache_inputs

KV = {0: "batch", 2: "past_seq"}


def _megatron():
    return transformers.MegatronBertConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                           num_attention_heads=2, vocab_size=99, is_decoder=True,
                                           max_position_embeddings=64, architectures=["MegatronBertForCausalLM"])


@pytest.mark.slow
def test_an_encoder_decoder_cache_nests_its_dynamic_shapes():
    inputs, _, shapes = model_cache_inputs(_megatron())
    assert type(inputs["past_key_values"]).__name__ == "EncoderDecoderCache"
    # [self-attention cache's tensors, cross-attention cache's tensors (none: no encoder)]: torch.export takes them
    assert shapes["past_key_values"] == [[KV] * 4, []]
    dynamic = pytree.tree_map(lambda x: torch.export.Dim.DYNAMIC if isinstance(x, str) else x, shapes)
    model = transformers.MegatronBertForCausalLM(_megatron()).eval()
    with cache_flattening(inputs["past_key_values"]):
        exported = torch.export.export(model, (), kwargs=copy.deepcopy(inputs), dynamic_shapes=dynamic,
                                       strict=False)
    # input_ids, attention_mask, position_ids and the self-attention cache's 4 tensors
    assert len(exported.graph_signature.user_inputs) == 3 + 4


def test_a_state_space_cache_is_its_cache_params():
    config = transformers.MambaConfig(hidden_size=32, state_size=8, num_hidden_layers=2, vocab_size=99,
                                      conv_kernel=4, expand=2, time_step_rank=8,
                                      architectures=["MambaForCausalLM"])
    assert cache_argument(transformers.MambaForCausalLM) == "cache_params"
    assert cache_argument(transformers.LlamaForCausalLM) == "past_key_values"
    inputs, inputs2, shapes = model_cache_inputs(config)
    assert sorted(inputs) == ["cache_params", "input_ids"]  # decoded without a mask nor positions
    assert shapes["input_ids"] == {0: "batch", 1: "seq"}
    assert all(spec == {0: "batch"} for spec in shapes["cache_params"])  # fixed-size states, batch dynamic
    model = transformers.MambaForCausalLM(config).eval()
    with torch.no_grad():
        logits = model(**copy.deepcopy(inputs2)).logits
    assert logits.shape == (3, 4, 99) and torch.isfinite(logits).all()


def test_a_model_without_a_cache_argument_is_refused_in_one_line():
    config = transformers.XLNetConfig(d_model=32, n_layer=1, n_head=2, d_inner=64, vocab_size=99,
                                      architectures=["XLNetLMHeadModel"])
    with pytest.raises(NoCacheDecoding, match=r"^XLNetLMHeadModel.forward takes its states as 'mems', not a "
                                              r"transformers cache .*cannot generate with a cache$") as refused:
        task_inputs(config, "text-generation", with_cache=True)
    assert "\n" not in str(refused.value)


@pytest.mark.slow  # three models' first imports and prefills
def test_a_model_not_decoding_new_tokens_from_its_cache_is_named_in_one_line():
    # ProphetNet's decoder takes one token at a time once it has a cache, CPM-Ant reads the whole sequence again at
    # every step: neither can be a folder's decoder (prompt then steps after a cache); a plain decoder can
    prophetnet = transformers.ProphetNetConfig(hidden_size=32, encoder_ffn_dim=64, decoder_ffn_dim=64,
                                               num_encoder_layers=1, num_decoder_layers=1, num_encoder_attention_heads=2,
                                               num_decoder_attention_heads=2, vocab_size=99, ngram=2,
                                               architectures=["ProphetNetForCausalLM"])
    assert re.match(r"^ProphetNetForCausalLM cannot run 3 new token\(s\) after its cache \(AssertionError: .*"
                    r"a folder's decoder needs it$", decode_step_refusal(prophetnet))
    cpmant = transformers.CpmAntConfig(hidden_size=32, dim_ff=64, dim_head=16, num_attention_heads=2,
                                       num_hidden_layers=1, vocab_size=99, prompt_length=4,
                                       architectures=["CpmAntForCausalLM"])
    assert decode_step_refusal(cpmant).startswith("CpmAntForCausalLM reads the whole sequence at every step")
    llama = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                     vocab_size=99, architectures=["LlamaForCausalLM"])
    assert decode_step_refusal(llama) is None


@pytest.mark.slow
def test_xlstm_cache_flattens_into_its_recurrent_states():
    # xLSTMCache is no transformers Cache: per layer a matrix, a normalizer and a stabilizer state
    config = transformers.xLSTMConfig(hidden_size=64, num_heads=4, num_blocks=2, num_hidden_layers=2, vocab_size=99,
                                      qk_dim_factor=1.0, chunk_size=16, architectures=["xLSTMForCausalLM"])
    inputs, inputs2, shapes = model_cache_inputs(config)
    assert sorted(inputs) == ["cache_params", "input_ids"]
    with cache_flattening(inputs["cache_params"]):
        keyed, _ = pytree.tree_flatten_with_path(inputs["cache_params"])
    assert [str(path[-1].key) for path, _ in keyed] == [f"recurrent_{l}_{i}" for l in range(2) for i in range(3)]
    model = transformers.xLSTMForCausalLM(config).eval()
    with torch.no_grad():
        logits = model(**copy.deepcopy(inputs2)).logits
    assert logits.shape == (3, 4, 99) and torch.isfinite(logits).all()
