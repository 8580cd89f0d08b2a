"""Converters of nn operators: linear, matmul, norms, softmax, embeddings, attention, distances."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import fx2onnx
from fx2onnx import validate
from helpers import Fn, Fn2, check_export
from helpers import seeded_randn as _x
from torch import nn


def test_linear_relu_dynamic_batch():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    check_export(model, (_x(2, 4),), dynamic_shapes=({0: "batch"},), inputs2=((_x(5, 4, seed=1),), None))


LINEARS = {
    "linear_2d": (nn.Linear(4, 3), (2, 4)),
    "linear_3d": (nn.Linear(4, 3), (2, 5, 4)),
    "linear_no_bias_2d": (nn.Linear(4, 3, bias=False), (2, 4)),
    "linear_no_bias_4d": (nn.Linear(4, 3, bias=False), (2, 2, 5, 4)),
    "linear_1d_input": (nn.Linear(4, 3), (4,)),
    "bilinear": (nn.Bilinear(4, 5, 3), None),
}


@pytest.mark.parametrize("name", list(LINEARS))
def test_linear(name):
    torch.manual_seed(0)
    model, shape = LINEARS[name]
    if name == "bilinear":
        args, args2 = (_x(2, 4), _x(2, 5)), (_x(3, 4, seed=1), _x(3, 5, seed=2))
        check_export(model, args, dynamic_shapes=({0: "b"}, {0: "b"}), inputs2=(args2, None))
    elif len(shape) == 1:
        check_export(model, (_x(*shape),))
    else:
        check_export(model, (_x(*shape),), dynamic_shapes=({0: "batch"},), inputs2=((_x(3, *shape[1:], seed=1),), None))


MATMULS = {
    "matmul_3d": (lambda a, b: a @ b, (2, 3, 4), (2, 4, 5)),
    "matmul_broadcast": (lambda a, b: a @ b, (2, 3, 4), (4, 5)),
    "mm_via_2d": (lambda a, b: torch.mm(a[0], b[0]), (2, 3, 4), (2, 4, 5)),
    "bmm": (lambda a, b: torch.bmm(a, b), (2, 3, 4), (2, 4, 5)),
    "baddbmm": (lambda a, b: torch.baddbmm(a @ b, a, b, beta=0.5, alpha=2.0), (2, 3, 4), (2, 4, 5)),
    "addbmm": (lambda a, b: torch.addbmm(a[0] @ b[0], a, b, alpha=0.5), (2, 3, 4), (2, 4, 5)),
    "addmm": (lambda a, b: torch.addmm(b[0, 0], a[0], b[0], beta=2.0, alpha=0.5), (2, 3, 4), (2, 4, 5)),
    "dot_mv": (lambda a, b: (torch.dot(a, b), torch.mv(a.reshape(2, 3), b[:3])), (6,), (6,)),
    "outer": (lambda a, b: torch.outer(a, b), (3,), (4,)),
    "einsum": (
        lambda a, b: (torch.einsum("bij,bjk->bik", a, b), torch.einsum("b i j -> b j i", b)),
        (2, 3, 4),
        (2, 4, 5),
    ),
}


@pytest.mark.parametrize("name", list(MATMULS))
def test_matmul_family(name):
    fn, sa, sb = MATMULS[name]
    check_export(Fn2(fn), (_x(*sa), _x(*sb, seed=1)))


def test_matmul_dynamic_batch():
    a, b = _x(2, 3, 4), _x(2, 4, 5, seed=1)
    a2, b2 = _x(3, 6, 4, seed=2), _x(3, 4, 5, seed=3)
    ds = ({0: "batch", 1: "seq"}, {0: "batch"})
    check_export(Fn2(lambda a, b: torch.bmm(a, b) + 1), (a, b), dynamic_shapes=ds, inputs2=((a2, b2), None))


NORMS = {
    "layer_norm": nn.LayerNorm(6),
    "layer_norm_2d": nn.LayerNorm((5, 6)),
    "layer_norm_no_affine": nn.LayerNorm(6, elementwise_affine=False),
    "layer_norm_no_bias": nn.LayerNorm(6, bias=False, eps=1e-3),
    "rms_norm": nn.RMSNorm(6),
    "rms_norm_eps_2d": nn.RMSNorm((5, 6), eps=1e-3),
    "rms_norm_no_weight": nn.RMSNorm(6, elementwise_affine=False),
}


@pytest.mark.parametrize("opset", [18, 23])
@pytest.mark.parametrize("name", list(NORMS))
def test_norms(name, opset):
    model = NORMS[name]
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.rand(p.shape, generator=torch.Generator().manual_seed(3)) + 0.5)
    check_export(
        model,
        (_x(2, 5, 6) * 3 + 1,),
        dynamic_shapes=({0: "batch"},),
        inputs2=((_x(3, 5, 6, seed=1),), None),
        target_opset=opset,
    )


def test_native_layer_norm_outputs():
    model = Fn(lambda x: torch.native_layer_norm(x, [6], None, None, 1e-5))
    check_export(model, (_x(2, 5, 6),), dynamic_shapes=({0: "batch"},), inputs2=((_x(3, 5, 6, seed=1),), None))


@pytest.mark.parametrize(("dim", "g_shape"), [(0, (6, 1, 1)), (2, (1, 1, 5)), (-1, ())])
def test_weight_norm_converts_without_retracing(dim, g_shape):
    """``weight_norm``'s weight (wav2vec2's positional convolution) has a converter: nothing is decomposed."""
    model = Fn2(lambda v, g: torch._weight_norm(v, g, dim))
    g = _x(*g_shape, seed=1) if g_shape else torch.tensor(1.5)
    onx = check_export(model, (_x(6, 4, 5), g))
    assert "ReduceL2" in {n.op_type for n in onx.graph.node}


EMBEDDINGS = {
    "embedding": nn.Embedding(10, 4),
    "embedding_padding_idx": nn.Embedding(10, 4, padding_idx=0),
    "embedding_bag_sum": nn.EmbeddingBag(10, 4, mode="sum"),
    "embedding_bag_mean": nn.EmbeddingBag(10, 4, mode="mean"),
    "embedding_bag_max": nn.EmbeddingBag(10, 4, mode="max"),
    "embedding_bag_padding_idx": nn.EmbeddingBag(10, 4, mode="mean", padding_idx=2),
}


@pytest.mark.parametrize("name", list(EMBEDDINGS))
def test_embeddings(name):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    ids, ids2 = torch.randint(0, 10, (2, 5), generator=gen), torch.randint(0, 10, (4, 5), generator=gen)
    ids[0, :3] = 2
    check_export(EMBEDDINGS[name], (ids,), dynamic_shapes=({0: "batch"},), inputs2=((ids2,), None))


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_offsets(mode):
    torch.manual_seed(0)

    class Bags(nn.Module):
        def __init__(self):
            super().__init__()
            self.bag = nn.EmbeddingBag(10, 4, mode=mode)

        def forward(self, ids, offsets, weights=None):
            return self.bag(ids, offsets)

    ids, offsets = torch.tensor([1, 2, 3, 4, 5, 9, 0]), torch.tensor([0, 2, 2, 6])  # bag 1 is empty
    ids2, offsets2 = torch.tensor([3, 3, 1, 8]), torch.tensor([0, 1])
    check_export(Bags(), (ids, offsets), dynamic_shapes=({0: "n"}, {0: "bags"}), inputs2=((ids2, offsets2), None))


def test_embedding_bag_per_sample_weights_last_offset():
    torch.manual_seed(0)
    bag = nn.EmbeddingBag(10, 4, mode="sum", include_last_offset=True)
    model = Fn2(lambda ids, w: bag(ids, torch.tensor([0, 3, 5]), per_sample_weights=w))
    model.bag = bag
    check_export(model, (torch.tensor([1, 2, 3, 4, 5]), torch.rand(5)))


DISTANCES = {
    "cosine_similarity": nn.CosineSimilarity(dim=1),
    "cosine_similarity_last": nn.CosineSimilarity(dim=-1, eps=1e-3),
    "pairwise_distance": nn.PairwiseDistance(),
    "pairwise_distance_p1_keepdim": nn.PairwiseDistance(p=1.0, keepdim=True),
    "pairwise_distance_p3": nn.PairwiseDistance(p=3.0),
    "cdist": Fn2(lambda a, b: torch.cdist(a, b)),
    "cdist_p1": Fn2(lambda a, b: torch.cdist(a, b, p=1.0)),
}


@pytest.mark.parametrize("name", list(DISTANCES))
def test_distances(name):
    a, b = _x(2, 5, 4), _x(2, 5, 4, seed=1)
    a2, b2 = _x(3, 5, 4, seed=2), _x(3, 5, 4, seed=3)
    check_export(DISTANCES[name], (a, b), dynamic_shapes=({0: "b"}, {0: "b"}), inputs2=((a2, b2), None))


class Attention(nn.Module):
    def __init__(self, **kwargs):
        super().__init__()
        self.kwargs = kwargs

    def forward(self, q, k, v, mask=None):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **self.kwargs)


SDPA = {
    "plain": ({}, None),
    "causal": ({"is_causal": True}, None),
    "scale": ({"scale": 0.3}, None),
    "float_mask": ({}, "float"),
    "bool_mask": ({}, "bool"),
    "gqa": ({"enable_gqa": True}, None),
}


@pytest.mark.parametrize("name", list(SDPA))
def test_scaled_dot_product_attention(name):
    kwargs, mask_kind = SDPA[name]
    kv_heads = 2 if name == "gqa" else 4
    q, k, v = _x(2, 4, 5, 8), _x(2, kv_heads, 5, 8, seed=1), _x(2, kv_heads, 5, 8, seed=2)
    args = (q, k, v)
    if mask_kind == "float":
        args += (_x(2, 1, 5, 5, seed=3),)
    elif mask_kind == "bool":
        mask = torch.rand(2, 1, 5, 5, generator=torch.Generator().manual_seed(4)) > 0.3
        mask[0, 0, 1] = False  # a fully masked row gives zeros in torch
        args += (mask,)
    check_export(Attention(**kwargs), args)


def test_attention_module_dynamic():
    torch.manual_seed(0)
    model = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, dropout=0.1)
    x, x2 = _x(2, 5, 8), _x(3, 7, 8, seed=1)
    with torch.no_grad():
        check_export(model, (x,), dynamic_shapes=({0: "batch", 1: "seq"},), inputs2=((x2,), None))


def test_softmax_dropout_eval():
    model = nn.Sequential(nn.Linear(6, 6), nn.Dropout(0.3), nn.Softmax(-1)).eval()
    check_export(model, (_x(2, 6),), dynamic_shapes=({0: "batch"},), inputs2=((_x(4, 6, seed=1),), None))


def test_channel_shuffle():
    x, x2 = _x(2, 6, 3, 4), _x(1, 6, 5, 2, seed=1)
    check_export(nn.ChannelShuffle(3), (x,), dynamic_shapes=({0: "b", 2: "h", 3: "w"},), inputs2=((x2,), None))


RECURRENT = {
    "lstm": lambda: nn.LSTM(4, 5, batch_first=True),
    "lstm_2layers_bidirectional": lambda: nn.LSTM(4, 5, num_layers=2, bidirectional=True, batch_first=True),
    "lstm_seq_first_no_bias": lambda: nn.LSTM(4, 5, bias=False),
    "gru": lambda: nn.GRU(4, 5, batch_first=True),
    "gru_2layers_bidirectional": lambda: nn.GRU(4, 5, num_layers=2, bidirectional=True),
    "rnn_tanh": lambda: nn.RNN(4, 5, batch_first=True),
    "rnn_relu_bidirectional": lambda: nn.RNN(
        4, 5, nonlinearity="relu", num_layers=2, bidirectional=True, batch_first=True
    ),
}


@pytest.mark.parametrize("name", list(RECURRENT))
def test_recurrent_layers(name):
    torch.manual_seed(0)
    model = RECURRENT[name]().eval()
    # the batch and the sequence length are dynamic: checked at other lengths, one step included
    x, x2, x3 = _x(2, 6, 4), _x(3, 9, 4, seed=1), _x(1, 1, 4, seed=2)
    if not model.batch_first:
        x, x2, x3 = (t.transpose(0, 1).contiguous() for t in (x, x2, x3))
    ds = ({0: "batch", 1: "seq"},) if model.batch_first else ({0: "seq", 1: "batch"},)
    onx = check_export(model, (x,), dynamic_shapes=ds, inputs2=((x2,), None))
    report = validate(onx, model, (x3,))
    assert report.ok, report
    op_type = {"lstm": "LSTM", "gru": "GRU", "rnn": "RNN"}[name.split("_")[0]]
    assert op_type in {n.op_type for n in onx.graph.node}  # one ONNX recurrent node, no unrolled loop
    seq_axis = 1 if model.batch_first else 0
    assert onx.graph.input[0].type.tensor_type.shape.dim[seq_axis].dim_param == "seq"


def test_recurrent_kernels_restored_and_decomposable():
    """The shape functions of the capture are removed afterwards, and a decomposition table built meanwhile
    decomposes with torch's own loop."""
    from torch._C import DispatchKey

    from fx2onnx.convert.decompose import decompositions_for
    from fx2onnx.convert.meta_kernels import recurrent_shape_kernels

    lstm = torch.ops.aten.lstm.input
    before = lstm.py_kernels[DispatchKey.CompositeImplicitAutograd]
    with recurrent_shape_kernels() as patched:
        assert "aten.lstm.input" in patched
        assert lstm.py_kernels[DispatchKey.CompositeImplicitAutograd] is not before
        assert decompositions_for([lstm])[lstm] is before
    assert lstm.py_kernels[DispatchKey.CompositeImplicitAutograd] is before
    fx2onnx.to_onnx(nn.LSTM(4, 5).eval(), (_x(6, 2, 4),), dynamic_shapes=({0: "seq"},))
    assert lstm.py_kernels[DispatchKey.CompositeImplicitAutograd] is before


def test_lstm_with_initial_states():
    torch.manual_seed(0)

    class WithStates(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(4, 5, num_layers=2, batch_first=True)

        def forward(self, x, h, c):
            return self.lstm(x, (h, c))

    args = (_x(2, 6, 4), _x(2, 2, 5, seed=1), _x(2, 2, 5, seed=2))
    args2 = (_x(3, 4, 4, seed=3), _x(2, 3, 5, seed=4), _x(2, 3, 5, seed=5))
    ds = ({0: "batch", 1: "seq"}, {1: "batch"}, {1: "batch"})
    check_export(WithStates().eval(), args, dynamic_shapes=ds, inputs2=(args2, None))


def test_gru_dynamic_sequence_strict():
    torch.manual_seed(0)
    model = nn.GRU(4, 5, num_layers=2, batch_first=True).eval()
    check_export(
        model, (_x(2, 6, 4),), dynamic_shapes=({1: "seq"},), inputs2=((_x(2, 11, 4, seed=1),), None), strict=True
    )


SCANNED = {  # no onnxruntime kernel: a Scan over the time steps
    "lstm_projection": (lambda: nn.LSTM(4, 5, proj_size=3, batch_first=True), torch.float32),
    "lstm_projection_2layers_bidirectional": (lambda: nn.LSTM(4, 5, 2, proj_size=2, bidirectional=True), torch.float32),
    "lstm_float64": (lambda: nn.LSTM(4, 5, 2, batch_first=True, bidirectional=True), torch.float64),
    "gru_float64_no_bias": (lambda: nn.GRU(4, 5, bias=False, bidirectional=True), torch.float64),
    "rnn_relu_float64": (lambda: nn.RNN(4, 5, 2, nonlinearity="relu", batch_first=True), torch.float64),
}


@pytest.mark.parametrize("name", list(SCANNED))
def test_recurrent_layers_scanned(name):
    torch.manual_seed(0)
    make, dtype = SCANNED[name]
    model = make().to(dtype).eval()
    x, x2, x3 = (_x(*shape, seed=i).to(dtype) for i, shape in enumerate([(2, 6, 4), (3, 9, 4), (1, 1, 4)]))
    if not model.batch_first:
        x, x2, x3 = (t.transpose(0, 1).contiguous() for t in (x, x2, x3))
    ds = ({0: "batch", 1: "seq"},) if model.batch_first else ({0: "seq", 1: "batch"},)
    atol = 1e-12 if dtype == torch.float64 else 1e-5
    onx = check_export(model, (x,), dynamic_shapes=ds, inputs2=((x2,), None), atol=atol)
    report = validate(onx, model, (x3,), atol=atol)
    assert report.ok, report
    assert "Scan" in {n.op_type for n in onx.graph.node}


class Block(nn.Module):
    """Linear layers, norms, activations, attention and reductions in one module."""

    def __init__(self):
        super().__init__()
        self.fc, self.norm, self.rms = nn.Linear(8, 8), nn.LayerNorm(8), nn.RMSNorm(8)
        self.emb, self.drop = nn.Embedding(10, 8), nn.Dropout(0.1)

    def forward(self, ids, x):
        h = self.drop(self.norm(self.fc(x) + self.emb(ids)))
        q = h.reshape(h.shape[0], h.shape[1], 2, 4).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, q, q, is_causal=True).transpose(1, 2).reshape(h.shape)
        acts = F.gelu(a) + F.silu(a) + F.elu(a) + F.leaky_relu(a) + F.hardtanh(a) + F.softplus(a) + F.mish(a)
        out = self.rms(acts)
        return (
            F.log_softmax(out, -1),
            out.var(-1),
            *torch.std_mean(out, -1),
            out.logsumexp(-1),
            out.cumsum(1),
            out.amax(-1),
            out.topk(2)[0],
        )


@pytest.mark.parametrize("decompositions", ["functional", "core"])
@pytest.mark.slow
def test_lower_level_ops(decompositions):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    ids, x = torch.randint(0, 10, (2, 5), generator=gen), torch.randn(2, 5, 8, generator=gen)
    ids2, x2 = torch.randint(0, 10, (3, 5), generator=gen), torch.randn(3, 5, 8, generator=gen)
    check_export(
        Block(),
        (ids, x),
        dynamic_shapes=({0: "batch"}, {0: "batch"}),
        inputs2=((ids2, x2), None),
        decompositions={} if decompositions == "functional" else "core",
    )


LINALG = {
    "tensordot": lambda x: (
        torch.tensordot(x, x, dims=([1], [1])),
        torch.tensordot(x.reshape(3, 2, 2), x.reshape(2, 2, 3), dims=2),
    ),
    "kron": lambda x: (torch.kron(x, x[:2, :2]), torch.kron(x[0], x)),
    "det": lambda x: torch.linalg.det(x[:, :3] + torch.eye(3)),
    "cross": lambda x: (
        torch.cross(x[:, :3], x[:, 1:], dim=1),
        torch.linalg.cross(x[:, :3], x[:, 1:]),
        torch.linalg.cross(x[:, :3], x[:, 1:], dim=0),
    ),
}


@pytest.mark.parametrize("name", list(LINALG))
def test_linalg(name):
    check_export(Fn(LINALG[name]), (_x(3, 4),))


def test_safe_softmax_fully_masked_rows():
    x = _x(3, 4)
    x[1] = float("-inf")
    x[2, :2] = float("-inf")
    model = Fn(lambda x: (torch.ops.aten._safe_softmax.default(x, -1), torch.ops.aten._safe_softmax.default(x.t(), 0)))
    check_export(model, (x,))


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.slow  # the fast tier has test_attention_module_dynamic
def test_multihead_attention(need_weights):
    torch.manual_seed(0)

    class MHA(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

        def forward(self, x, mask):
            out, weights = self.attn(x, x, x, key_padding_mask=mask, need_weights=need_weights)
            return (out, weights) if need_weights else out

    gen = torch.Generator().manual_seed(0)
    x, mask = torch.randn(2, 5, 8, generator=gen), torch.zeros(2, 5, dtype=torch.bool)
    mask[1, 3:] = True
    x2, mask2 = torch.randn(3, 5, 8, generator=gen), torch.zeros(3, 5, dtype=torch.bool)
    mask2[0, 4:] = True
    with torch.no_grad():
        check_export(MHA().eval(), (x, mask), dynamic_shapes=({0: "batch"}, {0: "batch"}), inputs2=((x2, mask2), None))


MATRIX_CHAINS = {
    "addr": lambda x: (
        torch.addr(x, x[:, 0], x[0]),
        torch.addr(x, x[:, 1], x[1], beta=0.5, alpha=2.0),
        torch.addr(x, x[:, 0], x[0], beta=0),
    ),
    "multi_dot": lambda x: (torch.linalg.multi_dot([x, x.T, x]), torch.linalg.multi_dot([x[0], x.T, x[:, 0]])),
    "special_softmax": lambda x: torch.special.softmax(x, 1),
}


@pytest.mark.parametrize("name", list(MATRIX_CHAINS))
def test_matrix_chains(name):
    check_export(Fn(MATRIX_CHAINS[name]), (_x(3, 3),))


@pytest.mark.parametrize(
    "module",
    [nn.PReLU(), nn.Softmax(dim=0), nn.LogSoftmax(dim=0), nn.Softmin(dim=-1)],
    ids=["prelu", "softmax", "log_softmax", "softmin"],
)
def test_zero_dim_input_keeps_its_rank(module):
    """A 0-d input: PReLU's single weight broadcast to [1] gave a [1] output (a wrong shape), and ONNX's
    Softmax / LogSoftmax refuse rank 0; both now return a 0-d tensor as torch does."""
    for value in (-1.5, 2.0):
        onx = check_export(module.eval(), (torch.tensor(value),))
        assert len(onx.graph.output[0].type.tensor_type.shape.dim) == 0
