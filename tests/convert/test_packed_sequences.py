"""Packed sequences (pack_padded_sequence -> recurrent layer -> pad_packed_sequence) exported with the lengths as an input."""

from __future__ import annotations

import pytest
import torch
import fx2onnx
from fx2onnx import validate
from helpers import check_export
from helpers import seeded_randn as _x
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence


class Packed(nn.Module):
    """Padded batch -> packed -> ``rnn`` -> padded (cut at the longest length), the last hidden state."""

    def __init__(self, rnn: nn.Module, enforce_sorted: bool = False):
        super().__init__()
        self.rnn, self.enforce_sorted = rnn, enforce_sorted

    def forward(self, x, lengths):
        packed = pack_padded_sequence(x, lengths, batch_first=self.rnn.batch_first, enforce_sorted=self.enforce_sorted)
        out, hidden = self.rnn(packed)
        padded, out_lengths = pad_packed_sequence(out, batch_first=self.rnn.batch_first)
        return padded, (hidden[0] if isinstance(hidden, tuple) else hidden), out_lengths


LAYERS = {  # (layer, dtype): the first ones run ONNX's node with sequence_lens, the last ones a Scan
    "lstm": (lambda: nn.LSTM(4, 5, batch_first=True), torch.float32),
    "lstm_2layers_bidirectional": (lambda: nn.LSTM(4, 5, 2, batch_first=True, bidirectional=True), torch.float32),
    "gru_bidirectional_seq_first": (lambda: nn.GRU(4, 5, bidirectional=True), torch.float32),
    "rnn_relu_2layers": (lambda: nn.RNN(4, 5, 2, nonlinearity="relu", batch_first=True), torch.float32),
    "lstm_projection_bidirectional": (lambda: nn.LSTM(4, 5, 2, proj_size=3, bidirectional=True), torch.float32),
    "gru_float64_bidirectional": (lambda: nn.GRU(4, 5, 2, batch_first=True, bidirectional=True), torch.float64),
}


def _batch(batch: int, steps: int, lengths: list[int], batch_first: bool, dtype: torch.dtype, seed: int):
    x = _x(batch, steps, 4, seed=seed).to(dtype)
    return (x if batch_first else x.transpose(0, 1).contiguous()), torch.tensor(lengths)


#: the fast tier runs one layer of each kind (ONNX's node, a Scan); the others are in the slow tier
FAST_LAYERS = {"lstm", "lstm_projection_bidirectional"}


@pytest.mark.parametrize(
    "name", [name if name in FAST_LAYERS else pytest.param(name, marks=pytest.mark.slow) for name in LAYERS]
)
def test_packed_sequence_layers(name):
    torch.manual_seed(0)
    make, dtype = LAYERS[name]
    model = Packed(make().to(dtype)).eval()
    first = model.rnn.batch_first
    ds = ({0: "batch", 1: "seq"} if first else {0: "seq", 1: "batch"}, {0: "batch"})
    atol = 1e-12 if dtype == torch.float64 else 1e-5
    # unsorted lengths; the second batch's longest sequence (5) is shorter than its padding (8): cut there
    args = _batch(3, 6, [4, 6, 2], first, dtype, 0)
    args2 = _batch(4, 8, [1, 5, 3, 5], first, dtype, 1)
    onx = check_export(model, args, dynamic_shapes=ds, inputs2=(args2, None), atol=atol)
    report = validate(onx, model, _batch(1, 3, [3], first, dtype, 2), atol=atol)
    assert report.ok, report
    kinds = {n.op_type for n in onx.graph.node}
    assert ("Scan" in kinds) == (name.startswith(("lstm_projection", "gru_float64")))
    assert onx.graph.input[1].type.tensor_type.shape.dim[0].dim_param == "batch"


def test_packed_sequence_total_length_states_and_sorted():
    """``total_length`` longer than the padding, ``padding_value``, initial states, ``enforce_sorted=True``."""

    class WithStates(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(4, 6)

        def forward(self, x, lengths, h0, c0):
            out, (h, c) = self.lstm(nn.utils.rnn.pack_padded_sequence(x, lengths), (h0, c0))
            out, _ = nn.utils.rnn.pad_packed_sequence(out, total_length=x.shape[0] + 2, padding_value=-1.0)
            return out, h, c

    torch.manual_seed(0)
    args = (_x(7, 3, 4), torch.tensor([7, 5, 2]), _x(1, 3, 6, seed=1), _x(1, 3, 6, seed=2))
    args2 = (_x(4, 2, 4, seed=3), torch.tensor([4, 1]), _x(1, 2, 6, seed=4), _x(1, 2, 6, seed=5))
    ds = ({0: "seq", 1: "batch"}, {0: "batch"}, {1: "batch"}, {1: "batch"})
    onx = check_export(WithStates().eval(), args, dynamic_shapes=ds, inputs2=(args2, None))
    assert "LSTM" in {n.op_type for n in onx.graph.node}


@pytest.mark.slow
def test_packed_sequence_data_transformed_between():
    """A layer applied to ``packed.data`` between two recurrent layers keeps the pack usable."""

    class Stacked(nn.Module):
        def __init__(self):
            super().__init__()
            self.gru, self.fc, self.rnn = nn.GRU(4, 5, batch_first=True), nn.Linear(5, 3), nn.RNN(3, 2, batch_first=True)

        def forward(self, x, lengths):
            y, _ = self.gru(pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False))
            y = PackedSequence(self.fc(y.data).relu(), y.batch_sizes, y.sorted_indices, y.unsorted_indices)
            z, h = self.rnn(y)
            return pad_packed_sequence(z, batch_first=True)[0], h

    torch.manual_seed(0)
    args, args2 = (_x(3, 6, 4), torch.tensor([2, 6, 3])), (_x(2, 5, 4, seed=1), torch.tensor([3, 1]))
    check_export(Stacked().eval(), args, dynamic_shapes=({0: "batch", 1: "seq"}, {0: "batch"}), inputs2=(args2, None))


@pytest.mark.filterwarnings("ignore:The tensor attributes")
@pytest.mark.slow
def test_packed_sequence_capture_restores_torch():
    """torch's functions are back after the capture, and the program's operators run eagerly like torch."""
    vf_pack, lstm_forward = torch._VF.__dict__.get("_pack_padded_sequence"), nn.LSTM.forward
    torch.manual_seed(0)
    model = Packed(nn.LSTM(4, 5, batch_first=True, bidirectional=True)).eval()
    args = (_x(3, 6, 4), torch.tensor([4, 6, 2]))
    from fx2onnx.convert.packed_sequences import packed_sequence_capture

    with packed_sequence_capture():
        program = torch.export.export(model, args)
    assert torch._VF.__dict__.get("_pack_padded_sequence") is vf_pack and nn.LSTM.forward is lstm_forward
    assert "fx2onnx.packed_lstm" in str(program.graph)
    for got, expected in zip(program.module()(*args), model(*args)):
        torch.testing.assert_close(got, expected)
    fx2onnx.to_onnx(model, args)
    assert torch._VF.__dict__.get("_pack_padded_sequence") is vf_pack and nn.LSTM.forward is lstm_forward
    packed = pack_padded_sequence(*args, batch_first=True, enforce_sorted=False)
    assert packed.data.shape == (12, 4)  # torch's own packing outside
