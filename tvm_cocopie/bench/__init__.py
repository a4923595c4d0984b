"""Benchmark and conformance tooling shared by ``scripts/``, the demo and the tests.

- :mod:`.timing`: blocked interleaved timing, medians, error measures, ONNX Runtime
  sessions, the benchmark JSON written atomically;
- :mod:`.e2e`: one model, three contenders (ONNX Runtime, stock TVM, cocopie);
- :mod:`.conformance`, :mod:`.known_failures`: ONNX's own backend suite, run and explained;
- :mod:`.compare`: builds of one model compiled and timed side by side;
- :mod:`.dynamic`: models with symbolic dims compiled once, against builds with the size
  fixed and ONNX Runtime; :mod:`.memory`: peak memory of runs, in a subprocess.
"""
