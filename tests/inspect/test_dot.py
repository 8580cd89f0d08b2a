"""fx2onnx.to_dot: the DOT text renders with the dot program and holds the expected nodes and clusters."""

from __future__ import annotations

import re

import onnx
import onnx.helper as oh
import pytest
import torch
from torch._higher_order_ops.scan import scan

import fx2onnx
from fx2onnx.inspect.dot import find_dot, render_dot, to_dot


class Cond(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3, 3)

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: self.linear(x).relu(), lambda x: x - 1, (x,))


class CumulativeSum(torch.nn.Module):
    def forward(self, init, xs):
        def step(carry, x):
            carry = carry + x
            return carry, carry * 2

        last, stacked = scan(step, init, xs)
        return last, stacked


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.sigmoid(self.linear(x))


class TwoBlocks(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first, self.second = Block(), Block()

    def forward(self, x):
        return self.second(self.first(x))


def _svg(dot: str) -> str:
    svg = render_dot(dot, "svg").decode("utf-8")
    assert svg.lstrip().startswith("<?xml") and "</svg>" in svg
    return svg


def _titles(svg: str, kind: str) -> list[str]:
    """Titles of the SVG groups of one kind (node, cluster)."""
    return re.findall(rf'<g id="{"clust" if kind == "cluster" else "node"}\d+" class="{kind}">\s*<title>([^<]*)</title>', svg)


def _labels(svg: str) -> str:
    return " ".join(re.findall(r"<text[^>]*>([^<]*)</text>", svg))


def test_find_dot():
    assert find_dot()


def test_onnx_if_subgraphs_as_clusters(tmp_path):
    x = torch.randn(2, 3)
    model = Cond()
    onx = fx2onnx.to_onnx(model, (x,), dynamic_shapes=({0: "batch"},))
    assert fx2onnx.validate(onx, model, (torch.randn(5, 3),)).ok
    path = tmp_path / "cond.onnx"
    onnx.save(onx, path)
    dot = to_dot(path)  # a path works as well as the model
    assert dot == to_dot(onx)
    svg = _svg(dot)
    clusters, text = _titles(svg, "cluster"), _labels(svg)
    assert len(clusters) == 2, clusters
    assert "then_branch" in text and "else_branch" in text
    for op in ("ReduceSum", "Greater", "If", "Gemm", "Relu", "Sub"):
        assert op in text, op
    # inputs and outputs carry their shapes with the dimension names, weights are listed in the node
    assert "float32[batch,3]" in text and "linear.weight" in text
    n_nodes = len(_titles(svg, "node"))
    # 3 + 2 + 1 nodes, 1 input, 3 outputs (the graph's and one per branch)
    assert n_nodes == 10, n_nodes


def test_onnx_scan_body_as_cluster():
    model = CumulativeSum()
    init, xs = torch.zeros(3), torch.randn(6, 3)
    onx = fx2onnx.to_onnx(model, (init, xs), dynamic_shapes=(None, {0: "steps"}))
    assert fx2onnx.validate(onx, model, (torch.randn(3), torch.randn(9, 3))).ok
    svg = _svg(to_dot(onx))
    text = _labels(svg)
    assert len(_titles(svg, "cluster")) == 1
    assert "Scan" in text and "body" in text and "Add" in text and "Mul" in text
    assert "float32[steps,3]" in text


def test_onnx_local_functions_as_clusters():
    model = TwoBlocks()
    x = torch.randn(2, 4)
    onx = fx2onnx.to_onnx(model, (x,), export_modules_as_functions={Block})
    assert len(onx.functions) >= 1
    assert fx2onnx.validate(onx, model, (x,)).ok
    dot = to_dot(onx)
    svg = _svg(dot)
    # one cluster per function, drawn once however many calls
    assert len(_titles(svg, "cluster")) == len(onx.functions)
    text = _labels(svg)
    assert "function" in text and "Sigmoid" in text
    assert "local functions" in text


def test_onnx_handmade_loop_with_outer_value():
    body = oh.make_graph(
        [oh.make_node("Add", ["acc_in", "step"], ["acc_out"]), oh.make_node("Identity", ["cond_in"], ["cond_out"])],
        "loop_body",
        [
            oh.make_tensor_value_info("i", onnx.TensorProto.INT64, []),
            oh.make_tensor_value_info("cond_in", onnx.TensorProto.BOOL, []),
            oh.make_tensor_value_info("acc_in", onnx.TensorProto.FLOAT, [2]),
        ],
        [
            oh.make_tensor_value_info("cond_out", onnx.TensorProto.BOOL, []),
            oh.make_tensor_value_info("acc_out", onnx.TensorProto.FLOAT, [2]),
        ],
    )
    graph = oh.make_graph(
        [oh.make_node("Loop", ["n", "", "x"], ["y"], body=body)],
        "with_loop",
        [
            oh.make_tensor_value_info("n", onnx.TensorProto.INT64, []),
            oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2]),
            oh.make_tensor_value_info("step", onnx.TensorProto.FLOAT, [2]),
        ],
        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])
    dot = to_dot(model)
    # `step` comes from the main graph into the body: a dotted edge written outside the cluster
    assert re.search(r"i\d+ -> n\d+ \[label=\"float32\[2\]\", style=dotted\];", dot), dot
    svg = _svg(dot)
    assert len(_titles(svg, "cluster")) == 1 and "Loop" in _labels(svg)


def test_exported_program_cond_submodules_as_clusters():
    ep = torch.export.export(Cond(), (torch.randn(2, 3),), dynamic_shapes=({0: torch.export.Dim("batch")},))
    svg = _svg(to_dot(ep))
    text = _labels(svg)
    assert len(_titles(svg, "cluster")) == 2
    assert "true_graph_0" in text and "false_graph_0" in text
    assert "aten.linear" in text and "aten.relu" in text and "cond" in text
    # the parameters are listed in the node using them, not drawn as inputs of the main graph
    assert "linear.weight" in text and "float32[s" in text


def test_graph_module_without_shapes():
    gm = torch.fx.symbolic_trace(TwoBlocks())
    svg = _svg(to_dot(gm))
    text = _labels(svg)
    assert "first.linear" in text and "second.linear" in text and "sigmoid" in text
    assert _titles(svg, "cluster") == []


def test_wrong_type():
    with pytest.raises(TypeError, match="torch.export.export"):
        to_dot(TwoBlocks())


def test_public_name():
    assert fx2onnx.to_dot is to_dot


def test_plot_dot_shows_the_png():
    import matplotlib

    matplotlib.use("Agg")
    from fx2onnx.inspect.dot import plot_dot

    gm = torch.fx.symbolic_trace(TwoBlocks())
    ax = plot_dot(gm, title="blocks")
    (image,) = ax.get_images()
    height, width = image.get_array().shape[:2]
    assert height > 100 and width > 50 and ax.get_title() == "blocks"


def test_graph_picture_svg_and_gallery_scraper(tmp_path):
    import importlib.util
    from pathlib import Path

    from fx2onnx.inspect.dot import GraphPicture

    gm = torch.fx.symbolic_trace(TwoBlocks())
    picture = GraphPicture(gm, title="two blocks")
    assert picture.svg.lstrip().startswith("<?xml") and "<svg" in picture.svg and "two blocks" in picture.svg
    assert picture.save(tmp_path / "g.svg").read_text(encoding="utf-8") == picture.svg
    assert picture._repr_html_().startswith("<div") and "<?xml" not in picture._repr_html_()
    # the gallery's scraper writes the new pictures of a cell once, as SVG linked to the full size
    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("gallery_scrapers", root / "_doc" / "gallery_scrapers.py")
    scrapers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scrapers)
    images = tmp_path / "auto_examples" / "sub" / "images"
    images.mkdir(parents=True)
    (images / "sphx_glr_plot_x_001.png").write_bytes(b"stale")

    class Paths:
        def __init__(self):
            self.paths = []

        def __next__(self):
            self.paths.append(str(images / f"sphx_glr_plot_x_{len(self.paths) + 1:03d}.png"))
            return self.paths[-1]

    block_vars = {"example_globals": {"picture": picture, "other": 3}, "image_path_iterator": Paths()}
    rst = scrapers.graph_pictures(None, block_vars, {"src_dir": str(tmp_path)})
    assert ".. figure:: /auto_examples/sub/images/sphx_glr_plot_x_001.svg" in rst
    assert ":target: ../../_images/sphx_glr_plot_x_001.svg" in rst and "two blocks" in rst
    assert (images / "sphx_glr_plot_x_001.svg").read_text(encoding="utf-8") == picture.svg
    assert (images / "sphx_glr_plot_x_001.png").read_bytes()[:4] == b"\x89PNG"  # the thumbnail's source
    assert scrapers.graph_pictures(None, block_vars, {"src_dir": str(tmp_path)}) == ""  # shown once


def test_edge_labels_as_large_as_node_labels():
    """A picture wider than the page is scaled down: the shapes on the edges must stay as
    readable as the nodes' labels (they were 8 points against 10)."""
    from fx2onnx.inspect.dot import GraphPicture

    ep = torch.export.export(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()), (torch.randn(2, 4),))
    picture = GraphPicture(ep, title="sizes")
    sizes = {}
    for kind in ("node", "edge"):
        groups = re.findall(rf'<g id="{kind}\d+" class="{kind}">(.*?)</g>', picture.svg, flags=re.S)
        sizes[kind] = {float(s) for g in groups for s in re.findall(r'<text[^>]*font-size="([0-9.]+)"', g)}
    assert sizes["node"] and sizes["edge"], sizes
    assert min(sizes["edge"]) >= max(sizes["node"]), sizes
