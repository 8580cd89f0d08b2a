"""Packed sequences in a capture: ``pack_padded_sequence`` -> ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` -> ``pad_packed_sequence``.

A packed sequence stores the valid time steps of a padded batch one after the other
(``data`` ``[sum(lengths), features]``) and how many sequences are still running at every
step (``batch_sizes``). Both sizes come from the values of ``lengths``: :func:`torch.export.export`
cannot trace them (``zeros(): argument 'size' ... got FakeTensor``), and neither
:func:`torch.onnx.export` nor a model with another batch could use them.

ONNX's ``LSTM`` / ``GRU`` / ``RNN`` take the padded batch and the lengths instead (``sequence_lens``):
each sequence stops at its own length, both directions. During the capture,
:func:`packed_sequence_capture` makes torch's functions keep that form:

* ``pack_padded_sequence`` (and ``pack_sequence``, which calls it) returns a
  :class:`~torch.nn.utils.rnn.PackedSequence` whose ``data`` is the padded batch, time first
  (``[steps, batch, features]``, sorted as torch sorts it), and whose ``batch_sizes`` are torch's
  (the number of sequences longer than each step, ``max(lengths)`` of them);
* the recurrent layers given such a pack run one operator, ``fx2onnx::packed_lstm`` or
  ``fx2onnx::packed_rnn``, on the padded batch and the lengths, converted into ONNX's node with
  ``sequence_lens``; the last hidden state of each sequence is the one at its own length, as torch's;
* ``pad_packed_sequence`` cuts the padded output at ``max(lengths)`` (or pads it to
  ``total_length``) and writes ``padding_value`` after each length, as torch does.

The sequences need not be sorted by length (``enforce_sorted=True`` with unsorted lengths raises
in torch; the exported model computes each sequence whatever the order). Outside the capture
torch's functions are untouched; the two operators also run eagerly (through torch's packed
kernels), so the exported program can be run and checked.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch
from torch.nn.utils.rnn import PackedSequence

_VF_FUNCTIONS = torch._C._VariableFunctions
# id(batch_sizes) -> (batch_sizes, lengths) for the packs made inside the capture
_PACKS: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}


def _sort_and_pack(x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """torch's packing of a padded batch ``[steps, batch, ...]``: ``(data, batch_sizes, order)``."""
    sorted_lengths, order = torch.sort(lengths.to("cpu", torch.int64), descending=True)
    data, batch_sizes = _VF_FUNCTIONS._pack_padded_sequence(x.index_select(1, order.to(x.device)), sorted_lengths, False)
    return data, batch_sizes, order


def _unpack(data: torch.Tensor, batch_sizes: torch.Tensor, order: torch.Tensor, steps: int) -> torch.Tensor:
    padded, _ = _VF_FUNCTIONS._pad_packed_sequence(data, batch_sizes, False, 0.0, steps)
    return padded.index_select(1, torch.argsort(order).to(padded.device))


@torch.library.custom_op("fx2onnx::packed_lstm", mutates_args=())
def packed_lstm(
    x: torch.Tensor,
    lengths: torch.Tensor,
    hx: list[torch.Tensor],
    params: list[torch.Tensor],
    has_biases: bool,
    num_layers: int,
    dropout: float,
    train: bool,
    bidirectional: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``nn.LSTM`` over a padded batch ``[steps, batch, features]`` whose sequence ``b`` stops at
    ``lengths[b]``: ``(output [steps, batch, directions * hidden] zero after each length, h_n, c_n)``."""
    data, batch_sizes, order = _sort_and_pack(x, lengths)
    hx = [h.index_select(1, order.to(h.device)) for h in hx]
    out, h, c = _VF_FUNCTIONS.lstm(data, batch_sizes, hx, params, has_biases, num_layers, dropout, train, bidirectional)
    back = torch.argsort(order).to(h.device)
    return _unpack(out, batch_sizes, order, x.shape[0]), h.index_select(1, back), c.index_select(1, back)


@packed_lstm.register_fake
def _packed_lstm_fake(x, lengths, hx, params, has_biases, num_layers, dropout, train, bidirectional):
    directions = 2 if bidirectional else 1
    out = x.new_empty((x.shape[0], x.shape[1], directions * hx[0].shape[2]))
    return out, hx[0].new_empty(hx[0].shape), hx[1].new_empty(hx[1].shape)


_RNN_KERNELS = {"GRU": "gru", "RNN_TANH": "rnn_tanh", "RNN_RELU": "rnn_relu"}


@torch.library.custom_op("fx2onnx::packed_rnn", mutates_args=())
def packed_rnn(
    mode: str,
    x: torch.Tensor,
    lengths: torch.Tensor,
    hx: torch.Tensor,
    params: list[torch.Tensor],
    has_biases: bool,
    num_layers: int,
    dropout: float,
    train: bool,
    bidirectional: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``nn.GRU`` (``mode="GRU"``) or ``nn.RNN`` (``"RNN_TANH"``, ``"RNN_RELU"``) over a padded batch,
    as :func:`packed_lstm`: ``(output, h_n)``."""
    data, batch_sizes, order = _sort_and_pack(x, lengths)
    kernel = getattr(_VF_FUNCTIONS, _RNN_KERNELS[mode])
    out, h = kernel(data, batch_sizes, hx.index_select(1, order.to(hx.device)), params, has_biases, num_layers, dropout, train, bidirectional)
    return _unpack(out, batch_sizes, order, x.shape[0]), h.index_select(1, torch.argsort(order).to(h.device))


@packed_rnn.register_fake
def _packed_rnn_fake(mode, x, lengths, hx, params, has_biases, num_layers, dropout, train, bidirectional):
    directions = 2 if bidirectional else 1
    return x.new_empty((x.shape[0], x.shape[1], directions * hx.shape[2])), hx.new_empty(hx.shape)


def _pack_padded(input: torch.Tensor, lengths: torch.Tensor, batch_first: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Stands for ``_VF._pack_padded_sequence``: the padded batch time first and torch's batch sizes."""
    padded = input.transpose(0, 1) if batch_first else input
    lengths = lengths.to(device=padded.device, dtype=torch.int64)
    # max(lengths) as ``steps - missing``: torch can then decide ``total_length < max(lengths)`` and the
    # narrowing of pad_packed_sequence (an unbacked maximum compared with a size cannot be decided)
    missing = (padded.shape[0] - lengths.max()).item()
    torch._check(missing >= 0)
    torch._check(missing <= padded.shape[0])
    steps = torch.arange(padded.shape[0] - missing, device=padded.device)
    batch_sizes = (lengths.unsqueeze(0) > steps.unsqueeze(1)).sum(dim=1).cpu()
    _PACKS[id(batch_sizes)] = (batch_sizes, lengths)
    return padded, batch_sizes


def _pad_packed(data, batch_sizes, batch_first, padding_value, total_length):
    """Stands for ``_VF._pad_packed_sequence`` on a pack of :func:`_pack_padded`."""
    lengths = _PACKS[id(batch_sizes)][1]
    steps = data.shape[0]
    if not torch.fx.experimental.symbolic_shapes.guard_or_false(total_length > steps):  # max(lengths) <= steps
        data = data.narrow(0, 0, total_length)
    else:
        data = torch.nn.functional.pad(data, [0, 0] * (data.dim() - 1) + [0, total_length - steps])
    valid = torch.arange(total_length, device=data.device).unsqueeze(1) < lengths.unsqueeze(0)
    valid = valid.reshape(*valid.shape, *([1] * (data.dim() - 2)))
    out = torch.where(valid, data, torch.full((), padding_value, dtype=data.dtype, device=data.device))
    return (out.transpose(0, 1) if batch_first else out), lengths.cpu()


def _is_capture_pack(input: Any) -> bool:
    return isinstance(input, PackedSequence) and id(input.batch_sizes) in _PACKS


def _initial_state(module: torch.nn.RNNBase, batch: Any, size: int, like: torch.Tensor) -> torch.Tensor:
    directions = 2 if module.bidirectional else 1
    return torch.zeros(module.num_layers * directions, batch, size, dtype=like.dtype, device=like.device)


def _packed_forward(original: Any) -> Any:
    def forward(self: torch.nn.RNNBase, input: Any, hx: Any = None) -> Any:
        if not _is_capture_pack(input):
            return original(self, input, hx)
        self._update_flat_weights()
        data, batch_sizes, sorted_indices, unsorted_indices = input
        lengths = _PACKS[id(batch_sizes)][1]
        args = (self._flat_weights, self.bias, self.num_layers, float(self.dropout), self.training, self.bidirectional)
        if self.mode == "LSTM":
            if hx is None:
                real = self.proj_size if self.proj_size > 0 else self.hidden_size
                hx = (_initial_state(self, data.shape[1], real, data), _initial_state(self, data.shape[1], self.hidden_size, data))
            else:
                hx = self.permute_hidden(hx, sorted_indices)
            out, h, c = torch.ops.fx2onnx.packed_lstm(data, lengths, list(hx), *args)
            hidden: Any = (h, c)
        else:
            hx = _initial_state(self, data.shape[1], self.hidden_size, data) if hx is None else self.permute_hidden(hx, sorted_indices)
            out, hidden = torch.ops.fx2onnx.packed_rnn(self.mode, data, lengths, hx, *args)
        return PackedSequence(out, batch_sizes, sorted_indices, unsorted_indices), self.permute_hidden(hidden, unsorted_indices)

    forward.__wrapped__ = original  # type: ignore[attr-defined]
    return forward


@contextlib.contextmanager
def packed_sequence_capture() -> Iterator[None]:
    """Inside, packed sequences keep the padded batch and the lengths (see the module's doc)."""
    vf = torch._VF
    saved_vf = {name: vf.__dict__.get(name) for name in ("_pack_padded_sequence", "_pad_packed_sequence")}
    classes = (torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN)
    saved_forward = {cls: cls.__dict__["forward"] for cls in classes}
    vf._pack_padded_sequence = _pack_padded
    vf._pad_packed_sequence = lambda data, batch_sizes, *rest: (
        _pad_packed(data, batch_sizes, *rest) if id(batch_sizes) in _PACKS else _VF_FUNCTIONS._pad_packed_sequence(data, batch_sizes, *rest)
    )
    for cls in classes:
        cls.forward = _packed_forward(saved_forward[cls])
    try:
        yield
    finally:
        for name, value in saved_vf.items():
            if value is None:
                vf.__dict__.pop(name, None)
            else:
                setattr(vf, name, value)
        for cls, forward in saved_forward.items():
            cls.forward = forward
        _PACKS.clear()
