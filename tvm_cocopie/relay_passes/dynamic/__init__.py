"""SOD² (seed 004, ch. 5): static analysis of dynamic-shape DNNs, on Relax.

The first part of SOD²: knowing, before a model runs, as much of every intermediate
tensor's shape as its inputs' shapes decide, and which operators only their values or
their execution can size. Later stages (fusion, static memory planning, multi-version
code under symbolic shapes; SOD² §5.4.2-5.4.4) build on it.

- :mod:`.classes`: operators by shape dynamism (Table 5.2: ISDO, ISDOS, ISVDOS, EDO),
  derived from Relax's own type inference where it can be, tables where it cannot;
- :mod:`.lattice`: a dimension's lattice (Fig. 5.2: known, symbolic, expression, nac)
  and the abstract value of a Relax expression;
- :mod:`.symbols`: the function's symbolic constants and what RDP proved about them;
- :mod:`.transfer`: RDP's own forward (shape arithmetic, broadcasting) and backward
  transfer functions;
- :mod:`.rdp`: Rank and Dimension Propagation, forward and backward to a fixed point,
  with constant propagation moving calls to less dynamic classes;
- :mod:`.result`: the per-function result (per binding and summary counts);
- :mod:`.analysis`: :func:`analyze` and the pass :class:`RankDimensionPropagation`.
"""

from __future__ import annotations

from .analysis import ATTR, RankDimensionPropagation, analyze
from .classes import Knowledge, OpClass, TransferKind, classify
from .lattice import Dim, DimKind
from .rdp import analyze_function
from .result import BindingInfo, RDPResult

__all__ = ["ATTR", "BindingInfo", "Dim", "DimKind", "Knowledge", "OpClass", "RDPResult",
           "RankDimensionPropagation", "TransferKind", "analyze", "analyze_function",
           "classify"]
