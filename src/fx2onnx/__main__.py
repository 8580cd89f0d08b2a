"""``python -m fx2onnx <command> ...``: the command line, one module per command in :mod:`fx2onnx.cli`.

.. code-block:: bash

    python -m fx2onnx export path/to/checkpoint --out model_dir --quantize int4
    python -m fx2onnx generate model_dir "a prompt" --max-new-tokens 32
"""

from __future__ import annotations

import sys

from .cli.main import main, make_parser  # noqa: F401 (the entry point, and the parser the docs print)

if __name__ == "__main__":
    sys.exit(main())
