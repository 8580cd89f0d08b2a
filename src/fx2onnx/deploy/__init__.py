"""A checkpoint folder in, a folder out that generates (``python -m fx2onnx export FOLDER``).

* :func:`export_folder`: the export of a folder, its files and its check against eager;
* :func:`folder_task`: the task of a folder, from transformers' auto mappings.
"""

from __future__ import annotations

from .export import FolderExport, export_folder
from .tasks import folder_task

__all__ = ["FolderExport", "export_folder", "folder_task"]
