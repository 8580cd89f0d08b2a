"""optimum's exporter (optimum-onnx) in an environment of its own: it pins transformers 4.57, older than ours.

The environment is made once under the temporary folder (pip, optimum's pins without their dependencies, then
those dependencies but torch) and never links a torch: :func:`optimum_environment` gives the variables that put
this interpreter's torch first on its path, so two checkouts (two torches) share one environment without making
it again.

.. code-block:: python

    import subprocess
    from fx2onnx.testing.optimum_env import optimum_environment

    python, env = optimum_environment()
    subprocess.run([python, "-m", "optimum.exporters.onnx", "--help"], env=env, check=True)
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
import tempfile

#: optimum's stack (its transformers is older than ours), installed without dependencies
OPTIMUM_PINS = ["optimum-onnx==0.1.0", "optimum==2.1.0", "transformers==4.57.6", "huggingface-hub==0.36.2",
                "tokenizers==0.22.2"]
#: their other dependencies but torch
OPTIMUM_DEPENDENCIES = ["onnxruntime==1.31.1", "onnx", "numpy", "sympy", "networkx", "jinja2", "fsspec", "filelock",
                        "typing_extensions", "packaging", "pyyaml", "regex", "requests", "safetensors", "tqdm"]
#: what optimum registers, printed as JSON by its own interpreter: {task: [model types]}
_REGISTERED = """
import json
import optimum.exporters.onnx.model_configs  # noqa: F401 (registers the ONNX configurations)
from optimum.exporters.tasks import TasksManager
tasks = {}
for model_type, exporters in TasksManager._SUPPORTED_MODEL_TYPE.items():
    for task in exporters.get("onnx", {}):
        tasks.setdefault(task, []).append(model_type)
print(json.dumps({k: sorted(v) for k, v in sorted(tasks.items())}))
"""


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    if done.returncode:
        lines = (done.stderr or done.stdout).strip().splitlines()
        raise RuntimeError(f"optimum's environment does not install: {lines[-1] if lines else done.returncode}")


def optimum_environment() -> tuple[str, dict[str, str]]:
    """``(python, env)``: the interpreter of optimum's environment (made on first use) and the environment
    variables putting this interpreter's torch first on its path (``subprocess.run(..., env=env)``)."""
    import torch  # deferred: heavy

    ours = os.path.realpath(os.path.dirname(os.path.dirname(torch.__file__)))
    versions = "-".join(p.split("==")[1] for p in OPTIMUM_PINS[:3])
    venv = os.path.join(tempfile.gettempdir(), f"fx2onnx-optimum-{versions}")
    python = os.path.join(venv, "bin", "python")
    site = os.path.join(venv, "lib", f"python{sys.version_info.major}.{sys.version_info.minor}", "site-packages")
    complete = os.path.join(venv, ".complete")
    # one process makes it (test workers, sweeps and benchmarks share it); the others wait for it
    with open(f"{venv}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (os.path.isfile(complete) and os.path.isdir(os.path.join(site, "optimum", "exporters", "onnx"))):
            _run(sys.executable, "-m", "venv", "--clear", venv)
            _run(python, "-m", "pip", "install", "-q", "--no-deps", *OPTIMUM_PINS)
            _run(python, "-m", "pip", "install", "-q", *OPTIMUM_DEPENDENCIES)
            with open(complete, "w") as f:
                f.write(ours)
    key = hashlib.sha1(ours.encode()).hexdigest()[:12]
    overlay = os.path.join(tempfile.gettempdir(), f"fx2onnx-optimum-torch-{key}")
    os.makedirs(overlay, exist_ok=True)
    names = ["torch", "torchgen", "functorch"] + [n for n in os.listdir(ours) if n.startswith("torch-")
                                                  and n.endswith(".dist-info")]
    for name in names:
        link = os.path.join(overlay, name)
        if os.path.exists(os.path.join(ours, name)) and not os.path.lexists(link):
            os.symlink(os.path.join(ours, name), link)
    env = dict(os.environ, PYTHONPATH=overlay, TRANSFORMERS_OFFLINE="1", HF_HUB_OFFLINE="1")
    return python, env


def optimum_registered() -> dict[str, list[str]]:
    """``{task: [model types]}`` optimum's ONNX exporter registers (its TasksManager)."""
    python, env = optimum_environment()
    done = subprocess.run([python, "-c", _REGISTERED], capture_output=True, text=True, env=env, timeout=600)
    if done.returncode:
        raise RuntimeError(f"optimum's TasksManager: {(done.stderr or done.stdout).strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
