"""Errors raised by tvm-cocopie.

Every error says what was wrong and what to do about it; none of them is a C++
backtrace. They all derive from :class:`CocopieError`, so a caller can catch the
whole family at once.
"""

from __future__ import annotations


class CocopieError(Exception):
    """Base class of every tvm-cocopie error."""


class ModelError(CocopieError):
    """The model could not be read: missing file, malformed ONNX, wrong type."""


class UnsupportedOperatorError(ModelError):
    """The model holds operators the ONNX frontend cannot import.

    ``ops`` maps ``(op_type, opset)`` to the names of the nodes that use it, so a
    user sees every unsupported operator at once, not only the first.
    """

    def __init__(self, message: str, ops: dict | None = None):
        super().__init__(message)
        self.ops = dict(ops or {})


class InputShapeError(CocopieError):
    """An input's shape or dtype does not fit what the model declares."""


class TargetError(CocopieError):
    """A target is unknown, malformed, or not supported by this entry point."""


class CompilationError(CocopieError):
    """TVM failed while building the model."""


class ModelFetchError(CocopieError):
    """A real model could not be fetched (package registry unreachable, wheel changed)."""


class TuningLogError(CocopieError):
    """A tuning log is corrupt, truncated, empty, or for another target."""


class ScheduleError(CocopieError):
    """A schedule rule or a transferred schedule failed to apply or to build."""


class ToolchainError(CocopieError):
    """An external tool (qemu, clang, lld) needed for this step is missing or failed."""


def last_line(err, limit: int = 300) -> str:
    """The last non-empty line of an exception or error text, stripped and cut to ``limit``.

    TVM's FFI errors carry a C++ and Python traceback above their message; this is
    the message. An exception with no text gives its class name, empty text ``""``.
    """
    lines = [ln.strip() for ln in str(err).strip().splitlines() if ln.strip()]
    if lines:
        return lines[-1][:limit]
    return type(err).__name__ if isinstance(err, BaseException) else ""


def _register_with_tvm_ffi() -> None:
    """Let our errors keep their class when raised inside a TVM pass and re-raised by FFI."""
    try:
        import tvm_ffi
    except ImportError:  # pragma: no cover - tvm-ffi is a hard dependency
        return
    for cls in (CocopieError, ModelError, UnsupportedOperatorError, InputShapeError, TargetError,
                CompilationError, ModelFetchError, TuningLogError, ScheduleError, ToolchainError):
        tvm_ffi.register_error(cls.__name__, cls)


_register_with_tvm_ffi()
