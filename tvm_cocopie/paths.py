"""Where tvm-cocopie keeps files between runs: one cache folder for every wing."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir(*parts: str) -> Path:
    """``$TVM_COCOPIE_CACHE`` (else ``~/.cache/tvm_cocopie``), joined with ``parts``.

    Not created here: a caller that writes creates what it needs.
    """
    env = os.environ.get("TVM_COCOPIE_CACHE")
    base = Path(env).expanduser() if env else Path.home() / ".cache" / "tvm_cocopie"
    return base.joinpath(*parts)
