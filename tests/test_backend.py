"""The torch.compile backend on onnxruntime, the GraphModule converter and the backward converters."""

from __future__ import annotations

import copy
import os

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime
import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import fx2onnx
from fx2onnx.backend import make_onnxruntime_backend
from fx2onnx.convert.graph_module import convert_graph_module
from fx2onnx.validation import to_numpy

aten = torch.ops.aten


@pytest.fixture(autouse=True)
def _reset_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.LayerNorm(8), torch.nn.Linear(8, 3))


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def _assert_same_grads(model: torch.nn.Module, ref: torch.nn.Module, atol: float, rtol: float) -> None:
    """Every parameter of ``model`` has the gradient of the same parameter of ``ref``."""
    for name, grad in _grads(ref).items():
        torch.testing.assert_close(_grads(model)[name], grad, atol=atol, rtol=rtol)


def _tiny_llama_in_training(**kwargs):
    """A tiny llama in training mode with its inputs and an untouched copy: (tiny, model, ref)."""
    from fx2onnx.zoo import get_tiny_model

    tiny = get_tiny_model("llama", **kwargs)
    model = tiny.model.train()
    return tiny, model, copy.deepcopy(model)


def _assert_same_training_step(compiled, model: torch.nn.Module, ref: torch.nn.Module, inputs: dict) -> None:
    """A loss and its backward through ``compiled`` (wrapping ``model``) match ``ref``'s.

    The transformers model computes its loss with ``labels=input_ids``; losses must
    match within atol 1e-5, gradients within atol 1e-4.
    """
    inputs = dict(inputs, labels=inputs["input_ids"].clone())
    loss = compiled(**inputs).loss
    loss.backward()
    ref_loss = ref(**inputs).loss
    ref_loss.backward()
    torch.testing.assert_close(loss, ref_loss, atol=1e-5, rtol=1e-4)
    _assert_same_grads(model, ref, atol=1e-4, rtol=1e-3)


def _assert_eager_results(compiled, model: torch.nn.Module, batch_sizes: tuple[int, ...]) -> None:
    """``compiled`` gives the results of ``model`` on inputs [n, 4] for every ``n`` of ``batch_sizes``."""
    with torch.no_grad():
        for n in batch_sizes:
            x = torch.randn(n, 4)
            torch.testing.assert_close(compiled(x), model(x), atol=1e-5, rtol=1e-4)


# ---------------------------------------------------------------- converters


def _assert_backend_matches_eager(fn, backend, *leaves: torch.Tensor) -> None:
    """``fn`` compiled with ``backend`` and run eagerly on the same leaf tensors: the same value and gradients."""
    got = torch.compile(fn, backend=backend)(*leaves)
    got.backward()
    grads = [t.grad.clone() for t in leaves]
    for t in leaves:
        t.grad = None
    expected = fn(*leaves)
    expected.backward()
    torch.testing.assert_close(got, expected)
    for grad, t in zip(grads, leaves):
        torch.testing.assert_close(grad, t.grad)


def run_fx(fn, *inputs):
    """Traces ``fn`` into aten ops, converts it, runs it on onnxruntime, returns (expected, got)."""
    gm = make_fx(fn)(*inputs)
    model = convert_graph_module(gm, list(inputs))
    session = onnxruntime.InferenceSession(ir.to_proto(model).SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {i.name: to_numpy(inputs[k]) for i, k in zip(session.get_inputs(), model.meta["input_indices"])}
    got = session.run(None, feeds)
    expected = fn(*inputs)
    if not isinstance(expected, (tuple, list)):
        expected = [expected]
    expected = [e for e in expected if e is not None]
    return expected, got


def assert_close(fn, *inputs, atol=1e-5):
    expected, got = run_fx(fn, *inputs)
    assert len(expected) == len(got)
    for e, g in zip(expected, got):
        assert tuple(e.shape) == g.shape
        np.testing.assert_allclose(g, e.detach().numpy(), atol=atol, rtol=1e-4)


x34 = torch.randn(3, 4)
g34 = torch.randn(3, 4)


@pytest.mark.parametrize(
    "fn",
    [
        lambda g, x: aten.threshold_backward.default(g, x, 0.0),
        lambda g, x: aten.sigmoid_backward.default(g, torch.sigmoid(x)),
        lambda g, x: aten.tanh_backward.default(g, torch.tanh(x)),
        lambda g, x: aten.silu_backward.default(g, x),
        lambda g, x: aten.gelu_backward.default(g, x),
        lambda g, x: aten.gelu_backward.default(g, x, approximate="tanh"),
        lambda g, x: aten._softmax_backward_data.default(g, torch.softmax(x, 1), 1, torch.float32),
        lambda g, x: aten._log_softmax_backward_data.default(g, torch.log_softmax(x, -1), -1, torch.float32),
        lambda g, x: aten.native_dropout_backward.default(g, x > 0, 2.0),
        lambda g, x: aten.mse_loss.default(g, x),
        lambda g, x: aten.mse_loss_backward.default(torch.tensor(1.5), g, x, 1),
        lambda g, x: aten.hardtanh_backward.default(g, x, -0.5, 0.7),
        lambda g, x: aten.leaky_relu_backward.default(g, x, 0.1, False),
        lambda g, x: aten.elu_backward.default(g, 1.2, 1.1, 0.9, False, x),
        lambda g, x: aten.elu_backward.default(g, 1.2, 1.1, 0.9, True, torch.nn.functional.elu(x, 1.2)),
        lambda g, x: aten.softplus_backward.default(g, x * 10, 2.0, 5.0),
    ],
    ids=[
        "threshold", "sigmoid", "tanh", "silu", "gelu", "gelu_tanh", "softmax", "log_softmax", "dropout", "mse", "mse_bw",
        "hardtanh", "leaky_relu", "elu", "elu_result", "softplus",
    ],
)
def test_elementwise_backward(fn):
    assert_close(fn, g34, x34)


def test_embedding_dense_backward_padding():
    grad = torch.randn(2, 5, 3)
    idx = torch.tensor([[1, 2, 1, 0, 4], [4, 4, 0, 3, 2]])
    assert_close(lambda g, i: aten.embedding_dense_backward.default(g, i, 6, 0, False), grad, idx)
    assert_close(lambda g, i: aten.embedding_dense_backward.default(g, i, 6, -1, False), grad, idx)


@pytest.mark.parametrize("start,end,step", [(1, 4, 1), (0, 6, 2), (-3, 9223372036854775807, 1), (1, 6, 3)])
def test_slice_backward(start, end, step):
    x = torch.randn(3, 6, 2)
    sliced = x[:, start:end:step]
    grad = torch.randn(*sliced.shape)
    assert_close(lambda g: aten.slice_backward.default(g, [3, 6, 2], 1, start, end, step), grad)


def test_select_backward():
    assert_close(lambda g: aten.select_backward.default(g, [3, 5, 2], 1, -2), torch.randn(3, 2))


def test_native_layer_norm_backward():
    x = torch.randn(2, 3, 8)
    w, b = torch.randn(8), torch.randn(8)
    _, mean, rstd = aten.native_layer_norm.default(x, [8], w, b, 1e-5)
    grad = torch.randn(2, 3, 8)

    def fn(g, x, mean, rstd, w, b):
        return aten.native_layer_norm_backward.default(g, x, [8], mean, rstd, w, b, [True, True, True])

    assert_close(fn, grad, x, mean, rstd, w, b, atol=1e-4)


@pytest.mark.parametrize("reduction", [0, 1, 2])
def test_nll_loss_forward_backward(reduction):
    logp = torch.randn(6, 5).log_softmax(-1)
    target = torch.tensor([1, 2, -100, 4, 0, 3])
    weight = torch.rand(5) + 0.5

    def fn(logp, target, weight):
        loss, total = aten.nll_loss_forward.default(logp, target, weight, reduction, -100)
        grad = torch.ones_like(loss) * 0.5
        return loss, total, aten.nll_loss_backward.default(grad, logp, target, weight, reduction, -100, total)

    assert_close(fn, logp, target, weight)


@pytest.mark.parametrize(
    "shape,kernel,stride,padding,dilation,groups",
    [
        ((2, 3, 9, 9), (4, 3, 3, 3), [1, 1], [1, 1], [1, 1], 1),
        ((2, 3, 10, 9), (4, 3, 3, 2), [2, 3], [0, 1], [2, 1], 1),
        ((2, 4, 8), (6, 4, 3), [2], [1], [1], 1),
        ((1, 4, 7, 7), (4, 2, 3, 3), [2, 2], [1, 1], [1, 1], 2),
        ((2, 6, 9), (12, 2, 3), [2], [1], [2], 3),
        ((2, 8, 11), (8, 1, 4), [1], [3], [1], 8),  # depthwise causal conv (mamba)
    ],
)
def test_convolution_backward(shape, kernel, stride, padding, dilation, groups):
    x, w = torch.randn(*shape), torch.randn(*kernel)
    out = aten.convolution.default(x, w, None, stride, padding, dilation, False, [0] * len(stride), groups)
    grad = torch.randn(*out.shape)

    def fn(g, x, w):
        return aten.convolution_backward.default(g, x, w, [kernel[0]], stride, padding, dilation, False, [0] * len(stride), groups, [True] * 3)

    assert_close(fn, grad, x, w, atol=1e-4)


@pytest.mark.parametrize("kernel,stride,padding", [(2, 2, 0), (3, 2, 1), (3, 1, 0)])
def test_pooling_backward(kernel, stride, padding):
    x = torch.randn(2, 3, 7, 8)
    y, indices = aten.max_pool2d_with_indices.default(x, [kernel, kernel], [stride, stride], [padding, padding])
    grad = torch.randn(*y.shape)

    def max_bw(g, x, i):
        return aten.max_pool2d_with_indices_backward.default(g, x, [kernel] * 2, [stride] * 2, [padding] * 2, [1, 1], False, i)

    assert_close(max_bw, grad, x, indices)
    grad = torch.randn(*aten.avg_pool2d.default(x, [kernel] * 2, [stride] * 2, [padding] * 2).shape)

    def avg_bw(g, x):
        return aten.avg_pool2d_backward.default(g, x, [kernel] * 2, [stride] * 2, [padding] * 2, False, True, None)

    assert_close(avg_bw, grad, x)


@pytest.mark.parametrize("kv_heads", [6, 2], ids=["mha", "gqa"])
@pytest.mark.parametrize("mask", ["none", "causal", "minus_inf", "float"])
def test_flash_attention_cpu_forward_backward(mask, kv_heads):
    # gqa: 3 query heads share one key/value head (the kernel repeats them, the backward sums their gradients)
    q, k, v = torch.randn(2, 6, 5, 8), torch.randn(2, kv_heads, 6, 8), torch.randn(2, kv_heads, 6, 8)
    grad = torch.randn(2, 6, 5, 8)
    keep = torch.rand(5, 6) > 0.3
    keep[:, 0] = True  # no fully masked row
    minus_inf = torch.zeros(5, 6).masked_fill(~keep, -float("inf"))  # the CPU kernel takes float masks only
    attn_mask = {"minus_inf": minus_inf, "float": torch.randn(1, 1, 5, 6)}.get(mask)
    is_causal = mask == "causal"

    def fn(g, q, k, v, attn_mask):
        out, lse = aten._scaled_dot_product_flash_attention_for_cpu.default(q, k, v, 0.0, is_causal, attn_mask=attn_mask, scale=0.3)
        grads = aten._scaled_dot_product_flash_attention_for_cpu_backward.default(
            g, q, k, v, out, lse, 0.0, is_causal, attn_mask=attn_mask, scale=0.3
        )
        return (out, lse, *grads)

    assert_close(fn, grad, q, k, v, attn_mask, atol=1e-4)


def test_convert_graph_module_checks_inputs():
    gm = make_fx(lambda x: x + 1)(torch.randn(2))
    with pytest.raises(ValueError, match="one example value per placeholder"):
        convert_graph_module(gm, [])


# ---------------------------------------------------------------- backend


def test_inference_matches_eager_and_reuses_session():
    model = _mlp().eval()
    backend = make_onnxruntime_backend()
    compiled = torch.compile(model, backend=backend)
    x = torch.randn(5, 4)
    with torch.no_grad():
        got1, got2 = compiled(x), compiled(x)
        expected = model(x)
    torch.testing.assert_close(got1, expected, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(got2, expected, atol=1e-5, rtol=1e-4)
    assert backend.stats() == {"graphs": 1, "sessions": 1, "calls": 2, "cache_hits": 1, "fallbacks": 0}
    assert [r.name for r in backend.runners] == ["g0_inference"]


def test_dynamic_shapes_one_session():
    model = _mlp().eval()
    backend = make_onnxruntime_backend(dynamic=True)
    compiled = torch.compile(model, backend=backend, dynamic=True)
    _assert_eager_results(compiled, model, (3, 7, 11))
    stats = backend.stats()
    assert stats["graphs"] == 1 and stats["sessions"] == 1 and stats["cache_hits"] == 2, stats
    inputs = backend.runners[0].model.graph.inputs
    assert any(isinstance(d, ir.SymbolicDim) for i in inputs if i.shape is not None for d in i.shape)


def test_static_backend_one_session_per_shape():
    model = _mlp().eval()
    backend = make_onnxruntime_backend(dynamic=False)
    compiled = torch.compile(model, backend=backend, dynamic=True)
    _assert_eager_results(compiled, model, (3, 7, 3))
    stats = backend.stats()
    assert stats["graphs"] == 1 and stats["sessions"] == 2 and stats["cache_hits"] == 1, stats


class _Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(1))

    def forward(self, x):
        self.count += 1  # aot_autograd returns the new value, copied back into the buffer
        return x * self.count


def test_mutated_buffer_and_aliased_outputs():
    model = _Counter()
    backend = make_onnxruntime_backend()
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad():
        first, second = compiled(torch.ones(2)), compiled(torch.ones(2))
    torch.testing.assert_close(first, torch.ones(2))
    torch.testing.assert_close(second, torch.full((2,), 2.0))
    torch.testing.assert_close(model.count, torch.tensor([2.0]))

    def f(x, y):
        z = y * 2
        return z, z, y.view(-1), y.shape[0]

    y = torch.randn(2, 3)
    got = torch.compile(f, backend=backend)(torch.zeros(1), y)
    expected = f(torch.zeros(1), y)
    assert got[3] == expected[3] == 2
    for g, e in zip(got[:3], expected[:3]):
        torch.testing.assert_close(g, e)


class _WithGraphBreak(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 2)

    def forward(self, x):
        y = torch.relu(self.a(x))
        print("graph break here")  # dynamo splits the graph
        return torch.sigmoid(self.b(y))


def test_graph_break_forward_and_backward(capsys):
    torch.manual_seed(1)
    model = _WithGraphBreak()
    ref = copy.deepcopy(model)
    backend = make_onnxruntime_backend()
    compiled = torch.compile(model, backend=backend)
    x = torch.randn(3, 4)
    got = compiled(x)
    expected = ref(x)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
    got.sum().backward()
    expected.sum().backward()
    _assert_same_grads(model, ref, atol=1e-5, rtol=1e-4)
    kinds = sorted(r.name.split("_", 1)[1] for r in backend.runners)
    assert kinds == ["backward", "backward", "forward", "forward"]
    assert "graph break here" in capsys.readouterr().out


def test_training_mlp_gradients_match():
    model = _mlp()
    ref = copy.deepcopy(model)
    backend = make_onnxruntime_backend()
    compiled = torch.compile(model, backend=backend)
    x, target = torch.randn(6, 4), torch.tensor([0, 1, 2, 1, 0, 2])
    loss = torch.nn.functional.cross_entropy(compiled(x), target)
    loss.backward()
    ref_loss = torch.nn.functional.cross_entropy(ref(x), target)
    ref_loss.backward()
    torch.testing.assert_close(loss, ref_loss, atol=1e-5, rtol=1e-4)
    _assert_same_grads(model, ref, atol=1e-5, rtol=1e-4)
    assert backend.stats()["graphs"] == 2


def test_training_cnn_gradients_and_running_stats():
    torch.manual_seed(0)
    layers = [
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 8, 3, stride=2),
        torch.nn.Hardtanh(),
        torch.nn.AvgPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 4),
        torch.nn.LeakyReLU(),
        torch.nn.ELU(),
        torch.nn.Softplus(),
    ]
    model = torch.nn.Sequential(*layers).train()
    ref = copy.deepcopy(model)
    backend = make_onnxruntime_backend()
    compiled = torch.compile(model, backend=backend)
    x = torch.randn(4, 3, 13, 13)
    got, expected = compiled(x), ref(x)
    got.pow(2).sum().backward()
    expected.pow(2).sum().backward()
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
    _assert_same_grads(model, ref, atol=1e-4, rtol=1e-3)
    for (name, buffer), (_, ref_buffer) in zip(model.named_buffers(), ref.named_buffers()):
        torch.testing.assert_close(buffer, ref_buffer, atol=1e-6, rtol=1e-5, msg=name)
    assert backend.stats()["graphs"] == 2


def test_training_with_decompositions():
    torch.manual_seed(0)
    layers = [
        torch.nn.Linear(6, 8),
        torch.nn.Hardswish(),
        torch.nn.Linear(8, 8),
        torch.nn.Mish(),
        torch.nn.GLU(),
        torch.nn.Linear(4, 6),
        torch.nn.GroupNorm(2, 6),
        torch.nn.Hardsigmoid(),
        torch.nn.LogSigmoid(),
    ]
    model = torch.nn.Sequential(*layers)
    ref = copy.deepcopy(model)
    backend = make_onnxruntime_backend()
    compiled = torch.compile(model, backend=backend)
    x = torch.randn(5, 6)
    got, expected = compiled(x), ref(x)
    got.sum().backward()
    expected.sum().backward()
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
    _assert_same_grads(model, ref, atol=1e-5, rtol=1e-4)
    # only ops without converter are decomposed
    table = backend.decompositions()
    assert aten.silu_backward.default not in table and aten._softmax_backward_data.default not in table
    from fx2onnx.convert import registry

    assert all(registry.lookup(op) is None for op in table)


@pytest.mark.parametrize("optimize", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_training_tiny_llama_loss_inside_the_graph(optimize):
    tiny, model, ref = _tiny_llama_in_training()
    backend = make_onnxruntime_backend(optimize=optimize)
    compiled = torch.compile(model, backend=backend)
    _assert_same_training_step(compiled, model, ref, tiny.inputs)
    names = [r.name for r in backend.runners]
    assert names == ["g0_forward", "g1_backward"]
    assert all(r.node_count > 100 for r in backend.runners)


@pytest.mark.parametrize("dynamic", [True, False])
@pytest.mark.slow
def test_training_tiny_llama_dynamic_shapes(dynamic):
    tiny, model, ref = _tiny_llama_in_training()
    backend = make_onnxruntime_backend(dynamic=dynamic)
    compiled = torch.compile(model, backend=backend, dynamic=True)
    for inputs in (tiny.inputs, tiny.inputs2, tiny.inputs):
        model.zero_grad()
        ref.zero_grad()
        _assert_same_training_step(compiled, model, ref, inputs)
    stats = backend.stats()
    # dynamic: one model with symbolic dimensions per graph; static: one model per shape
    assert stats["graphs"] == 2 and stats["calls"] == 6, stats
    assert stats["sessions"] == (2 if dynamic else 4), stats


def test_training_tiny_llama_sdpa():
    tiny, model, ref = _tiny_llama_in_training(attn_implementation="sdpa")
    compiled = torch.compile(model, backend=make_onnxruntime_backend())
    _assert_same_training_step(compiled, model, ref, tiny.inputs)


def test_dump_onnx_writes_models_and_graphs(tmp_path):
    model = _mlp().eval()
    compiled = torch.compile(model, backend=make_onnxruntime_backend())
    with torch.no_grad(), fx2onnx.dump_onnx("mlp", folder=tmp_path) as files:
        compiled(torch.randn(2, 4))
    names = sorted(os.path.basename(f) for f in files)
    assert names == ["mlp_g0_inference.txt", "mlp_g0_inference_0.onnx"]
    onx = onnx.load(os.path.join(tmp_path, "mlp_g0_inference_0.onnx"))
    onnx.checker.check_model(onx)
    assert {n.op_type for n in onx.graph.node} >= {"LayerNormalization"}
    text = (tmp_path / "mlp_g0_inference.txt").read_text()
    assert "torch.ops.aten" in text


def test_dump_folder_option(tmp_path):
    backend = make_onnxruntime_backend(dump_folder=str(tmp_path))
    compiled = torch.compile(torch.nn.Linear(3, 2), backend=backend)
    with torch.no_grad():
        compiled(torch.randn(4, 3))
    assert sorted(os.listdir(tmp_path)) == ["model_g0_inference.txt", "model_g0_inference_0.onnx"]


@torch.library.custom_op("fx2onnx_backend_test::mystery", mutates_args=())
def _mystery(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


@_mystery.register_fake
def _(x):
    return torch.empty_like(x)


class _Mystery(torch.nn.Module):
    def forward(self, x):
        return torch.ops.fx2onnx_backend_test.mystery(x.abs()) - 1


def test_unsupported_op_raises_naming_it():
    compiled = torch.compile(_Mystery(), backend=make_onnxruntime_backend())
    with pytest.raises(Exception, match="fx2onnx_backend_test::mystery") as info:
        compiled(torch.randn(3))
    assert "make_onnxruntime_backend(dispatcher=" in str(info.value)
    assert "UnsupportedOpError" in f"{info.value!r} {info.value}" or isinstance(info.value, fx2onnx.UnsupportedOpError)


def test_dispatcher_gives_a_converter():
    def convert_mystery(ctx, node, x):
        return ctx.op.Add(ctx.op.Mul(x, ctx.const(2.0)), ctx.const(1.0))

    backend = make_onnxruntime_backend(dispatcher=fx2onnx.Dispatcher({torch.ops.fx2onnx_backend_test.mystery.default: convert_mystery}))
    compiled = torch.compile(_Mystery(), backend=backend)
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x), x.abs() * 2)
    assert backend.stats()["graphs"] == 1 and backend.stats()["fallbacks"] == 0


def test_wrong_converter_is_caught_at_run_time():
    def wrong_rank(ctx, node, x):
        return ctx.op.Unsqueeze(x, ctx.const([0], torch.int64))  # torch's result has rank 1, not 2

    backend = make_onnxruntime_backend(dispatcher=fx2onnx.Dispatcher({torch.ops.fx2onnx_backend_test.mystery.default: wrong_rank}))
    compiled = torch.compile(_Mystery(), backend=backend)
    with pytest.raises(RuntimeError, match="a converter is wrong"):
        compiled(torch.randn(4))


def test_fallback_warns_and_runs_eagerly():
    backend = make_onnxruntime_backend(fallback=True)
    compiled = torch.compile(_Mystery(), backend=backend)
    x = torch.randn(3)
    with pytest.warns(UserWarning, match="runs eagerly .*fx2onnx_backend_test::mystery"):
        got = compiled(x)
    torch.testing.assert_close(got, x.abs() * 2)
    assert backend.stats()["fallbacks"] == 1 and backend.stats()["graphs"] == 0


def test_bad_options():
    with pytest.raises(ValueError, match="providers"):
        make_onnxruntime_backend(providers=["NoSuchExecutionProvider"])
    with pytest.raises(TypeError, match="list of provider names"):
        make_onnxruntime_backend(providers="CPUExecutionProvider")
    with pytest.raises(ValueError, match="prefix"):
        with fx2onnx.dump_onnx(""):
            pass


def test_views_saved_for_backward_are_torch_views():
    """A view of an input or of a computed value given back by the forward graph is not copied by onnxruntime."""
    torch._dynamo.reset()

    def f(x, w):
        y = torch.relu(x @ w.t())  # aot_autograd saves t(w) and relu's output (a detach) for backward
        return (y.view(-1) ** 3).sum() + (y.pow(-1).clamp(-5, 5) + y.pow(2)).sum()  # backward: pow 2, -2, 1

    x = torch.randn(6, 4, requires_grad=True)
    w = torch.randn(3, 4, requires_grad=True)
    backend = make_onnxruntime_backend()
    _assert_backend_matches_eager(f, backend, x, w)
    forward = backend.runners[0].model
    views = [value for kind, value in forward.meta["output_layout"] if kind == "view"]
    assert any(source[0] == "input" for source, _ in views), forward.meta["output_layout"]
    assert not any(o.producer() is not None and o.producer().op_type == "Transpose" for o in forward.graph.outputs)
    # pow with the exponents torch computes by products has no Pow node
    assert not any(n.op_type == "Pow" for r in backend.runners for n in r.model.graph)


def test_view_output_of_non_viewable_input_is_reshaped():
    from fx2onnx.backend.runner import _apply_view

    x = torch.arange(24.0).reshape(4, 6).t()  # strides (1, 6): no view of 24 elements
    got = _apply_view(torch.ops.aten.view.default, x, ([24],), {})
    torch.testing.assert_close(got, x.reshape(24))
    with pytest.raises(RuntimeError):  # only a view may become a reshape
        _apply_view(torch.ops.aten.expand.default, x, ([5, 4],), {})


def test_storage_permutation():
    from fx2onnx.convert.graph_module import storage_permutation

    w = torch.randn(3, 5)
    assert storage_permutation(w) is None  # contiguous
    assert storage_permutation(w.t()) == (1, 0)
    x = torch.randn(2, 3, 4, 5)
    p = storage_permutation(x.permute(0, 2, 3, 1))
    assert p is not None and x.permute(0, 2, 3, 1).permute(p).is_contiguous()
    assert storage_permutation(x[:, :, :2]) is None  # a slice: holes
    assert storage_permutation(torch.randn(3, 1).expand(3, 4)) is None  # stride 0: overlapping
    assert storage_permutation(torch.randn(4)) is None


def test_transposed_weights_are_fed_as_stored():
    """The transposed weight the forward saves for backward enters the backward model as the weight
    is stored (a Transpose node in the model, no copy by onnxruntime), also when a later call gives
    other strides."""

    def f(x, w):
        return (x @ w.t()).relu().pow(2).sum()

    x = torch.randn(6, 4, requires_grad=True)
    w = torch.randn(3, 4, requires_grad=True)
    backend = make_onnxruntime_backend()
    _assert_backend_matches_eager(f, backend, x, w)
    backward = next(r for r in backend.runners if r.name.endswith("backward"))
    perms = backward.model.meta["input_perms"]
    assert list(perms.values()) == [(1, 0)], perms
    (index,) = perms
    name = backward.model.meta["input_names"][backward.model.meta["input_indices"].index(index)]
    stored = next(i for i in backward.model.graph.inputs if i.name == name)
    assert [d for d in stored.shape] == [3, 4]  # the weight's own layout
    # an input whose strides differ from the compile-time example is copied into the stored layout
    from fx2onnx.backend.runner import GraphRunner

    wt = torch.randn(4, 3)  # contiguous, not a transposed view
    stored = GraphRunner._stored(wt, (1, 0))
    assert stored.is_contiguous() and torch.equal(stored, wt.t())


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_backward_in_three_passes(reduction):
    """log_softmax's backward fed by nll_loss_backward is exp(output) * -v + v at the target:
    no zeros tensor, no row sum; the nodes of nll_loss_backward it replaces are removed."""

    def f(x, t):
        loss = torch.nn.functional.cross_entropy(x, t, reduction=reduction)
        return loss.sum() if reduction == "none" else loss

    x = torch.randn(6, 5, requires_grad=True)
    t = torch.tensor([0, 1, 4, -100, 3, 1])  # one ignored row
    backend = make_onnxruntime_backend()
    compiled = torch.compile(f, backend=backend)
    compiled(x, t).backward()
    got = x.grad.clone()
    x.grad = None
    f(x, t).backward()
    torch.testing.assert_close(got, x.grad)
    backward = next(r for r in backend.runners if r.name.endswith("backward"))
    ops = [n.op_type for n in backward.model.graph]
    assert ops.count("ScatterElements") == 1 and "ReduceSum" not in ops and "Sub" not in ops, ops


def test_runner_session_per_layout():
    """The layout is part of a session's signature: a tensor stored transposed enters its model as
    stored, a contiguous one as it is (a fake value saved for backward may be transposed in torch
    and contiguous once onnxruntime computed it)."""
    from fx2onnx.backend import BackendOptions, GraphRunner

    x, w = torch.randn(5, 4), torch.randn(3, 4)
    gm = make_fx(lambda a, b: torch.relu(a @ b))(x, w.t())
    runner = GraphRunner(gm, [x, w.t()], "g", BackendOptions())
    (got_t,) = runner(x, w.t())
    (got_c,) = runner(x, w.t().contiguous())
    expected = torch.relu(x @ w.t())
    torch.testing.assert_close(got_t, expected)
    torch.testing.assert_close(got_c, expected)
    assert [s.perms for s in runner.sessions.values()] == [{1: (1, 0)}, {}]


@pytest.mark.parametrize("out_features", [8, 2])
def test_weight_gradient_transposes_the_smaller_operand(out_features):
    """dW = dY^T @ X is computed as (X^T @ dY)^T when dW has more rows than columns."""

    def f(x, w):
        return torch.nn.functional.linear(x, w).tanh().sum()

    x = torch.randn(6, 3, requires_grad=True)
    w = torch.randn(out_features, 3, requires_grad=True)
    backend = make_onnxruntime_backend()
    _assert_backend_matches_eager(f, backend, x, w)
    backward = next(r for r in backend.runners if r.name.endswith("backward"))
    model = next(iter(backward.sessions.values())).model
    transposed_back = [
        n for n in model.graph if n.op_type == "Transpose" and n.inputs[0].producer() is not None and n.inputs[0].producer().op_type == "MatMul"
    ]
    assert len(transposed_back) == (1 if out_features > 3 else 0)
