"""Register tiles in stack slots: the TIR pipeline ``cocopie``.

TVM 0.27's ``LowerTVMBuiltin`` turns every ``local`` buffer of a host function into a
``TVMBackendAllocWorkspace`` block, even a 64-byte one (checked: a 16-float
accumulator inside a CPU kernel with ``device_type`` 1). LLVM keeps such a block's
values in registers only where it can prove nothing else in the loop touches it: a
kernel that also reads another workspace block in its reduction loop (a padded input
tile, a transposed or packed input copy, a staged result) stored its accumulators to
memory after every update. Measured before this pass: MobileNetV2's depthwise kernels
about one vector store per three FMAs, the pattern-sparse conv eight full-vector stores
per kernel of 32 FMAs.

:func:`stack_locals` turns every such block of a constant size up to
:data:`STACK_LIMIT_BYTES` back into a plain allocation, which LLVM code generation
makes a 64-byte-aligned stack slot of the function or parallel task: a slot that
never escapes is promoted to registers. It runs on the host module right after
``LowerTVMBuiltin`` in the TIR pipeline :data:`TIR_PIPELINE`,
which is TVM's default S-TIR lowering otherwise (first, generated kernels are built
with the knobs a schedule chose: :mod:`tvm_cocopie.kernel_knobs`);
``tvm_cocopie.compile_model`` and the ONNX backend build with it (``tvm.compile(..., relax_pipeline="cocopie",
tir_pipeline="cocopie")`` by hand). Hexagon builds keep TVM's pipeline.
"""

from __future__ import annotations

import logging

import tvm
from tvm import tirx

from .kernel_knobs import realize_kernels
from .lane_shuffles import permuted_loads
from .target import is_hexagon
from .tir_stmt import prim_func_pass, with_bodies

log = logging.getLogger(__name__)

#: the name the TIR pipeline is registered under
TIR_PIPELINE = "cocopie"
#: the largest ``local`` buffer moved to the stack (TVM's own stack limit before 0.27)
STACK_LIMIT_BYTES = 1024


def _op_name(expr) -> str:
    return str(getattr(getattr(expr, "op", None), "name", ""))


class _Rewriter:
    """The statement tree with small ``local`` workspace blocks as native allocations.
    In a statement list, ``DeclBuffer(b, data=TVMBackendAllocWorkspace(..., n, ...))`` of
    a ``local`` buffer with ``n <= limit`` becomes ``AllocBuffer(b)``; the list's
    null check of ``b`` and its ``TVMBackendFreeWorkspace`` of ``b`` are dropped.
    Statements of kinds not listed are kept as they are (nothing below them moves)."""

    def __init__(self, limit: int):
        self.limit = limit
        self.moved = 0

    def _moved(self, node) -> str | None:
        """The buffer's name if ``node`` declares a small local workspace block."""
        if not isinstance(node, tirx.DeclBuffer):
            return None
        if _op_name(node.data) != "tirx.TVMBackendAllocWorkspace":
            return None
        size = node.data.args[2]
        if node.buffer.scope() != "local" or not isinstance(size, tirx.IntImm):
            return None
        return node.buffer.name if int(size.value) <= self.limit else None

    def _bookkeeping(self, node, names: set) -> bool:
        """Whether ``node`` is the null check or the free of a moved buffer."""
        if not isinstance(node, tirx.IfThenElse) or node.else_case is not None:
            return False
        cond = str(node.condition)
        return any(cond == f"T.isnullptr({n}.data)"
                   or ("TVMBackendFreeWorkspace" in cond and f"{n}.data)" in cond)
                   for n in names)

    def _list(self, stmts) -> list:
        out, names = [], set()
        for node in stmts:
            name = self._moved(node)
            if name is not None:
                self.moved += 1
                names.add(name)
                out.append(tirx.AllocBuffer(node.buffer))
            elif not self._bookkeeping(node, names):
                out.append(self.stmt(node))
        return out

    def stmt(self, node):
        if isinstance(node, tirx.SeqStmt):
            return tirx.SeqStmt(self._list(node.seq))
        rebuilt = with_bodies(node, self.stmt)
        return node if rebuilt is None else rebuilt


def stack_locals(limit: int = STACK_LIMIT_BYTES) -> tvm.transform.Pass:
    """The pass: ``local`` workspace blocks of at most ``limit`` bytes as native stack
    allocations (module docstring). Run it on host functions after ``LowerTVMBuiltin``."""

    def rewrite(name: str, func):
        rewriter = _Rewriter(limit)
        body = rewriter.stmt(func.body)
        if not rewriter.moved:
            return None
        log.debug("%s: %d local buffers on the stack", name, rewriter.moved)
        return func.with_body(body)

    return prim_func_pass("StackLocals", rewrite)


def _tir_pipeline(**kwargs):
    """TVM's default S-TIR pipeline, after
    :func:`~tvm_cocopie.kernel_knobs.realize_kernels` (generated kernels rebuilt with
    the knobs a schedule chose), with :func:`stack_locals` and
    :func:`~tvm_cocopie.lane_shuffles.permuted_loads` after its host finalization."""
    from tvm.s_tir.pipeline import default_s_tir_pipeline

    default_lower, finalize_host, finalize_device = default_s_tir_pipeline(**kwargs)
    lower = tvm.ir.transform.Sequential([realize_kernels(), default_lower])

    def host_passes():
        return tvm.ir.transform.Sequential([finalize_host(), stack_locals(),
                                          permuted_loads()])

    return lower, host_passes, finalize_device


def register_tir_pipeline() -> None:
    """Register :data:`TIR_PIPELINE` in TVM's TIR pipeline map (idempotent)."""
    from tvm.tirx import compilation_pipeline

    compilation_pipeline.register_tir_pipeline(TIR_PIPELINE, _tir_pipeline)


def tir_pipeline_for(target) -> str:
    """The TIR pipeline a cocopie build of ``target`` uses: ours on CPUs, TVM's default
    on Hexagon (its kernels and workspace use are measured as they are)."""
    register_tir_pipeline()
    return "default" if is_hexagon(target) else TIR_PIPELINE


__all__ = ["STACK_LIMIT_BYTES", "TIR_PIPELINE", "register_tir_pipeline", "stack_locals",
           "tir_pipeline_for"]
