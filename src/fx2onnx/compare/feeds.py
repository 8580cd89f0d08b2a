"""Loading models and checking the feeds given to them.

Shared by :mod:`fx2onnx.compare` and :mod:`fx2onnx.profiling`: every bad input
raises an error naming what the model expects.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import numpy as np
import onnx

from ..validation import to_numpy


def load_model(
    model: onnx.ModelProto | str | os.PathLike, load_external_data: bool = True
) -> onnx.ModelProto:
    """Returns a ModelProto, loading it when ``model`` is a path.

    Raises FileNotFoundError naming the path when it does not exist.
    ``load_external_data=False`` leaves the weights stored outside the file
    where they are (enough to read the inputs).
    """
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (str, os.PathLike)):
        if not os.path.exists(model):
            raise FileNotFoundError(f"ONNX model {str(model)!r} does not exist.")
        return onnx.load(str(model), load_external_data=load_external_data)
    raise TypeError(
        f"Expected an onnx.ModelProto or a path to an .onnx file, got {type(model).__name__}."
    )


def input_names(model: onnx.ModelProto) -> list[str]:
    """The names of the true inputs of a model (initializers listed as inputs are excluded)."""
    inits = {i.name for i in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in inits]


def _expected_dtype(model: onnx.ModelProto, name: str) -> np.dtype | None:
    for vi in model.graph.input:
        if vi.name == name and vi.type.HasField("tensor_type"):
            elem = vi.type.tensor_type.elem_type
            if elem == onnx.TensorProto.UNDEFINED:
                return None
            try:
                return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem))
            except (KeyError, TypeError, ValueError):
                return None
    return None


def _expected_rank(model: onnx.ModelProto, name: str) -> int | None:
    for vi in model.graph.input:
        if vi.name == name and vi.type.HasField("tensor_type"):
            if vi.type.tensor_type.HasField("shape"):
                return len(vi.type.tensor_type.shape.dim)
    return None


def check_feeds(
    model: onnx.ModelProto, feeds: Mapping[str, Any] | Sequence[Any]
) -> dict[str, np.ndarray]:
    """Turns ``feeds`` into a dict of numpy arrays keyed by the model's input names.

    :param model: the model the feeds are for
    :param feeds: a dict keyed by input names, or a list/tuple in the order of the
        inputs; values are numpy arrays, torch tensors or Python scalars
    :return: ``{input_name: np.ndarray}``
    :raises ValueError: when names, count, dtype or rank do not match, naming the
        expected inputs

    .. code-block:: python

        feeds = check_feeds(model, {"x": torch.randn(2, 3)})
    """
    names = input_names(model)
    expected = ", ".join(f"{n!r}" for n in names)
    if isinstance(feeds, Mapping):
        given = list(feeds)
        missing = [n for n in names if n not in feeds]
        unknown = [n for n in given if n not in names]
        if missing or unknown:
            raise ValueError(
                f"The feeds do not match the model inputs: the model expects [{expected}], "
                f"got {given} (missing {missing}, unexpected {unknown}). Give a dict keyed by "
                f"the expected names, or a list of values in that order."
            )
        values = [feeds[n] for n in names]
    elif isinstance(feeds, (list, tuple)):
        if len(feeds) != len(names):
            raise ValueError(
                f"The model expects {len(names)} inputs [{expected}] but {len(feeds)} values "
                f"were given."
            )
        values = list(feeds)
    else:
        raise TypeError(
            f"feeds must be a dict keyed by the input names [{expected}] or a list/tuple of "
            f"values, not {type(feeds).__name__}."
        )
    result: dict[str, np.ndarray] = {}
    for name, value in zip(names, values):
        array = to_numpy(value)
        dtype = _expected_dtype(model, name)
        if dtype is not None and array.dtype != dtype:
            raise ValueError(
                f"Input {name!r} expects dtype {dtype} but got {array.dtype}; convert it "
                f"(e.g. ``x.astype(np.{dtype})``)."
            )
        rank = _expected_rank(model, name)
        if rank is not None and array.ndim != rank:
            raise ValueError(
                f"Input {name!r} expects a tensor of rank {rank} but got shape {array.shape}."
            )
        result[name] = array
    return result


def map_feeds(
    model1: onnx.ModelProto, model2: onnx.ModelProto, feeds1: dict[str, np.ndarray]
) -> tuple[dict[str, np.ndarray], str | None]:
    """Builds the feeds of ``model2`` from the checked feeds of ``model1``.

    Inputs are matched by name when both models use the same names, by position
    otherwise; the second value returned says how they were mapped (None when by name).
    """
    names1, names2 = input_names(model1), input_names(model2)
    if names1 == names2:
        return dict(feeds1), None
    if len(names1) != len(names2):
        raise ValueError(
            f"The two models do not take the same number of inputs: model1 expects {names1}, "
            f"model2 expects {names2}."
        )
    mapping = ", ".join(f"{a!r} -> {b!r}" for a, b in zip(names1, names2) if a != b)
    note = f"inputs have different names, mapped by position: {mapping}"
    return check_feeds(model2, [feeds1[n] for n in names1]), note
