"""The package's layers: no module imports a higher layer, the runtime imports nothing of the converter, the
import graph has no circle, and the old import paths still work (with a deprecation warning)."""

import importlib
import sys
import warnings

import pytest

from fx2onnx.layers import LAYERS, import_cycles, import_graph, layer_of, layer_violations, layers_dot

GRAPH = import_graph()


def test_every_module_has_a_layer():
    layers = {layer_of(module) for module in GRAPH}
    assert layers <= {name for name, _, _ in LAYERS}
    assert {"runtime", "export machinery", "inputs", "deploy", "testing", "zoo"} <= layers


def test_no_module_imports_a_higher_layer():
    assert layer_violations(GRAPH) == []


def test_no_import_circle():
    assert import_cycles(GRAPH) == []


def _write_package(root, files):
    package = root / "fx2onnx"
    for name, text in files.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for folder in [package, *[p for p in package.rglob("*") if p.is_dir()]]:
        (folder / "__init__.py").touch()
    return package


def test_the_check_sees_an_upward_import_a_circle_and_a_converter_import(tmp_path):
    package = _write_package(tmp_path, {
        "convert/api.py": "def to_onnx():\n    from ..deploy.export import export_folder\n",
        "deploy/export.py": "from ..convert.api import to_onnx\n",
        "runtime/loop.py": "import fx2onnx.validation\n",
        "validation.py": "",
    })
    graph = import_graph(package)
    violations = layer_violations(graph)
    assert any(v.startswith("fx2onnx.convert.api:2 (export machinery) imports fx2onnx.deploy.export") for v in violations)
    assert any(v.startswith("fx2onnx.runtime.loop:1 (runtime) imports fx2onnx.validation") for v in violations)
    assert import_cycles(graph) == [["fx2onnx.convert.api", "fx2onnx.deploy.export"]]


def test_an_old_path_and_type_checking_are_not_dependencies(tmp_path):
    package = _write_package(tmp_path, {
        "models/tasks.py": 'from .._moved import moved_to\n\nmoved_to(__name__, "fx2onnx.inputs.tasks")\n',
        "inputs/tasks.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..deploy import x\n",
        "_moved.py": "",
    })
    graph = import_graph(package)
    assert graph["fx2onnx.models.tasks"] == [] and graph["fx2onnx.inputs.tasks"] == []


def test_an_old_package_attribute_warns_and_gives_the_new_name():
    import fx2onnx.models
    import fx2onnx.zoo

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = fx2onnx.models.get_tiny_model
    assert found is fx2onnx.zoo.get_tiny_model
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)


def test_the_picture_names_every_layer():
    dot = layers_dot(GRAPH)
    assert dot.startswith("digraph layers {") and all(f'"{name}"' in dot for name, _, _ in LAYERS)


@pytest.mark.parametrize("old, new", [
    ("fx2onnx.models.tasks", "fx2onnx.inputs.tasks"),
    ("fx2onnx.models.vlm_folder", "fx2onnx.testing.vlm_folder"),
    ("fx2onnx.weights.task_inputs", "fx2onnx.inputs.folder_inputs"),
    ("fx2onnx.models.zoo", "fx2onnx.zoo.architectures"),
    ("fx2onnx.models.library_zoo", "fx2onnx.zoo.library_zoo"),
])
def test_an_old_import_path_warns_and_gives_the_new_module(old, new):
    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert any(issubclass(w.category, DeprecationWarning) and new in str(w.message) for w in caught)


def test_a_moved_builder_warns_from_its_old_module():
    old = importlib.import_module("fx2onnx.zoo.task_inputs")
    with pytest.warns(DeprecationWarning, match="fx2onnx.inputs.task_inputs"):
        builder = old.image_shape
    assert builder is importlib.import_module("fx2onnx.inputs.task_inputs").image_shape
