"""TIR schedule rules of tvm-cocopie, in the style of ``tvm.s_tir.dlight``.

A rule is a small class with ``apply(func, target, tunable)`` returning a
``tvm.s_tir.Schedule`` (or a list of them when ``tunable``) or ``None`` when it does
not apply; rules are tried in order and the first that applies wins.
``default_rules(target)`` is the ordered list the cocopie pipeline applies after
fusion:

0. :class:`~.cpu.pattern_tiles.PatternTiles`: the pattern-sparse conv's register tile
   as a sampled decision (design spaces only: the kernel is generated, not scheduled);
   :class:`~.cpu.winograd.Winograd`: Winograd F(m,3) convs (transforms, batched
   GEMM, output transform with the fused epilogue);
1. :class:`~.cpu.matvec.Matvec`: squeeze-and-excitation blocks fused by DNNFusion
   (a global pool and the 1x1 convs on its result), each reduction at the root in
   vector accumulators (ahead of the conv rules, which would take its 1x1-map convs
   as a conv chain);
   :class:`~.cpu.conv_chain.ConvChain`: a conv and the 1x1 conv that reads it pixel
   by pixel (DNNFusion's row-local conv pairs) in one nest over output rows;
   :class:`~.cpu.gspc_pixels.GspcPixels`: grouped convs whose segments fill a quarter
   vector or less, on vectors of output pixels;
   :class:`~.cpu.conv2d_nchwc.Conv2dNCHWc`: register-blocked NCHWc convolutions
   (dense, grouped, depthwise) with their fused epilogues;
2. :class:`~.cpu.matmul_packed.MatmulPacked`: packed matmul / dense / batch matmul;
   :class:`~.cpu.attention.Attention`: the one-kernel attention (scores, softmax and
   the product with V per block of query rows);
   :class:`~.cpu.matmul_chain.MatmulChain`: matmuls chained over the same rows
   (DNNFusion's MLP and residual-stream blocks) in one nest over row tiles;
3. :class:`~.cpu.row_reduction.RowReduction`: row-wise kernels (softmax, layer
   norm, reductions over the last axis) as one parallel loop over rows;
4. :class:`~.cpu.fallback.Fallback`: parallel + vectorized loops for everything else.

On Hexagon targets the list is :class:`~.hexagon.int8.HexagonInt8`: the HVX kernel
of the variant GCD²'s selection chose for each int8 operator.

Every rule catches its own failures (logged as warnings) and answers ``None``, so a
function a rule cannot handle falls through to the next, never breaking the build.
"""

from __future__ import annotations

import tvm

from ..target import is_hexagon
from .cpu.attention import Attention
from .cpu.conv2d_nchwc import Conv2dNCHWc
from .cpu.conv_chain import ConvChain
from .cpu.fallback import Fallback
from .cpu.gspc_pixels import GspcPixels
from .cpu.matmul_chain import MatmulChain
from .cpu.matmul_packed import MatmulPacked
from .cpu.matvec import Matvec
from .cpu.pattern_tiles import PatternTiles
from .cpu.row_reduction import RowReduction
from .cpu.winograd import Winograd
from .hexagon.int8 import HexagonInt8

__all__ = ["Attention", "Conv2dNCHWc", "ConvChain", "Fallback", "HexagonInt8", "MatmulChain",
           "MatmulPacked", "Matvec", "PatternTiles",
           "RowReduction", "Winograd",
           "default_rules"]


def default_rules(target: tvm.target.Target) -> list:
    """The ordered schedule rules for ``target`` (empty: stock TVM's untouched loops)."""
    if is_hexagon(target):
        return [HexagonInt8()]
    if target.kind.name != "llvm":
        return []
    return [PatternTiles(), Winograd(), Matvec(), ConvChain(), GspcPixels(), Conv2dNCHWc(), MatmulPacked(),
            Attention(), MatmulChain(), RowReduction(), Fallback()]
