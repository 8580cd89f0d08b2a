"""Back-links of the ``_modules/`` pages (``[docs]``) pointing to the documented object.

:mod:`sphinx.ext.viewcode` builds a back-link as ``<page>#<prefix>.<name>`` with one prefix per
module: the module name under which the first object of that module it met was documented.
The public functions are documented as ``fx2onnx.to_onnx`` (their module is
``fx2onnx.convert.api``) and their neighbours as ``fx2onnx.convert.api.optimize_model``: the
neighbours' links then point to ``#fx2onnx.optimize_model``, an anchor which does not exist.
:func:`fix_backlinks` replaces every such link by the page and anchor the Python domain
recorded for the object.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

_BACKLINK = re.compile(r'(<a class="viewcode-back" href=")([^"#]*)#([^"]+)(")')


def _resolve(fullname: str) -> Any:
    """The object a dotted name refers to (the longest importable module, then attributes)."""
    parts = fullname.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for attribute in parts[i:]:
                obj = getattr(obj, attribute)
        except AttributeError:
            return None
        return obj
    return None


def _anchors(app) -> dict[tuple[str, str], tuple[str, str]]:
    """(module, qualified name) -> (docname, anchor) of every documented function, class or method
    (computed once per build, when the pages are written)."""
    if not hasattr(app, "_fx2onnx_viewcode_anchors"):
        anchors = {}
        for fullname, entry in app.env.domains["py"].objects.items():
            if entry.objtype not in ("function", "class", "method", "exception", "property"):
                continue
            obj = _resolve(fullname)
            obj = getattr(obj, "fget", obj)  # a property: its getter
            module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
            if isinstance(module, str) and isinstance(qualname, str):
                anchors.setdefault((module, qualname), (entry.docname, entry.node_id))
        app._fx2onnx_viewcode_anchors = anchors
    return app._fx2onnx_viewcode_anchors


def fix_backlinks(app, pagename: str, templatename: str, context: dict, doctree) -> None:
    """``html-page-context``: the ``[docs]`` links of a ``_modules/`` page, each to its object's anchor."""
    if not pagename.startswith("_modules/") or "body" not in context:
        return
    modname = pagename[len("_modules/") :].replace("/", ".")
    entry = getattr(app.env, "_viewcode_modules", {}).get(modname)
    if not entry:
        return
    prefix = entry[3] + "."
    anchors = _anchors(app)

    def replace(match: re.Match) -> str:
        anchor = match.group(3)
        name = anchor[len(prefix) :] if anchor.startswith(prefix) else anchor
        found = anchors.get((modname, name))
        if found is None or found[1] == anchor:
            return match.group(0)
        docname, node_id = found
        return match.group(1) + app.builder.get_relative_uri(pagename, docname) + "#" + node_id + match.group(4)

    context["body"] = _BACKLINK.sub(replace, context["body"])
