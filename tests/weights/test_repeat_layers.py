"""A stack of identical layers captured with two, the others stamped in ONNX (fx2onnx.weights.repeat_layers)."""

from __future__ import annotations

import collections
import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import safetensors.torch
import torch
import transformers

import fx2onnx
from fx2onnx.deploy import export_folder
from fx2onnx.inputs.discover import get_architecture, tiny_config
from fx2onnx.runtime.folder import FolderGenerator
from fx2onnx.testing.tokenizer import write_checkpoint_folder
from fx2onnx.weights.random_checkpoint import padding_rows, write_random_checkpoint
from fx2onnx.weights.repeat_layers import (
    LayersNotRepeatable,
    LayerStack,
    adopt_layer_attributes,
    layer_stack,
    short_config,
    stamp_layers,
)


class Block(torch.nn.Module):
    def __init__(self, index: int, first_differs: bool = False):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)
        self.layer_idx = index
        self.first_differs = first_differs

    def forward(self, x, scale):
        y = x + torch.relu(self.linear(x)) * scale[..., : x.shape[-1]]
        return y * 2 if self.first_differs and self.layer_idx == 0 else y


class Stack(torch.nn.Module):
    def __init__(self, n: int, first_differs: bool = False):
        super().__init__()
        self.embed = torch.nn.Linear(4, 8)
        self.layers = torch.nn.ModuleList(Block(i, first_differs) for i in range(n))
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x, scale):
        x = self.embed(x)
        for layer in self.layers:
            x = layer(x, scale)
        return self.head(x)


def _short_of(full: Stack, first_differs: bool = False) -> Stack:
    short = Stack(2, first_differs)
    short.load_state_dict({k: v for k, v in full.state_dict().items() if not k.startswith(("layers.2", "layers.3"))})
    return short.eval()


def test_stamped_layers_compute_the_full_stack():
    torch.manual_seed(0)
    full = Stack(4).eval()
    x, scale = torch.randn(3, 5, 4), torch.rand(1, 1, 10)
    weights = full.state_dict()
    onx = fx2onnx.to_onnx(_short_of(full), (x, scale), dynamic_shapes=({0: "batch", 1: "seq"}, None),
                          after_conversion=lambda m: stamp_layers(m, LayerStack("layers", 4), weights.__getitem__))
    names = {i.name for i in onx.graph.initializer}
    assert {f"layers.{k}.linear.bias" for k in range(4)} <= names
    assert collections.Counter(n.op_type for n in onx.graph.node)["Relu"] == 4
    session = ort.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
    for shape in ((3, 5, 4), (2, 7, 4)):
        x = torch.randn(*shape)
        got = session.run(None, {"x": x.numpy(), "scale": scale.numpy()})[0]
        np.testing.assert_allclose(got, full(x, scale).detach().numpy(), atol=1e-5)


def test_layers_whose_graphs_differ_are_refused():
    full = Stack(4, first_differs=True).eval()
    x, scale = torch.randn(3, 5, 4), torch.rand(1, 1, 10)
    weights = full.state_dict()
    # the modules look alike (the index is not compared), the graphs of layers 0 and 1 do not
    assert layer_stack(full, type("Config", (), {"num_hidden_layers": 4})()) == LayerStack("layers", 4)
    with pytest.raises(LayersNotRepeatable, match="layers 0 and 1"):
        fx2onnx.to_onnx(_short_of(full, True), (x, scale),
                        after_conversion=lambda m: stamp_layers(m, LayerStack("layers", 4), weights.__getitem__))


def test_layer_stack_refuses_layers_of_several_kinds():
    config = transformers.Gemma3TextConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=6,
                                           num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                                           vocab_size=128, sliding_window=8)
    with torch.device("meta"):
        model = transformers.Gemma3ForCausalLM(config)
    assert layer_stack(model) is None  # five sliding-window layers for one global: fewer than three periods
    llama = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                                     num_attention_heads=2, num_key_value_heads=1, vocab_size=128)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(llama)
    assert layer_stack(model) == LayerStack("model.layers", 4, 1)
    gemma2 = transformers.Gemma2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=6,
                                       num_attention_heads=2, num_key_value_heads=1, head_dim=16, vocab_size=128)
    with torch.device("meta"):
        model = transformers.Gemma2ForCausalLM(gemma2)
    assert layer_stack(model) == LayerStack("model.layers", 6, 2)
    assert short_config(gemma2, 4).layer_types == gemma2.layer_types[:4]
    llama4 = transformers.Llama4TextConfig(hidden_size=32, intermediate_size=64, intermediate_size_mlp=64,
                                           num_hidden_layers=12, num_attention_heads=2, num_key_value_heads=1,
                                           head_dim=16, vocab_size=128, num_local_experts=2)
    with torch.device("meta"):
        model = transformers.Llama4ForCausalLM(llama4)
    # three chunked-attention layers for one global without rotary; moe_layers lists every layer's index
    assert llama4.moe_layers == list(range(12)) and layer_stack(model) == LayerStack("model.layers", 12, 4)
    assert short_config(llama).num_hidden_layers == 2 and llama.num_hidden_layers == 4
    assert short_config(config).layer_types == config.layer_types[:2]


class DenseBlock(Block):
    def __init__(self, index: int):
        super().__init__(index)
        self.extra = torch.nn.Linear(8, 8)

    def forward(self, x, scale):
        y = super().forward(x, scale)
        return y + self.extra(y)


class DenseFirstStack(Stack):
    """A first layer of another kind (DeepSeek's dense layers before its mixtures of experts), then alike ones."""

    def __init__(self, n: int):
        super().__init__(n)
        self.layers[0] = DenseBlock(0)


def test_layers_after_a_different_first_one_are_stamped():
    torch.manual_seed(0)
    full = DenseFirstStack(6).eval()
    stack = layer_stack(full, type("Config", (), {"num_hidden_layers": 6})())
    assert stack == LayerStack("layers", 6, 1, start=1) and stack.captured == 3 and stack.blocks == 5
    short = DenseFirstStack(3).eval()
    short.load_state_dict({k: v for k, v in full.state_dict().items() if not k.startswith(("layers.3", "layers.4",
                                                                                            "layers.5"))})
    x, scale = torch.randn(3, 5, 4), torch.rand(1, 1, 10)
    weights = full.state_dict()
    onx = fx2onnx.to_onnx(short, (x, scale), dynamic_shapes=({0: "batch", 1: "seq"}, None),
                          after_conversion=lambda m: stamp_layers(m, stack, weights.__getitem__))
    assert {f"layers.{k}.linear.bias" for k in range(6)} <= {i.name for i in onx.graph.initializer}
    session = ort.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, {"x": x.numpy(), "scale": scale.numpy()})[0]
    np.testing.assert_allclose(got, full(x, scale).detach().numpy(), atol=1e-5)


class AlternatingStack(Stack):
    """Layers of two kinds alternating (Gemma 2's sliding and global layers), in any number."""

    def __init__(self, n: int):
        super().__init__(n)
        for i, layer in enumerate(self.layers):
            layer.first_differs, layer.layer_idx = i % 2 == 1, 0  # the odd layers double their output


def test_layers_left_after_the_last_period_are_captured_and_renamed():
    torch.manual_seed(0)
    full = AlternatingStack(7).eval()
    stack = layer_stack(full, type("Config", (), {"num_hidden_layers": 7})())
    assert stack == LayerStack("layers", 7, 2) and (stack.blocks, stack.remainder, stack.captured) == (3, 1, 5)
    short = AlternatingStack(5).eval()  # its last layer reads layer 4's weights, as a short model read from a folder
    short.load_state_dict({k: v for k, v in full.state_dict().items() if not k.startswith(("layers.5", "layers.6"))})
    x, scale = torch.randn(3, 5, 4), torch.rand(1, 1, 10)
    weights = full.state_dict()
    onx = fx2onnx.to_onnx(short, (x, scale), dynamic_shapes=({0: "batch", 1: "seq"}, None),
                          after_conversion=lambda m: stamp_layers(m, stack, weights.__getitem__))
    names = [i.name for i in onx.graph.initializer]
    assert [n for n in names if n.endswith("linear.bias")] == [f"layers.{k}.linear.bias" for k in range(7)]
    session = ort.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, {"x": x.numpy(), "scale": scale.numpy()})[0]
    np.testing.assert_allclose(got, full(x, scale).detach().numpy(), atol=1e-5)


def _swap_an_add_of_layer_1(model) -> None:
    """Exchanges the inputs of layer 1's residual sum, as torch.export may order a sum's terms differently per layer."""
    node = next(n for n in model.graph if n.op_type == "Add" and n.metadata_props.get("module") == "layers.1"
                and all(v.const_value is None for v in n.inputs))
    a, b = node.inputs
    node.replace_input_with(0, b)
    node.replace_input_with(1, a)


def test_a_sum_read_in_the_other_order_is_stamped():
    # Gemma 3's sliding layers add their past length and the new tokens' count in either order (torch.export orders
    # the terms by their symbols' names)
    torch.manual_seed(0)
    full = Stack(4).eval()
    x, scale = torch.randn(3, 5, 4), torch.rand(1, 1, 10)
    weights = full.state_dict()

    def swap_then_stamp(model):
        _swap_an_add_of_layer_1(model)
        return stamp_layers(model, LayerStack("layers", 4), weights.__getitem__)

    onx = fx2onnx.to_onnx(_short_of(full), (x, scale), dynamic_shapes=({0: "batch", 1: "seq"}, None),
                          after_conversion=swap_then_stamp)
    session = ort.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, {"x": x.numpy(), "scale": scale.numpy()})[0]
    np.testing.assert_allclose(got, full(x, scale).detach().numpy(), atol=1e-5)


class BufferBlock(Block):
    """A layer with a buffer its constructor computes, not saved (GPT-J's sinusoidal positions, Falcon-H1's
    mup_vector): the same in every layer, or depending on the index when ``by_index``."""

    def __init__(self, index: int, by_index: bool = False):
        super().__init__(index)
        self.register_buffer("table", torch.arange(8.0) / (index + 1 if by_index else 1), persistent=False)

    def forward(self, x, scale):
        return super().forward(x, scale) + self.table


class BufferStack(Stack):
    def __init__(self, n: int, by_index: bool = False):
        super().__init__(n)
        self.layers = torch.nn.ModuleList(BufferBlock(i, by_index) for i in range(n))


def test_buffers_the_checkpoint_lacks_are_shared_when_alike():
    torch.manual_seed(0)
    x, scale = torch.randn(3, 5, 4), torch.rand(1, 1, 10)
    for by_index in (False, True):
        full = BufferStack(4, by_index).eval()
        weights = full.state_dict()  # no table: the checkpoint has no non-persistent buffer
        short = BufferStack(2, by_index).eval()
        short.load_state_dict({k: v for k, v in weights.items() if not k.startswith(("layers.2", "layers.3"))})
        stamp = lambda m: stamp_layers(m, LayerStack("layers", 4), weights.__getitem__)  # noqa: E731
        if by_index:  # a buffer depending on the layer's index: the copies would be wrong
            with pytest.raises(LayersNotRepeatable, match="layers.2.table is not in the checkpoint"):
                fx2onnx.to_onnx(short, (x, scale), after_conversion=stamp)
            continue
        onx = fx2onnx.to_onnx(short, (x, scale), after_conversion=stamp)
        assert not any(i.name.startswith(("layers.2.", "layers.3.")) and "table" in i.name
                       for i in onx.graph.initializer)
        session = ort.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
        got = session.run(None, {"x": x.numpy(), "scale": scale.numpy()})[0]
        np.testing.assert_allclose(got, full(x, scale).detach().numpy(), atol=1e-5)


class PresentBlock(Block):
    def forward(self, x, scale):
        y = super().forward(x, scale)
        value = y * 2  # computed before the key, returned after it (CodeGen's order)
        return y, torch.relu(y), value


class PresentStack(Stack):
    """Each layer also returns two states, its key and value."""

    def __init__(self, n: int):
        super().__init__(n)
        self.layers = torch.nn.ModuleList(PresentBlock(i) for i in range(n))

    def forward(self, x, scale):
        x, states = self.embed(x), []
        for layer in self.layers:
            x, key, value = layer(x, scale)
            states += [key, value]
        return (self.head(x), *states)


def test_stamped_states_keep_the_order_of_layer_1_outputs():
    torch.manual_seed(0)
    full = PresentStack(4).eval()
    short = PresentStack(2).eval()
    short.load_state_dict({k: v for k, v in full.state_dict().items() if not k.startswith(("layers.2", "layers.3"))})
    x, scale = torch.randn(3, 5, 4), torch.rand(1, 1, 10)
    weights = full.state_dict()
    names = ["out", "present_key_0", "present_value_0", "present_key_1", "present_value_1"]
    onx = fx2onnx.to_onnx(short, (x, scale), output_names=names,
                          after_conversion=lambda m: stamp_layers(m, LayerStack("layers", 4), weights.__getitem__))
    expected = [t.detach().numpy() for t in full(x, scale)]
    assert [o.name for o in onx.graph.output] == ["out"] + [f"present_{s}_{k}" for k in range(4)
                                                             for s in ("key", "value")]
    session = ort.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
    for got, want in zip(session.run(None, {"x": x.numpy(), "scale": scale.numpy()}), expected):
        np.testing.assert_allclose(got, want, atol=1e-5)


class ScaledStack(Stack):
    """Each layer's residual scaled by a constant of the number of layers (MiniCPM3's scale_depth / sqrt(layers))."""

    def __init__(self, n: int):
        super().__init__(n)
        for layer in self.layers:
            layer.residual_scale = 1.4 / n**0.5


def test_short_layers_adopt_constants_derived_from_the_layer_count():
    # the two captured layers of a short model take the full model's constant, else every stamped layer computes
    # with the short model's
    full, short = ScaledStack(6), ScaledStack(2)
    stack = LayerStack("layers", 6)
    assert short.layers[1].residual_scale != full.layers[3].residual_scale
    assert adopt_layer_attributes(short, full, stack) == [f"layers.{i}.residual_scale" for i in range(2)]
    assert [layer.residual_scale for layer in short.layers] == [full.layers[3].residual_scale] * 2
    assert adopt_layer_attributes(short, full, stack) == []


def test_random_checkpoint_keeps_padding_rows_at_zero(tmp_path):
    # the row an embedding keeps at zero (padding_idx), as Youtu's from_pretrained zeroes it again over a checkpoint
    config = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=2, vocab_size=128, pad_token_id=5,
                                      architectures=["LlamaForCausalLM"])
    with torch.device("meta"):
        assert padding_rows(transformers.LlamaForCausalLM(config)) == {"model.embed_tokens.weight": 5}
    write_random_checkpoint(config, tmp_path, "float32", std=0.3)
    embed = safetensors.torch.load_file(str(tmp_path / "model.safetensors"))["model.embed_tokens.weight"]
    assert (embed[5] == 0).all() and (embed[4] != 0).all() and (embed[6] != 0).all()


def _tiny(model_type: str, layers: int):
    arch = get_architecture(model_type)
    config = tiny_config(arch, num_hidden_layers=layers)
    config.architectures = [arch.model_class().__name__]
    return config


def _feeds(session):
    rng = np.random.default_rng(0)
    feeds = {}
    for i in session.get_inputs():
        if i.name == "input_ids":
            feeds[i.name] = rng.integers(0, 384, (1, 3)).astype(np.int64)
        elif i.name == "attention_mask":
            feeds[i.name] = np.ones((1, 8), np.int64)
        elif i.name == "position_ids":
            feeds[i.name] = np.array([[5, 6, 7]], np.int64)
        else:  # onnxruntime's GroupQueryAttention takes several new tokens after a past on a batch of one
            shape = [1 if d in ("batch", "batch_size") else 5 if isinstance(d, str) else d for d in i.shape]
            if i.type == "tensor(int64)":  # the count of tokens a sliding cache has seen
                feeds[i.name] = np.zeros(shape, np.int64)
            else:
                feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


@pytest.mark.parametrize("architecture", [
    pytest.param("llama", marks=pytest.mark.slow),  # 12 s; the stamping unit tests above stay fast
    pytest.param("qwen2", marks=pytest.mark.slow),
    pytest.param("phi3", marks=pytest.mark.slow),
    pytest.param("mistral", marks=pytest.mark.slow),  # a sliding cache: its count of tokens seen renamed
    pytest.param("jetmoe", marks=pytest.mark.slow),  # sizes read from data in each layer (experts' counts)
    pytest.param("gemma2", marks=pytest.mark.slow),  # sliding and global layers alternating: a period of 2
])
def test_folder_stamped_equals_full_capture(tmp_path, architecture):
    _stamped_equals_full_capture(tmp_path, architecture, 6 if architecture == "gemma2" else 4)  # three periods


@pytest.mark.slow
def test_folder_stamped_with_a_remainder_equals_full_capture(tmp_path):
    # seven layers alternating sliding and global: three periods stamped, the seventh layer captured after them
    _stamped_equals_full_capture(tmp_path, "gemma2", 7)


@pytest.mark.slow
def test_gemma3_pattern_with_a_remainder_generates_as_transformers(tmp_path):
    # Gemma 3's sliding layers before a global one (three here, six in the published models), ten layers: three
    # periods stamped from two captured, the tenth layer captured after them; greedy tokens equal transformers'
    config = _tiny("gemma3_text", 10)
    config.layer_types = (["sliding_attention"] * 2 + ["full_attention"]) * 3 + ["sliding_attention"]
    checkpoint = str(tmp_path / "checkpoint")
    write_checkpoint_folder(config, checkpoint, dtype="float32", std=0.3)
    lines = []
    result = export_folder(checkpoint, tmp_path / "stamped", log=lines.append)
    assert any("captured 7 of the 10 layers" in line for line in lines), lines
    assert all(c.ok for c in result.checks), result.check_lines()
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    ids = transformers.AutoTokenizer.from_pretrained(checkpoint)("hello world", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        expected = model.generate(ids, max_new_tokens=6, min_new_tokens=6, do_sample=False)[0, ids.shape[1]:]
    assert FolderGenerator(str(tmp_path / "stamped")).generate_text("hello world", 6).new_ids == expected.tolist()


def _stamped_equals_full_capture(tmp_path, architecture: str, layers: int):
    checkpoint = str(tmp_path / "checkpoint")
    write_checkpoint_folder(_tiny(architecture, layers), checkpoint, dtype="bfloat16", std=0.3)
    lines = []
    stamped = export_folder(checkpoint, tmp_path / "stamped", log=lines.append)
    assert any("others copied" in line for line in lines), lines
    assert all(c.ok for c in stamped.checks), stamped.check_lines()
    export_folder(checkpoint, tmp_path / "full", capture_all_layers=True, validate=False)
    a = onnx.load(str(tmp_path / "stamped" / "onnx" / "model.onnx"), load_external_data=False)
    b = onnx.load(str(tmp_path / "full" / "onnx" / "model.onnx"), load_external_data=False)
    assert collections.Counter(n.op_type for n in a.graph.node) == collections.Counter(n.op_type for n in b.graph.node)
    assert [(i.name, str(i.type)) for i in a.graph.input] == [(i.name, str(i.type)) for i in b.graph.input]
    assert [o.name for o in a.graph.output] == [o.name for o in b.graph.output]
    meta_a, meta_b = ({p.key: p.value for p in m.metadata_props} for m in (a, b))
    pairs = json.loads(meta_a["fx2onnx.cache"])
    assert meta_a == meta_b
    assert sum(k.endswith((".key", ".value")) for k in pairs) == 2 * layers  # past_key_values.<i>.key
    sessions = [ort.InferenceSession(str(tmp_path / p / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
                for p in ("stamped", "full")]
    feeds = _feeds(sessions[0])
    for x, y in zip(*(s.run(None, feeds) for s in sessions)):
        np.testing.assert_array_equal(x, y)
