"""The onnxruntime backend on training steps of transformers decoders with their default configuration.

Each step runs through ``torch.compile(model, backend=...)`` and through an untouched
copy in eager mode: losses and gradients must agree within 1e-5.
"""

from __future__ import annotations

import copy
import logging

import numpy as np
import onnx_ir as ir
import onnxruntime
import pytest
import torch
import transformers
from torch.fx.experimental.proxy_tensor import make_fx

import fx2onnx
from fx2onnx.backend import FallbackWarning, make_onnxruntime_backend
from fx2onnx.backend.training_ops import backend_dispatcher
from fx2onnx.convert.graph_module import convert_graph_module
from fx2onnx.inputs.discover import get_architecture, tiny_config

aten = torch.ops.aten


@pytest.fixture(autouse=True)
def _reset_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _ids(config, batch: int = 2, seq: int = 16, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, config.vocab_size, (batch, seq), generator=torch.Generator().manual_seed(seed))


def _assert_same_steps(model: torch.nn.Module, backend, inputs: list[torch.Tensor], steps: int = 1) -> None:
    """``steps`` AdamW steps through the backend and in eager mode give the same losses and gradients (1e-5)."""
    ref = copy.deepcopy(model)
    compiled = torch.compile(model, backend=backend)
    opt, ref_opt = torch.optim.AdamW(model.parameters(), lr=1e-3), torch.optim.AdamW(ref.parameters(), lr=1e-3)
    for step in range(steps):
        ids = inputs[step % len(inputs)]
        losses = []
        for m, o in ((compiled, opt), (ref, ref_opt)):
            o.zero_grad()
            loss = m(input_ids=ids, labels=ids).loss
            loss.backward()
            losses.append(loss.detach())
        torch.testing.assert_close(losses[0], losses[1], atol=1e-5, rtol=0, msg=f"loss at step {step}")
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            assert (p.grad is None) == (q.grad is None), name
            if q.grad is not None:
                torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=0, msg=f"step {step}, gradient of {name}")
        opt.step()
        ref_opt.step()


@pytest.mark.slow
def test_llama_default_config_trains():
    """transformers' defaults: use_cache=True (an empty DynamicCache whose tensors are graph constants), sdpa."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
    )
    assert config.use_cache
    model = transformers.LlamaForCausalLM(config).train()
    assert model.config._attn_implementation == "sdpa"
    backend = make_onnxruntime_backend()
    _assert_same_steps(model, backend, [_ids(config, seed=0), _ids(config, seed=1)], steps=2)
    stats = backend.stats()
    # one forward and one backward graph, each with its session reused at the second step
    assert stats == {"graphs": 2, "sessions": 2, "calls": 4, "cache_hits": 2, "fallbacks": 0}, stats
    assert [r.name for r in backend.runners] == ["g0_forward", "g1_backward"]
    # the weights the forward graph gives back for the backward one are not copied through onnxruntime
    forward = backend.runners[0].model
    assert sum(kind == "input" for kind, _ in forward.meta["output_layout"]) >= 2 * config.num_hidden_layers
    assert not any(n.op_type == "Identity" and n.inputs[0].is_graph_input() for n in forward.graph)
    # the views it saves (detach, transposed weights, reshaped activations) are torch views, not copies
    layout = forward.meta["output_layout"]
    assert sum(kind == "view" for kind, _ in layout) >= 4 * config.num_hidden_layers, layout
    producers = {o.producer().op_type for o in forward.graph.outputs if o.producer() is not None}
    assert "Transpose" not in producers, producers


@pytest.mark.slow
def test_llama_default_config_with_fusions_and_one_thread():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
    )
    model = transformers.LlamaForCausalLM(config).train()
    backend = make_onnxruntime_backend(optimize="onnxruntime", threads=1)
    _assert_same_steps(model, backend, [_ids(config)])
    forward = backend.runners[0].model
    assert sum(n.op_type == "SimplifiedLayerNormalization" for n in forward.graph) == 5  # 2 per layer and the last one


def test_bad_optimize_and_threads():
    with pytest.raises(ValueError, match="Unknown optimization level 'fast'"):
        make_onnxruntime_backend(optimize="fast")
    with pytest.raises(ValueError, match="threads must be a positive int"):
        make_onnxruntime_backend(threads=0)


class _Bfloat16Scale(torch.nn.Module):
    """A bfloat16 0-d weight (recurrent_gemma keeps such one): onnxruntime's numpy bridge has no bfloat16."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(4, 3)
        self.register_buffer("scale", torch.tensor(1.5, dtype=torch.bfloat16))

    def forward(self, x):
        return self.linear(x) * self.scale.float()


def test_bfloat16_input_and_output():
    model = _Bfloat16Scale()
    ref = copy.deepcopy(model)
    compiled = torch.compile(model, backend=make_onnxruntime_backend())
    x = torch.randn(5, 4)
    compiled(x).sum().backward()
    ref(x).sum().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=0)
    with torch.no_grad():
        doubled = torch.compile(lambda s: (s.float() * 2).to(torch.bfloat16), backend=make_onnxruntime_backend())(model.scale)
    torch.testing.assert_close(doubled, torch.tensor(3.0, dtype=torch.bfloat16))


def _zoo_model(name: str, **overrides) -> torch.nn.Module:
    config = tiny_config(get_architecture(name), **overrides)
    config._attn_implementation = None  # transformers' default (sdpa where the model has it)
    torch.manual_seed(0)
    return get_architecture(name).model_class()(config).train()


@pytest.mark.parametrize(
    "name,overrides",
    [
        ("mixtral", {}),  # experts: transformers::grouped_mm_fallback and its backward
        ("gemma2", {}),  # eager attention, soft-capping, sliding window
        ("deepseek_v2", {}),  # complex rotary embedding: complex tensors saved for backward
        ("gpt2", dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)),  # dropout off to compare gradients
    ],
)
@pytest.mark.slow
def test_zoo_decoder_trains(name, overrides):
    model = _zoo_model(name, **overrides)
    backend = make_onnxruntime_backend()
    _assert_same_steps(model, backend, [_ids(model.config)])
    assert backend.stats()["fallbacks"] == 0


@pytest.mark.slow
def test_dropout_in_training_runs_on_onnxruntime():
    """GPT-2's default configuration drops 10% in training: the masks are drawn by onnxruntime."""
    model = _zoo_model("gpt2")
    assert model.config.resid_pdrop == 0.1
    backend = make_onnxruntime_backend()
    compiled = torch.compile(model, backend=backend)
    ids = _ids(model.config)
    loss = compiled(input_ids=ids, labels=ids).loss
    loss.backward()
    assert torch.isfinite(loss) and all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    ops = {n.op_type for r in backend.runners for n in r.model.graph}
    assert "RandomUniformLike" in ops and backend.stats()["fallbacks"] == 0
    with torch.no_grad():  # eval mode: no dropout, the same logits as eager
        model.eval()
        torch.testing.assert_close(compiled(input_ids=ids).logits, copy.deepcopy(model)(input_ids=ids).logits, atol=1e-5, rtol=0)


def _run_with_backend_converters(fn, *inputs):
    gm = make_fx(fn)(*inputs)
    model = convert_graph_module(gm, list(inputs), dispatcher=backend_dispatcher())
    sess = onnxruntime.InferenceSession(ir.to_proto(model).SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {i.name: x.numpy() for i, x in zip(sess.get_inputs(), inputs)})


def test_native_dropout_training_converter():
    x = torch.rand(200, 100) + 1

    def fn(x):
        out, mask = aten.native_dropout.default(x, 0.3, True)
        return out, mask, aten.native_dropout_backward.default(torch.ones_like(x), mask, 1 / 0.7)

    out, mask, grad = _run_with_backend_converters(fn, x)
    assert mask.dtype == np.bool_ and abs(1 - mask.mean() - 0.3) < 0.02  # 20000 draws
    np.testing.assert_allclose(out, np.where(mask, x.numpy() / 0.7, 0), rtol=1e-6)
    np.testing.assert_allclose(grad, mask / 0.7, rtol=1e-6)


def test_grouped_mm_fallback_converters():
    """Each row times the weight of its expert; an expert without rows; rows past the last offset stay zero."""
    import transformers.integrations.moe  # noqa: F401 - registers the operators

    g = torch.Generator().manual_seed(0)
    x, weight, grad = torch.randn(7, 5, generator=g), torch.randn(3, 5, 4, generator=g), torch.randn(7, 4, generator=g)
    offs = torch.tensor([2, 2, 5], dtype=torch.int32)

    def fn(x, weight, offs, grad):
        out = torch.ops.transformers.grouped_mm_fallback(x, weight, offs)
        return (out, *torch.ops.transformers.grouped_mm_fallback_backward(x, weight, offs, grad))

    expected = fn(x, weight, offs, grad)
    got = _run_with_backend_converters(fn, x, weight, offs, grad)
    assert not expected[0][5:].any() and not got[0][5:].any()
    for e, r in zip(expected, got):
        np.testing.assert_allclose(r, e.numpy(), atol=1e-5)


@torch.library.custom_op("fx2onnx_training_test::scale2", mutates_args=())
def _scale2(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@_scale2.register_fake
def _(x):
    return torch.empty_like(x)


_scale2.register_autograd(lambda ctx, grad: grad * 2)  # the backward graph has standard ops only


class _WithCustomOp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.ops.fx2onnx_training_test.scale2(self.linear(x)).tanh()


def test_fallback_runs_the_unconvertible_graph_eagerly_and_reports(caplog):
    model = _WithCustomOp()
    ref = copy.deepcopy(model)
    backend = make_onnxruntime_backend(fallback=True)
    compiled = torch.compile(model, backend=backend)
    x = torch.randn(5, 4)
    with caplog.at_level(logging.DEBUG, logger="fx2onnx.backend"):
        with pytest.warns(FallbackWarning, match=r"graph 'g0_forward' runs eagerly \(conversion failed\).*fx2onnx_training_test::scale2"):
            compiled(x).sum().backward()
    ref(x).sum().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=0)
    # the forward graph runs eagerly, the backward one on onnxruntime
    assert [(f.graph, f.stage) for f in backend.fallbacks] == [("g0_forward", "conversion")]
    assert isinstance(backend.fallbacks[0].error, fx2onnx.UnsupportedOpError)
    assert [r.name for r in backend.runners] == ["g1_backward"] and backend.runners[0].n_calls == 1
    assert any(r.name == "fx2onnx.backend" and r.exc_info for r in caplog.records)


def test_fallback_when_onnxruntime_fails_at_run_time():
    def wrong_rank(ctx, node, x):
        return ctx.op.Unsqueeze(x, ctx.const([0], torch.int64))  # torch's result keeps the rank of x

    dispatcher = fx2onnx.Dispatcher({torch.ops.fx2onnx_training_test.scale2.default: wrong_rank})
    backend = make_onnxruntime_backend(fallback=True, dispatcher=dispatcher)
    model = _WithCustomOp().eval()
    compiled = torch.compile(model, backend=backend)
    x = torch.randn(5, 4)
    with torch.no_grad(), pytest.warns(FallbackWarning, match=r"'g0_inference' runs eagerly \(run failed\).*a converter is wrong"):
        got = compiled(x)
    with torch.no_grad():
        torch.testing.assert_close(got, model(x))
        torch.testing.assert_close(compiled(x), model(x))  # eager from now on, no second warning
    assert [(f.graph, f.stage) for f in backend.fallbacks] == [("g0_inference", "run")]
    assert backend.runners[0].fallback is backend.fallbacks[0]


def test_no_fallback_by_default_raises():
    compiled = torch.compile(_WithCustomOp(), backend=make_onnxruntime_backend())
    with pytest.raises(Exception, match="fx2onnx_training_test::scale2.*\n(.|\n)*fallback=True"):
        compiled(torch.randn(5, 4))
