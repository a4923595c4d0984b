"""TVM's thread pool: the one place that sets its environment (before the pool starts)."""

from __future__ import annotations

import os


def configure_thread_pool(cores: int | None = None, override: bool = False) -> None:
    """Set TVM's thread pool up before it starts: ``cores`` threads (``None``: TVM's
    default), unpinned. Values already in the environment win unless ``override``
    (a benchmark's ``--threads`` sets the count it measures at); returns nothing.

    ``TVM_NUM_THREADS``: the target's ``num-cores``. ``TVM_BIND_THREADS=0``: the pool
    otherwise pins each worker to one core, and on a shared machine a pinned worker
    whose core is busy cannot move, so every fork-join waits for it. Measured on this
    2-core machine under load (5 other jobs; cocopie/ORT, median of 3 processes x 15
    interleaved runs, 224 px): MobileNetV2 2.75 -> 1.00, PP-OCR det 3.26 -> 0.93,
    ResNet-18 0.98 -> 1.05 (noise). ``TVM_THREAD_POOL_SPIN_COUNT=0`` was mixed and is
    left alone.
    """
    if cores:
        if override:
            os.environ["TVM_NUM_THREADS"] = str(int(cores))
        else:
            os.environ.setdefault("TVM_NUM_THREADS", str(int(cores)))
    os.environ.setdefault("TVM_BIND_THREADS", "0")
