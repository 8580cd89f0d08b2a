"""Higher-order operators: torch.cond -> If, scan -> Scan, while_loop -> Loop, map."""

from __future__ import annotations

import torch

from ..registry import converter  # noqa: F401
