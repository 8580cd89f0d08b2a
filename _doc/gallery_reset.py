"""State reset between two gallery examples (used by ``conf.py``).

sphinx-gallery runs every example in one process, each in its own fake ``__main__``
module. torch keeps state across them: compiled frames, a cache of imported modules that
still holds the ``__main__`` of the previous example, and the alias ``__import___main__``
dynamo writes into the globals of the frame it traces (a torch module when
``torch.export.export(strict=True)`` traces a model). A strict export of a model defined
in the next example then fails (``expected alias not in f_globals ...``) or its guards
read the wrong module. Resetting before each example makes it run as it does on its own;
a script run by itself has one ``__main__`` and never needs this.
"""

from __future__ import annotations

import sys


def reset_torch(gallery_conf: dict, fname: str, when: str) -> None:
    """Drop torch's compiled code and its cached module imports."""
    if "torch" not in sys.modules:
        return
    import torch

    torch._dynamo.reset()
    # dynamo caches ``importlib.import_module`` (functools.cache): ``__main__`` is the
    # fake module of the example that first needed it
    convert = sys.modules.get("torch._dynamo.symbolic_convert")
    cached_import = getattr(convert, "_import_module", None)
    if hasattr(cached_import, "cache_clear"):
        cached_import.cache_clear()
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if isinstance(namespace, dict) and "__import___main__" in namespace:
            del namespace["__import___main__"]
