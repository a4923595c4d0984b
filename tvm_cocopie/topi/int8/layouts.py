"""GCD²'s data layouts for HVX int8 matrices, and the padded grids a convolution runs on.

Seed 004, §4.3, Fig. 4.2: each multiply instruction wants its operand vectors in a
layout of its own. A matrix ``X[M, K]`` (rows = spatial positions or matrix rows,
columns = channels) is cut into panels of ``R = 128 / v`` rows; within a panel, groups
of ``v`` adjacent columns are stored row by row, so one 128-byte vector holds ``R``
rows times ``v`` columns:

- ``1-column`` (``vmpy``,  ``v = 1``, 128-row panels): a vector is one column;
- ``2-column`` (``vmpa``,  ``v = 2``, 64-row panels): two columns interleaved;
- ``4-column`` (``vrmpy``, ``v = 4``, 32-row panels): four columns interleaved.

Packed shape ``(P, G, R, v)`` with ``P = ceil(M / R)`` panels and ``G`` column groups;
element ``X[p*R + r, g*v + j]`` sits at ``[p, g, r, j]``. Rows and columns past the
matrix are padding (the "Total Data Size w/ Pad" of Table 4.2). Columns are padded to
``col_multiple`` (what the instruction consumes per step).

:class:`GridGeometry`: a ``k x k`` convolution of an ``h x w`` image runs as a sum of
shifted matrix multiplications over padded, phase-split grids (the kernels of
:mod:`tvm_cocopie.hexagon.kernels.conv2d`); it gives those grids' sizes.

These are data descriptions only (no TVM): the computes of :mod:`.hvx`, the HVX
kernels and the cost model all read them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: Bytes in one HVX vector (128-byte mode, Hexagon V66).
VBYTES = 128


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def round_up(a: int, b: int) -> int:
    """``a`` rounded up to a multiple of ``b``."""
    return _ceil_div(a, b) * b


@dataclass(frozen=True)
class Layout:
    """A GCD² layout: ``cols`` adjacent columns per vector, ``rows = 128 / cols``."""

    name: str
    cols: int
    col_multiple: int

    @property
    def rows(self) -> int:
        """Rows of one panel (``128 / cols``)."""
        return VBYTES // self.cols

    def padded(self, m: int, k: int) -> tuple:
        """``(rows, columns)`` after padding."""
        return round_up(m, self.rows), round_up(k, self.col_multiple)

    def shape(self, m: int, k: int) -> tuple:
        """The packed shape ``(P, G, R, v)`` of an ``m x k`` matrix."""
        mp, kp = self.padded(m, k)
        return (mp // self.rows, kp // self.cols, self.rows, self.cols)

    def nbytes(self, m: int, k: int) -> int:
        """Bytes of an ``m x k`` matrix in this layout, padding included."""
        return int(np.prod(self.shape(m, k)))

    def pack(self, x: np.ndarray) -> np.ndarray:
        """Row-major ``[M, K]`` to packed ``(P, G, R, v)``, zero padded."""
        m, k = x.shape
        mp, kp = self.padded(m, k)
        full = np.zeros((mp, kp), dtype=x.dtype)
        full[:m, :k] = x
        p, g, r, v = self.shape(m, k)
        return np.ascontiguousarray(full.reshape(p, r, g, v).transpose(0, 2, 1, 3))

    def unpack(self, packed: np.ndarray, m: int, k: int) -> np.ndarray:
        """Packed ``(P, G, R, v)`` back to row-major ``[M, K]``."""
        p, g, r, v = packed.shape
        return np.ascontiguousarray(packed.transpose(0, 2, 1, 3).reshape(p * r, g * v)[:m, :k])


ONE_COLUMN = Layout("1-column", cols=1, col_multiple=2)


TWO_COLUMN = Layout("2-column", cols=2, col_multiple=4)


FOUR_COLUMN = Layout("4-column", cols=4, col_multiple=4)


#: The layout each GCD² instruction wants (inputs and outputs alike).
LAYOUT_OF = {"vmpy": ONE_COLUMN, "vmpa": TWO_COLUMN, "vrmpy": FOUR_COLUMN}


VARIANTS = tuple(LAYOUT_OF)


@dataclass(frozen=True)
class GridGeometry:
    """Sizes of a ``kernel x kernel`` convolution of an ``h x w`` image on padded grids."""

    h: int
    w: int
    kernel: int
    stride: int = 1
    pad: int = 0
    #: a wider grid than the image needs (extra zero columns on the right), so that
    #: a whole network can share one grid width (:mod:`tvm_cocopie.hexagon.executor`)
    min_grid_w: int = 0

    @property
    def out_h(self) -> int:
        """Output height."""
        return (self.h + 2 * self.pad - self.kernel) // self.stride + 1

    @property
    def out_w(self) -> int:
        """Output width."""
        return (self.w + 2 * self.pad - self.kernel) // self.stride + 1

    @property
    def phases(self) -> int:
        """Phase grids of a strided input (``stride ** 2``)."""
        return self.stride * self.stride

    @property
    def grid_h(self) -> int:
        """Rows of one phase grid."""
        return math.ceil((self.h + 2 * self.pad) / self.stride)

    @property
    def grid_w(self) -> int:
        """Width ``Wq`` of every grid, input phases and output alike."""
        return max(math.ceil((self.w + 2 * self.pad) / self.stride), self.min_grid_w)

    @property
    def max_shift(self) -> int:
        """The largest row shift a tap reads from (rows past an output row)."""
        reach = (self.kernel - 1) // self.stride
        return reach * self.grid_w + reach

    def tap(self, dy, dx):
        """``(phase, row shift)`` of tap ``(dy, dx)``; works on ints and TIR expressions."""
        s = self.stride
        return (dy % s) * s + dx % s, (dy // s) * self.grid_w + dx // s

    def live_taps(self) -> list:
        """Taps ``(dy, dx)`` that read the image for at least one valid output; the others
        read padding alone (a 3x3 conv of a 1x1 map: all but the centre), so their
        products are the same constant for every valid output."""

        def live(d, size, out):
            return any(0 <= o * self.stride + d - self.pad < size for o in range(out))

        k = self.kernel
        return [(dy, dx) for dy in range(k) for dx in range(k)
                if live(dy, self.h, self.out_h) and live(dx, self.w, self.out_w)]

    def out_rows(self, variant: str) -> int:
        """Rows of the output grid in ``variant``'s layout, padded to its panel."""
        return round_up(self.out_h * self.grid_w, LAYOUT_OF[variant].rows)

    def in_rows(self, variant: str) -> int:
        """Rows of each input phase grid in ``variant``'s layout: every shifted read stays
        inside."""
        need = max(self.grid_h * self.grid_w, self.out_rows(variant) + self.max_shift)
        return round_up(need, LAYOUT_OF[variant].rows)

    def in_shape(self, variant: str, channels: int) -> tuple:
        """Shape ``(phases, groups, rows, cols)`` of the input grids of ``channels`` in
        ``variant``'s layout."""
        layout = LAYOUT_OF[variant]
        groups = round_up(channels, layout.col_multiple) // layout.cols
        return (self.phases, groups, self.in_rows(variant), layout.cols)

    def out_shape(self, variant: str, channels: int) -> tuple:
        """Shape ``(groups, rows, cols)`` of the output grid of ``channels`` in ``variant``'s
        layout."""
        layout = LAYOUT_OF[variant]
        groups = round_up(channels, layout.col_multiple) // layout.cols
        return (groups, self.out_rows(variant), layout.cols)



@dataclass(frozen=True)
class TapFold:
    """The taps of a ``vrmpy`` convolution over fewer than 4 input channels folded into its
    reduction groups (a network's RGB or gray stem).

    In the 4-column layout a pixel of a 3-channel image fills 3 of a ``vrmpy``'s 4 bytes,
    so a 7x7 stem multiplies 49 groups of which a quarter is padding. Folded, the
    reduction runs over ``K = k*k*C`` entries ``kappa = t*C + c`` (tap ``t = dy*k + dx``,
    channel ``c``), four per group: group ``g`` is assembled in the kernel from the tap
    vectors it spans (each masked to its channels and shifted to its bytes), the input
    grids stay the phase grids of every conv. 37 groups instead of 49 for the 7x7 stem
    (147 of 148 bytes useful), 7 instead of 9 for a 3x3 one.
    """

    kernel: int
    channels: int

    @staticmethod
    def applies(variant: str, kernel: int, channels: int) -> bool:
        """Whether a ``kernel x kernel`` conv of ``channels`` inputs folds its taps."""
        return variant == "vrmpy" and kernel > 1 and channels < FOUR_COLUMN.cols

    @classmethod
    def of(cls, variant: str, kernel: int, channels: int) -> TapFold | None:
        """The fold of such a conv, ``None`` where it does not fold (:meth:`applies`)."""
        return cls(kernel, channels) if cls.applies(variant, kernel, channels) else None

    @property
    def taps(self) -> int:
        """Taps of the kernel."""
        return self.kernel * self.kernel

    @property
    def entries(self) -> int:
        """Reduction entries ``k*k*C``."""
        return self.taps * self.channels

    @property
    def groups(self) -> int:
        """Reduction groups of 4 entries (the last one zero padded)."""
        return _ceil_div(self.entries, FOUR_COLUMN.cols)

    def pieces(self, group: int) -> list:
        """``[(tap, first channel, last channel, byte offset)]`` of ``group``: the channels
        of each tap it holds and where in the group's word they land (``byte = c + offset``)."""
        lo, hi = 4 * group, min(4 * group + 3, self.entries - 1)
        out = []
        for t in range(lo // self.channels, hi // self.channels + 1):
            first, last = max(lo, t * self.channels), min(hi, t * self.channels + self.channels - 1)
            base = t * self.channels
            out.append((t, first - base, last - base, base - lo))
        return out

    def fold(self, w: np.ndarray) -> np.ndarray:
        """HWIO ``[k, k, C, O]`` weights as the folded reduction ``[K, O]`` (``kappa`` order)."""
        return w.reshape(self.entries, w.shape[-1])
