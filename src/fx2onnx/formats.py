"""Names shared by what writes an exported model or folder and what reads it.

The exporter and the optimizer write these keys into a model's metadata, the folder export writes the
metadata file, the runtime reads them back: they live here, below both, so that the runtime imports
nothing of the converter.

.. code-block:: python

    import onnx
    from fx2onnx.formats import CACHE_METADATA_KEY

    model = onnx.load("model.onnx")
    pairs = {p.key: p.value for p in model.metadata_props}.get(CACHE_METADATA_KEY)
"""

#: the metadata file of an exported folder: its pieces, task and what the export froze
FOLDER_METADATA = "fx2onnx.json"

#: a model's metadata key: which output feeds which input at the next step (a JSON list of pairs)
CACHE_METADATA_KEY = "fx2onnx.cache"

#: a model's metadata key: the cache is updated in place in shared buffers (the optimizer's rewrite)
IN_PLACE_METADATA_KEY = "fx2onnx.cache_in_place"
