"""Sphinx configuration of the fx2onnx site.

The build is offline (no intersphinx, no remote images) and warnings are errors
(``make html`` runs ``sphinx-build -W --keep-going``). Every gallery example in
``_doc/examples`` runs at each build; the first failing one aborts the build.
``FX2ONNX_GALLERY_PATTERN=<regex>`` restricts the examples which run (the others
are rendered without outputs), e.g. ``FX2ONNX_GALLERY_PATTERN=linreg make html``.

Pages generated at build time come from ``_doc/gen_*.py``: each module defines
``generate(app)``, called (in file name order) when the builder starts.
"""

from __future__ import annotations

import datetime
import importlib.util
import logging
import os
import re
import sys
import sysconfig
import warnings
from pathlib import Path

import fx2onnx

ROOT = Path(__file__).resolve().parent
# _doc/gallery_order.py: the order of the examples inside a gallery subsection
sys.path.insert(0, str(ROOT / "_doc"))
import gallery_memory  # noqa: E402  (_doc/gallery_memory.py: the memory column of the gallery)
import viewcode_links  # noqa: E402  (_doc/viewcode_links.py: the [docs] links of _modules/)

project = "fx2onnx"
author = "fx2onnx contributors"
copyright = f"{datetime.date.today().year}, {author}"
version = release = fx2onnx.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx.ext.graphviz",
    "sphinx.ext.viewcode",
    "sphinx_gallery.gen_gallery",
    "sphinx_runpython.epkg",
    "sphinx_runpython.runpython",
]

root_doc = "index"
source_suffix = {".rst": "restructuredtext"}
exclude_patterns = [
    "_build",
    "_build_gen",
    ".venv",
    "venv",
    "src",
    "tests",
    "bench",
    ".ci",
    ".github",
    ".pytest_cache",
    "README.md",
    "_doc/examples",  # the gallery sources: sphinx-gallery renders them in auto_examples
    "auto_examples/*.ipynb",
    "auto_examples/*.py",
    "auto_examples/**/*.ipynb",
    "auto_examples/**/*.py",
    "**/*.zip",
]
templates_path: list[str] = []

html_theme = "furo"
html_title = f"fx2onnx {release}"
# _static: the CSS of the wide tables and the script sorting and filtering them (no CDN:
# the site works offline)
html_static_path = ["_static"]
html_css_files = ["fx2onnx.css"]
html_js_files = ["fx2onnx_tables.js"]
html_show_sourcelink = False

# autodoc
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_google_docstring = True
napoleon_numpy_docstring = False

# graphviz: the `dot` program is graphviz-pure, a pip package (requirements-docs.txt)
# installed next to the interpreter running Sphinx (sys.executable's folder); no system
# Graphviz is needed. find_dot() explains what to install when none is found.
from fx2onnx.inspect.dot import find_dot  # noqa: E402

graphviz_dot = find_dot()
graphviz_output_format = "svg"

# sphinx-gallery
_pattern = os.environ.get("FX2ONNX_GALLERY_PATTERN", "").strip()
sphinx_gallery_conf = {
    "examples_dirs": "_doc/examples",
    "gallery_dirs": "auto_examples",
    # only plot_*.py files run; a pattern restricts them further (searched in the file name,
    # "plot_name.py$" included: the name starts at the lookahead)
    "filename_pattern": rf"/(?=plot_)[^/]*?(?:{_pattern})" if _pattern else r"/plot_",
    "run_stale_examples": True,
    "abort_on_example_error": True,
    "only_warn_on_example_error": False,
    # _doc/gallery_scrapers.py: graph pictures of fx2onnx.inspect.dot.GraphPicture as SVG
    "image_scrapers": ("matplotlib", "gallery_scrapers.graph_pictures"),
    # _doc/gallery_reset.py: torch's compiled code and cached imports dropped between examples
    "reset_modules": ("matplotlib", "gallery_reset.reset_torch"),
    "download_all_examples": False,
    "show_signature": False,
    "remove_config_comments": True,
    # subsections: the folders 01_export_graph ... 06_benchmarks, in name order;
    # inside one, level 101 before 102, 201, 301 (see _doc/gallery_order.py)
    "subsection_order": None,
    "within_subsection_order": "gallery_order.LevelThenFileNameSortKey",
    "capture_repr": ("_repr_html_", "__repr__"),
    # the "Mem (MB)" column of the execution times: how far each example raised the peak
    # resident memory of the build (_doc/gallery_memory.py; 0 where procfs is missing)
    "show_memory": gallery_memory.PeakRSS() if gallery_memory.supported() else False,
}

# the :epkg:`name` role: links to the packages we cite
epkg_dictionary = {
    "black": "https://black.readthedocs.io/",
    "furo": "https://pradyunsg.me/furo/",
    "matplotlib": "https://matplotlib.org/",
    "numpy": "https://numpy.org/",
    "onnx": "https://onnx.ai/onnx/",
    "onnx-ir": "https://onnx.ai/ir-py/",
    "onnx_ir": "https://onnx.ai/ir-py/",
    "ExecuTorch": "https://pytorch.org/executorch/",
    "executorch": "https://pytorch.org/executorch/",
    "onnxruntime": "https://onnxruntime.ai/",
    "onnxruntime-genai": "https://onnxruntime.ai/docs/genai/",
    "onnxscript": "https://microsoft.github.io/onnxscript/",
    "ONNX": "https://onnx.ai/",
    "ONNX operators": "https://onnx.ai/onnx/operators/",
    "pandas": "https://pandas.pydata.org/",
    "pytest": "https://docs.pytest.org/",
    "python": "https://www.python.org/",
    "pytorch": "https://pytorch.org/",
    "sphinx": "https://www.sphinx-doc.org/",
    "sphinx-gallery": "https://sphinx-gallery.github.io/",
    "sphinx-runpython": "https://sdpython.github.io/doc/sphinx-runpython/dev/",
    "sympy": "https://www.sympy.org/",
    "torch": "https://pytorch.org/docs/stable/",
    "torch.compile": "https://pytorch.org/docs/stable/generated/torch.compile.html",
    "torch.export": "https://pytorch.org/docs/stable/export.html",
    "torch.export.export": "https://pytorch.org/docs/stable/export.html#torch.export.export",
    "torch.export.Dim": "https://pytorch.org/docs/stable/export.html#torch.export.Dim",
    "torch.fx": "https://pytorch.org/docs/stable/fx.html",
    "torch.onnx.export": "https://pytorch.org/docs/stable/onnx_export.html",
    "transformers": "https://huggingface.co/docs/transformers/",
    "timm": "https://huggingface.co/docs/timm/",
    "diffusers": "https://huggingface.co/docs/diffusers/",
}

# runpython: nothing to configure; code blocks run in the build process.

# Examples and runpython blocks run in this process: silence two messages which say
# nothing about the code shown (torchvision is not needed here; a deprecation inside torch).
logging.getLogger("torch.onnx._internal.exporter._registration").addFilter(
    lambda record: "torchvision is not installed" not in record.getMessage()
)
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)", category=FutureWarning)
# torch's own register_module_as_pytree_input_node calls its deprecated private function
warnings.filterwarnings("ignore", message=r"`torch.utils._pytree._register_pytree_node` is deprecated", category=FutureWarning)
# strict export of a scan: torch compiles the body, which torch.export ignores, and says so
warnings.filterwarnings("ignore", message=r"torch.compile is ignored when called inside torch.export", category=UserWarning)
# strict export of a builtin dynamo cannot trace: the exception the examples print says it
warnings.filterwarnings("ignore", message=r"Dynamo does not know how to trace the builtin", category=UserWarning)
# torch.onnx.export warns when two inputs share a dynamic dimension, the case it handles
warnings.filterwarnings("ignore", message=r"# The axis name: .* will not be used, since it shares", category=UserWarning)


_PAGE_GENERATORS: list = []


def run_page_generators(app) -> None:
    """Imports every ``_doc/gen_*.py`` (sorted) and calls its ``generate(app)``."""
    for path in sorted((ROOT / "_doc").glob("gen_*.py")):
        spec = importlib.util.spec_from_file_location(f"_fx2onnx_doc_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        if not hasattr(module, "generate"):
            raise AttributeError(f"{path.name} must define generate(app), it does not.")
        module.generate(app)
        _PAGE_GENERATORS.append(module)


def finish_page_generators(app) -> None:
    """Calls ``finish(app)`` of the generators which define it (those which run in the background)."""
    for module in _PAGE_GENERATORS:
        if hasattr(module, "finish"):
            module.finish(app)


# the block sphinx-gallery writes at the top of sg_execution_times.rst: jQuery and DataTables
# loaded from CDNs; removed, _static/fx2onnx_tables.js sorts these tables offline
_CDN_BLOCK = re.compile(r"\n  \.\. raw:: html\n\n(?:    .*\n|\n)*?    </script>\n(?=\n  \.\. list-table::)")


def drop_cdn_scripts(app, docname: str, source: list[str]) -> None:
    """Removes the CDN scripts and styles from the execution-time pages of sphinx-gallery."""
    if docname.rsplit("/", 1)[-1] != "sg_execution_times":
        return
    text, count = _CDN_BLOCK.subn("\n", source[0])
    if count != 1 and "cdn." in source[0]:
        raise RuntimeError(f"{docname}: the CDN block of sphinx-gallery changed, update _CDN_BLOCK in conf.py.")
    source[0] = text


# the folders whose absolute paths the examples' outputs may show (a warning, the "# File:"
# comments of a printed FX graph): longest first, replaced by the path below them
_SHORTENED_PATHS = sorted(
    {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], sysconfig.get_paths()["stdlib"], str(ROOT)},
    key=len,
    reverse=True,
)


def shorten_paths(app, docname: str, source: list[str]) -> None:
    """Replaces the absolute paths of the build machine in the gallery's outputs by relative ones
    (``.../site-packages/torch/fx/graph.py`` -> ``torch/fx/graph.py``, the examples from the root)."""
    if not docname.startswith("auto_examples/"):
        return
    text = source[0]
    for path in _SHORTENED_PATHS:
        text = text.replace(path.rstrip("/") + "/", "")
    source[0] = text


_ZERO_MEMORY = re.compile(r"^\*\*Estimated memory usage:\*\* +0 MB\n\n?", re.M)


def drop_zero_memory(app, docname: str, source: list[str]) -> None:
    """Removes sphinx-gallery's "Estimated memory usage: 0 MB" from an example's page: the example
    did not raise the build's peak memory (or did not run), the line says nothing. The memory column
    of the execution times keeps every value."""
    if docname.startswith("auto_examples/"):
        source[0] = _ZERO_MEMORY.sub("", source[0])


def quiet_root_logger(app) -> None:
    """Puts the root logger back to WARNING.

    A dependency of the theme (accessible-pygments) calls ``logging.basicConfig(level=INFO)``
    when imported: the INFO logs of onnxscript and onnx-ir would flood the build output.
    """
    logging.getLogger().setLevel(logging.WARNING)


def setup(app):
    app.connect("builder-inited", quiet_root_logger, priority=300)
    # priority < 500 so that the pages exist before sphinx-gallery and the reader run
    app.connect("builder-inited", run_page_generators, priority=400)
    # after sphinx-gallery (priority 500) ran the examples, before the reader: what ran beside them
    app.connect("builder-inited", finish_page_generators, priority=900)
    app.connect("source-read", drop_cdn_scripts)
    app.connect("source-read", shorten_paths)
    app.connect("source-read", drop_zero_memory)
    # _doc/viewcode_links.py: the [docs] links of the _modules/ pages to anchors which exist
    app.connect("html-page-context", viewcode_links.fix_backlinks)
    return {"parallel_read_safe": True}
