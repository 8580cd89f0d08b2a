"""A failed check names the weights transformers' from_pretrained changes after reading them (fx2onnx.weights.loading_changes)."""

import torch
import transformers

from fx2onnx.deploy.check import eager_float32
from fx2onnx.deploy.result import FolderExport
from fx2onnx.weights.loading_changes import weights_changed_on_loading


def test_funnel_padding_row_zeroed_after_loading_is_named(tmp_path):
    config = transformers.FunnelConfig(vocab_size=50, block_sizes=[1, 1], d_model=16, n_head=2, d_head=8, d_inner=32,
                                       pad_token_id=0, num_decoder_layers=1)
    model = transformers.FunnelForMaskedLM(config).eval()
    with torch.no_grad():  # a checkpoint whose padding row is not zero (random weights, or a converted one)
        model.funnel.embeddings.word_embeddings.weight[0].fill_(0.5)
    model.save_pretrained(tmp_path)
    changes = weights_changed_on_loading(tmp_path, eager_float32(str(tmp_path)))
    assert [name for name, _ in changes] == ["funnel.embeddings.word_embeddings.weight"]
    assert changes[0][1] == 0.5
    with torch.no_grad():
        model.funnel.embeddings.word_embeddings.weight[0].zero_()
    model.save_pretrained(tmp_path)
    assert weights_changed_on_loading(tmp_path, eager_float32(str(tmp_path))) == []


def test_the_failed_export_line_says_it():
    result = FolderExport("out", "fill-mask", torch.float32, [], 0, 1.0, 0, [], None, written=False,
                          loading_changes=[("embeddings.weight", 0.5)])
    assert str(result).startswith("nothing written at out: the check against eager failed")
    assert "from_pretrained changes 1 weight(s) after reading them (embeddings.weight by 0.5)" in str(result)
