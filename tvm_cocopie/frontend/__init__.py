"""The one ONNX front door: read a model, fold it, import it into Relax.

- :mod:`.model`: load and check a file (path, bytes or ``ModelProto``), its inputs,
  opset and the user's shapes;
- :mod:`.folding`: the shape arithmetic that fixed input shapes make constant, folded;
- :mod:`.control_flow`: ``If``/``Loop``/``Scan`` known at compile time resolved;
- :mod:`.importer`: TVM's Relax ONNX importer run with our converters
  (:mod:`.ops`) laid over its stock map, every unsupported operator reported at once;
- :mod:`.backend`: the same as an ``onnx.backend`` Backend (ONNX's own test suite).
"""

from __future__ import annotations

from .importer import from_onnx, unsupported_operators
from .model import check_shapes, graph_inputs, load_model, model_opset, onnx_dtype_name

__all__ = ["check_shapes", "from_onnx", "graph_inputs", "load_model", "model_opset",
           "onnx_dtype_name", "unsupported_operators"]
