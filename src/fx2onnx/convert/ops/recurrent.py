"""Recurrent layers: ``aten.lstm.input``, ``gru.input``, ``rnn_tanh.input``, ``rnn_relu.input``.

``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` reach the converter whole (the capture keeps their sequence
length symbolic, see :mod:`fx2onnx.convert.meta_kernels`). Each layer becomes ONNX's own ``LSTM`` /
``GRU`` / ``RNN`` (one node for both directions, gates reordered once at export) where onnxruntime
runs it, otherwise a ``Scan`` over the time steps written here: an LSTM with projections
(``proj_size > 0``, which ONNX's ``LSTM`` lacks) and float64 (onnxruntime's kernels refuse double).
The input projection of every step is one MatMul before the ``Scan``; the body multiplies the
state by the recurrent weights and applies the gates in torch's order (LSTM ``i, f, g, o``, GRU
``r, z, n`` with the reset gate applied after the recurrent product).
"""

from __future__ import annotations

import onnx_ir as ir
import torch

from .. import packed_sequences  # noqa: F401  (defines torch.ops.fx2onnx.packed_lstm / packed_rnn)
from ..builder import onnx_dtype
from ..registry import converter
from ._common import fake_of

aten = torch.ops.aten
I64 = torch.int64

# ONNX orders the gates differently from torch
_GATE_ORDER = {
    "LSTM": [0, 3, 1, 2],  # torch (i, f, g, o) -> ONNX (i, o, f, c)
    "GRU": [1, 0, 2],  # torch (r, z, n) -> ONNX (z, r, h)
    "RNN": [0],
}
_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
# dtypes onnxruntime's LSTM / GRU / RNN kernels compute (float16 and bfloat16 run in float32 through the
# converter's wider-type casts); the others go through the Scan
_ONNX_KERNEL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _reorder_gates(ctx, w, op_type: str, hidden: int):
    """The rows of a gates' weight or bias in ONNX's order: one Gather, folded with the weight at export."""
    order = _GATE_ORDER[op_type]
    if len(order) == 1:
        return w
    rows = [gate * hidden + i for gate in order for i in range(hidden)]
    return ctx.op.Gather(w, ctx.const(rows, I64), axis=0)


def _stack(ctx, values):
    zero = ctx.const([0], I64)
    parts = [ctx.op.Unsqueeze(v, zero) for v in values]
    return parts[0] if len(parts) == 1 else ctx.op.Concat(*parts, axis=0)


def _layer_onnx(ctx, op_type, seq, initial, weights, has_biases, hidden, bidirectional, activation, lengths=None):
    """One layer, both directions, as ONNX's node: ``(output [seq, batch, directions * hidden], h, c)``;
    ``lengths`` (int32 ``[batch]``): where each sequence stops."""
    ws, rs, bs = [], [], []
    for w_ih, w_hh, *biases in weights:
        ws.append(_reorder_gates(ctx, w_ih, op_type, hidden))
        rs.append(_reorder_gates(ctx, w_hh, op_type, hidden))
        if has_biases:
            bs.append(ctx.op.Concat(*[_reorder_gates(ctx, b, op_type, hidden) for b in biases[:2]], axis=0))
    attrs = dict(hidden_size=hidden, direction="bidirectional" if bidirectional else "forward")
    if op_type == "GRU":
        attrs["linear_before_reset"] = 1
    if op_type == "RNN":
        attrs["activations"] = [activation] * len(weights)
    n_out = 3 if op_type == "LSTM" else 2
    outs = getattr(ctx.op, op_type)(
        seq, _stack(ctx, ws), _stack(ctx, rs), _stack(ctx, bs) if bs else None, lengths, *initial, _outputs=n_out, **attrs
    )
    # Y: [seq, directions, batch, hidden] -> [seq, batch, directions * hidden]
    y = ctx.op.Transpose(outs[0], perm=[0, 2, 1, 3])
    return ctx.op.Reshape(y, ctx.const([0, 0, -1], I64)), outs[1], (outs[2] if op_type == "LSTM" else None)


def _step(c, op_type, activation, h, cell, xw, w_hh_t, b_hh, w_hr_t):
    """One time step inside the Scan body: the new hidden (and cell) state."""
    recurrent = c.op.MatMul(h, w_hh_t)
    if op_type == "RNN":
        return getattr(c.op, activation)(c.op.Add(xw, recurrent)), None
    if op_type == "GRU":  # n = tanh(x_n + r * (h W_hn + b_hn)): the reset gate after the recurrent product
        if b_hh is not None:
            recurrent = c.op.Add(recurrent, b_hh)
        xr, xz, xn = c.op.Split(xw, axis=-1, num_outputs=3, _outputs=3)
        hr, hz, hn = c.op.Split(recurrent, axis=-1, num_outputs=3, _outputs=3)
        r, z = c.op.Sigmoid(c.op.Add(xr, hr)), c.op.Sigmoid(c.op.Add(xz, hz))
        n = c.op.Tanh(c.op.Add(xn, c.op.Mul(r, hn)))
        return c.op.Add(n, c.op.Mul(z, c.op.Sub(h, n))), None
    i, f, g, o = c.op.Split(c.op.Add(xw, recurrent), axis=-1, num_outputs=4, _outputs=4)
    cell = c.op.Add(c.op.Mul(c.op.Sigmoid(f), cell), c.op.Mul(c.op.Sigmoid(i), c.op.Tanh(g)))
    h = c.op.Mul(c.op.Sigmoid(o), c.op.Tanh(cell))
    if w_hr_t is not None:
        h = c.op.MatMul(h, w_hr_t)
    return h, cell


def _direction_scan(ctx, node, op_type, seq, initial, weights, has_biases, reverse, activation, dtype, lengths=None):
    """One layer in one direction as a ``Scan``: ``(output [seq, batch, hidden], h, c)``.

    With ``lengths`` (int64 ``[batch]``), a sequence keeps its state after its length and outputs
    zeros there; the reverse direction reverses each sequence within its length (``ReverseSequence``)
    and runs forward."""
    w_ih, w_hh = weights[0], weights[1]
    b_ih, b_hh = (weights[2], weights[3]) if has_biases else (None, None)
    w_hr = weights[4 if has_biases else 2] if len(weights) > (4 if has_biases else 2) else None
    xw = ctx.op.MatMul(seq, ctx.op.Transpose(w_ih, perm=[1, 0]))  # every step's input projection at once
    for bias in (b_ih, b_hh if op_type != "GRU" else None):
        if bias is not None:
            xw = ctx.op.Add(xw, bias)
    w_hh_t = ctx.op.Transpose(w_hh, perm=[1, 0])
    w_hr_t = None if w_hr is None else ctx.op.Transpose(w_hr, perm=[1, 0])

    scan_inputs = [xw]
    if lengths is not None:
        if reverse:
            xw = scan_inputs[0] = ctx.op.ReverseSequence(xw, lengths, batch_axis=1, time_axis=0)
        steps = ctx.op.Range(ctx.const(0, I64), ctx.dim_size(xw, 0), ctx.const(1, I64))
        running = ctx.op.Less(ctx.op.Unsqueeze(steps, ctx.const([1], I64)), ctx.op.Unsqueeze(lengths, ctx.const([0], I64)))
        scan_inputs.append(ctx.op.Unsqueeze(running, ctx.const([2], I64)))  # [seq, batch, 1]

    sub = ctx.builder.subgraph(f"{node.name}_step")
    h = sub.add_input(f"{node.name}_h", dtype, [None, None])
    cell = sub.add_input(f"{node.name}_c", dtype, [None, None]) if op_type == "LSTM" else None
    xw_t = sub.add_input(f"{node.name}_xw", dtype, [None, None])
    running_t = sub.add_input(f"{node.name}_running", torch.bool, [None, 1]) if lengths is not None else None
    body = type(ctx)(sub, ctx.interpreter, node)
    new_h, new_cell = _step(body, op_type, activation, h, cell, xw_t, w_hh_t, b_hh if op_type == "GRU" else None, w_hr_t)
    output = body.op.Identity(new_h)
    if running_t is not None:  # a finished sequence keeps its state and outputs zeros
        output = body.op.Where(running_t, new_h, body.const(0.0, dtype))
        new_h = body.op.Where(running_t, new_h, h)
        new_cell = body.op.Where(running_t, new_cell, cell) if op_type == "LSTM" else None
    results = [new_h, *([new_cell] if op_type == "LSTM" else []), output]
    for value in results:
        out = sub.add_output(value)
        out.dtype, out.shape = onnx_dtype(dtype), ir.Shape([None, None])  # onnxruntime's Scan needs the rank
    backwards = int(reverse and lengths is None)
    outs = ctx.op.Scan(
        *initial,
        *scan_inputs,
        body=sub.to_graph(),
        num_scan_inputs=len(scan_inputs),
        scan_input_directions=[backwards] * len(scan_inputs),
        scan_output_directions=[backwards],
        _outputs=len(results),
    )
    output = outs[-1]
    if reverse and lengths is not None:
        output = ctx.op.ReverseSequence(output, lengths, batch_axis=1, time_axis=0)
    if op_type == "LSTM":
        return output, outs[0], outs[1]
    return output, outs[0], None


def _layer_scan(ctx, node, op_type, seq, initial, weights, has_biases, bidirectional, activation, dtype, lengths=None):
    """One layer, both directions, as Scans: ``(output [seq, batch, directions * hidden], h, c)``."""
    results = []
    for d, direction_weights in enumerate(weights):
        zero = ctx.const([0], I64)
        states = [ctx.op.Squeeze(ctx.op.Slice(s, ctx.const([d], I64), ctx.const([d + 1], I64), zero), zero) for s in initial]
        results.append(
            _direction_scan(ctx, node, op_type, seq, states, direction_weights, has_biases, d == 1, activation, dtype, lengths)
        )
    output = results[0][0] if len(results) == 1 else ctx.op.Concat(*[r[0] for r in results], axis=-1)
    h = _stack(ctx, [r[1] for r in results])
    c = _stack(ctx, [r[2] for r in results]) if op_type == "LSTM" else None
    return output, h, c


def _recurrent(
    ctx, node, op_type, x, states, params, has_biases, num_layers, dropout, train, bidirectional, batch_first,
    activation=None, lengths=None, x_index=0, params_index=2,
):
    if train and dropout > 0 and num_layers > 1:
        raise ctx.error(f"{op_type} with dropout in training mode cannot be exported: call model.eval() before exporting.")
    directions = 2 if bidirectional else 1
    per_direction = 4 if has_biases else 2
    projected = op_type == "LSTM" and len(params) == num_layers * directions * (per_direction + 1)
    if projected:
        per_direction += 1
    if len(params) != num_layers * directions * per_direction:
        raise ctx.error(f"{op_type}: {len(params)} weights for {num_layers} layer(s) x {directions} direction(s)")
    dtype = fake_of(node.args[x_index]).dtype
    hidden = int(fake_of(node.args[params_index][1]).shape[0]) // _GATES[op_type]  # w_hh: [gates * hidden, hidden or proj]
    scan = projected or dtype not in _ONNX_KERNEL_DTYPES
    if lengths is not None:  # ONNX's node takes int32 lengths, ReverseSequence int64
        lengths = ctx.cast(lengths, I64 if scan else torch.int32)
    seq = ctx.op.Transpose(x, perm=[1, 0, 2]) if batch_first else x
    last_h, last_c = [], []
    for layer in range(num_layers):
        bases = [(layer * directions + d) * per_direction for d in range(directions)]
        weights = [params[b : b + per_direction] for b in bases]
        start, end = ctx.const([layer * directions], I64), ctx.const([(layer + 1) * directions], I64)
        initial = [ctx.op.Slice(s, start, end, ctx.const([0], I64)) for s in states]
        if scan:
            seq, h, c = _layer_scan(ctx, node, op_type, seq, initial, weights, has_biases, bidirectional, activation, dtype, lengths)
        else:
            seq, h, c = _layer_onnx(ctx, op_type, seq, initial, weights, has_biases, hidden, bidirectional, activation, lengths)
        last_h.append(h)
        last_c.append(c)
    output = ctx.op.Transpose(seq, perm=[1, 0, 2]) if batch_first else seq
    h_n = last_h[0] if num_layers == 1 else ctx.op.Concat(*last_h, axis=0)
    if op_type != "LSTM":
        return output, h_n
    c_n = last_c[0] if num_layers == 1 else ctx.op.Concat(*last_c, axis=0)
    return output, h_n, c_n


@converter(aten.lstm.input)
def convert_lstm(ctx, node, x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    return _recurrent(
        ctx, node, "LSTM", x, list(hx), params, has_biases, num_layers, dropout, train, bidirectional, batch_first
    )


@converter(aten.gru.input)
def convert_gru(ctx, node, x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    return _recurrent(ctx, node, "GRU", x, [hx], params, has_biases, num_layers, dropout, train, bidirectional, batch_first)


@converter(aten.rnn_tanh.input, aten.rnn_relu.input)
def convert_rnn(ctx, node, x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    activation = "Tanh" if node.target is aten.rnn_tanh.input else "Relu"
    return _recurrent(
        ctx, node, "RNN", x, [hx], params, has_biases, num_layers, dropout, train, bidirectional, batch_first, activation
    )


# packed sequences (:mod:`fx2onnx.convert.packed_sequences`): a padded batch, time first, and the lengths
_PACKED_RNN = {"GRU": ("GRU", None), "RNN_TANH": ("RNN", "Tanh"), "RNN_RELU": ("RNN", "Relu")}


@converter(torch.ops.fx2onnx.packed_lstm.default)
def convert_packed_lstm(ctx, node, x, lengths, hx, params, has_biases, num_layers, dropout, train, bidirectional):
    return _recurrent(
        ctx, node, "LSTM", x, list(hx), params, has_biases, num_layers, dropout, train, bidirectional, False,
        lengths=lengths, params_index=3,
    )


@converter(torch.ops.fx2onnx.packed_rnn.default)
def convert_packed_rnn(ctx, node, mode, x, lengths, hx, params, has_biases, num_layers, dropout, train, bidirectional):
    op_type, activation = _PACKED_RNN[mode]
    return _recurrent(
        ctx, node, op_type, x, [hx], params, has_biases, num_layers, dropout, train, bidirectional, False,
        activation, lengths=lengths, x_index=1, params_index=4,
    )
