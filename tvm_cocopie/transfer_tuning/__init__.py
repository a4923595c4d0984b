"""Transfer-tuning: reuse the tuning logs of one model for another (thesis ch. 6).

* :mod:`.readers`: MetaSchedule database directories, line-tolerant, with an
  :class:`~.readers.ImportSummary` of what was skipped and why;
* :mod:`.ansor`: legacy Ansor JSON-lines logs (v0.2-v0.6) rebuilt as PrimFuncs and
  MetaSchedule traces;
* :mod:`.kernel_class`: shape-free kernel classes and the per-model class report
  (§6.2.2, Table 6.2);
* :mod:`.transfer`: replay a trace on a kernel of the same class with adapted tile
  decisions (§6.2.1);
* :mod:`.search`: standalone measurement of every candidate, model selection by
  score(T) (§6.2.4) or pool mode, and the output database;
* :mod:`.tune`: plain MetaSchedule tuning of a model's kernels (the source logs and
  the reference), with a timeline of its database;
* :mod:`.cli`: ``tvm-cocopie tune`` and ``tvm-cocopie transfer-tune``.
"""

from __future__ import annotations

__all__ = ["ansor", "kernel_class", "readers", "search", "transfer", "tune"]
