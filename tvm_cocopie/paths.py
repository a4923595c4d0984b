"""Where tvm-cocopie keeps files between runs: one cache folder for every wing."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np


def cache_dir(*parts: str) -> Path:
    """``$TVM_COCOPIE_CACHE`` (else ``~/.cache/tvm_cocopie``), joined with ``parts``.

    Not created here: a caller that writes creates what it needs.
    """
    env = os.environ.get("TVM_COCOPIE_CACHE")
    base = Path(env).expanduser() if env else Path.home() / ".cache" / "tvm_cocopie"
    return base.joinpath(*parts)


def write_json_atomic(path: str | os.PathLike, obj) -> None:
    """Write ``obj`` as JSON to ``path`` via a temporary file and a rename (a reader
    sees the old file or the new one, never half of one; numpy scalars and paths are
    written as numbers and strings)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(obj, fh, indent=2, sort_keys=False, default=_json_default)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _json_default(value):
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot serialize {type(value).__name__}")
