"""The sizes an exported model holds: a dimension the export narrowed (``fx2onnx.frozen_inputs`` in the model's
metadata, :func:`fx2onnx.frozen.narrowed_dimensions`: a table of positions bounds the frames or the tokens, or the
model's code branched on a size) is checked before onnxruntime runs, so that an input outside that range ends in
one line naming the limit and the fix instead of an error inside onnxruntime.

.. code-block:: python

    from fx2onnx.runtime.input_ranges import check_input_ranges
    check_input_ranges(session, {"input_features": features}, "the audio", "cut the audio")
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

#: the metadata key the export writes the narrowed dimensions under
FROZEN_INPUTS = "fx2onnx.frozen_inputs"


def check_input_ranges(session: Any, feeds: dict[str, Any], source: str, fix: str) -> None:
    """A ValueError when an input of ``feeds`` has a dimension outside the range the export narrowed it to.

    :param session: the onnxruntime session of the model (its inputs in the order of the metadata's positions)
    :param feeds: the model's inputs by name
    :param source: what gave the inputs, for the message (``"the audio"``)
    :param fix: what to do, for the message (``"cut the audio"``)
    """
    text = session.get_modelmeta().custom_metadata_map.get(FROZEN_INPUTS)
    names = [i.name for i in session.get_inputs()]
    for entry in (json.loads(text) if text else {}).values():
        if entry.get("kind") != "dim_range" or entry.get("position", len(names)) >= len(names):
            continue
        name = names[entry["position"]]
        if name not in feeds or np.ndim(feeds[name]) <= entry["axis"]:
            continue
        size = np.shape(feeds[name])[entry["axis"]]
        if size < entry["min"] or (entry["max"] is not None and size > entry["max"]):
            why = "its table of positions" if entry.get("weight_bound") else "the export narrowed it"
            limit = f"{entry['min']} to {entry['max']}" if entry["max"] is not None else f"{entry['min']} or more"
            raise ValueError(f"{source} gives {name} of {size} along axis {entry['axis']}: the exported model holds "
                             f"sizes {limit} only ({why}); {fix}.")
