"""A model named on the command line, with its inputs and dynamic shapes.

``python -m fx2onnx export|validate|compare`` take a model as either

* ``module:attribute`` (``module`` an importable module or the path of a ``.py`` file),
  where the attribute is

  - a function returning ``(model, inputs)`` or ``(model, inputs, dynamic_shapes)``;
    ``inputs`` is a tuple of positional arguments or a dict of keyword arguments,
  - a :class:`torch.nn.Module` instance or class (built without arguments) with an
    attribute or method ``example_inputs`` (same forms) and optionally ``dynamic_shapes``;

* or the name of a tiny :epkg:`transformers` architecture of
  :func:`fx2onnx.zoo.list_tiny_models` (``llama``, ``phi3``...), built with random weights.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch

from .zoo import get_tiny_model, list_tiny_models


@dataclasses.dataclass
class ModelSpec:
    """A model, one or two input sets and the dynamic shapes of the inputs."""

    #: the model to export (a ``torch.nn.Module``)
    model: Any
    #: the positional inputs of the export
    args: tuple
    #: the keyword inputs of the export
    kwargs: dict[str, Any]
    #: the ``dynamic_shapes`` of the export, None for a static one
    dynamic_shapes: Any = None
    #: positional inputs of other shapes, to check a dynamic model (None when not known)
    args2: tuple | None = None
    #: keyword inputs of other shapes, to check a dynamic model (None when not known)
    kwargs2: dict[str, Any] | None = None
    #: whether the model is a transformers model (the export then runs inside the patches)
    is_transformers: bool = False
    #: the name the model was given on the command line
    name: str = ""


def _split_inputs(inputs: Any) -> tuple[tuple, dict[str, Any]]:
    if isinstance(inputs, dict):
        return (), dict(inputs)
    if isinstance(inputs, (list, tuple)):
        return tuple(inputs), {}
    if isinstance(inputs, torch.Tensor):
        return (inputs,), {}
    raise TypeError(
        f"The inputs must be a tuple of positional arguments or a dict of keyword arguments, not {type(inputs).__name__}."
    )


def _import(module_name: str):
    if module_name.endswith(".py") or os.sep in module_name or "/" in module_name:
        path = Path(module_name)
        if not path.exists():
            raise FileNotFoundError(f"{module_name!r} does not exist: give an importable module or a .py file.")
        spec = importlib.util.spec_from_file_location(f"_fx2onnx_cli_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module
    return importlib.import_module(module_name)


def _from_attribute(obj: Any, text: str) -> ModelSpec:
    if isinstance(obj, type) and issubclass(obj, torch.nn.Module):
        obj = obj()
    if isinstance(obj, torch.nn.Module):
        inputs = getattr(obj, "example_inputs", None)
        if inputs is None:
            raise ValueError(
                f"{text} is a torch.nn.Module without inputs: give it an attribute or a method "
                "'example_inputs' (a tuple of args or a dict of kwargs), or name a function "
                "returning (model, inputs[, dynamic_shapes]) instead."
            )
        inputs = inputs() if callable(inputs) else inputs
        dynamic_shapes = getattr(obj, "dynamic_shapes", None)
        dynamic_shapes = dynamic_shapes() if callable(dynamic_shapes) else dynamic_shapes
        args, kwargs = _split_inputs(inputs)
        return ModelSpec(obj.eval(), args, kwargs, dynamic_shapes, name=text)
    if callable(obj):
        result = obj()
        if not isinstance(result, tuple) or len(result) not in (2, 3):
            raise ValueError(
                f"{text} must return (model, inputs) or (model, inputs, dynamic_shapes), "
                f"it returned a {type(result).__name__}."
            )
        model, inputs = result[:2]
        args, kwargs = _split_inputs(inputs)
        if hasattr(model, "eval"):
            model = model.eval()
        return ModelSpec(model, args, kwargs, result[2] if len(result) == 3 else None, name=text)
    raise TypeError(f"{text} is a {type(obj).__name__}: expected a torch.nn.Module, a class or a function.")


def load_model_spec(text: str, with_cache: bool = False) -> ModelSpec:
    """Builds the model named by ``text`` (see the module's documentation)."""
    if ":" in text:
        module_name, attribute = text.rsplit(":", 1)
        module = _import(module_name)
        if not hasattr(module, attribute):
            raise AttributeError(f"Module {module_name!r} has no attribute {attribute!r}.")
        return _from_attribute(getattr(module, attribute), text)

    names = list_tiny_models()
    if text not in names:
        raise ValueError(
            f"{text!r} is neither 'module:attribute' nor a tiny architecture; the architectures are {names}."
        )
    tiny = get_tiny_model(text, with_cache=with_cache)
    return ModelSpec(
        tiny.model, (), dict(tiny.inputs), tiny.dynamic_shapes, (), dict(tiny.inputs2),
        is_transformers=True, name=text,
    )


def random_feeds(model: onnx.ModelProto, dims: dict[str, int] | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs for an ONNX model: a dimension named ``d`` takes ``dims[d]`` (default 3).

    Integer inputs (token ids, positions) take values in ``[0, 8)``, floats follow a normal law.
    """
    dims = dims or {}
    rng = np.random.default_rng(seed)
    initializers = {init.name for init in model.graph.initializer}
    feeds: dict[str, np.ndarray] = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        shape = [d.dim_value if d.HasField("dim_value") else dims.get(d.dim_param, 3) for d in tensor.shape.dim]
        if np.issubdtype(dtype, np.integer):
            feeds[value.name] = rng.integers(0, 8, size=shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[value.name] = rng.integers(0, 2, size=shape).astype(bool)
        else:
            feeds[value.name] = rng.standard_normal(shape).astype(dtype)
    return feeds
