"""Image scraper of the gallery: graph pictures (:class:`fx2onnx.inspect.dot.GraphPicture`) as SVG.

sphinx-gallery calls :func:`graph_pictures` after each code cell (``image_scrapers`` in
``conf.py``). Every picture the cell created (a variable of the example holding a
``GraphPicture`` not shown yet) is written next to the matplotlib figures, shown at its
natural size (never wider than the page) and linked to the full-size SVG; a PNG twin
(not shown) serves as the example's thumbnail.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def _rst(svg_path: Path, src_dir: Path, title: str | None) -> str:
    rel = Path(os.path.relpath(svg_path, src_dir)).as_posix()
    # the page lives in the folder above images/; Sphinx copies every image into _images/
    depth = len(Path(rel).parent.parent.parts)
    target = "../" * depth + "_images/" + svg_path.name
    alt = (title or "graph").replace("\n", " ")
    lines = [f".. figure:: /{rel}", f"    :alt: {alt}", "    :class: fx-graph", f"    :target: {target}", ""]
    caption = f"{title} (click for the full-size picture)" if title else "Click for the full-size picture."
    return "\n".join(lines + ["    " + caption, ""]) + "\n"


def graph_pictures(block: Any, block_vars: dict[str, Any], gallery_conf: dict[str, Any], **kwargs: Any) -> str:
    """Writes the new graph pictures of a cell, returns their rst."""
    from fx2onnx.inspect.dot import GraphPicture, render_dot

    pictures = [v for v in list(block_vars["example_globals"].values()) if isinstance(v, GraphPicture) and not v.shown]
    rst = []
    for picture in pictures:
        path = Path(next(block_vars["image_path_iterator"])).with_suffix(".svg")
        picture.save(path)
        # a PNG twin for the thumbnail: sphinx-gallery looks for the .png first
        render_dot(picture.dot, "png", path.with_suffix(".png"))
        picture.shown = True
        rst.append(_rst(path, Path(gallery_conf["src_dir"]), picture.title))
    return "\n" + "".join(rst) if rst else ""
