"""Legalization of Relax ``conv2d`` / ``matmul`` calls into tvm-cocopie's computes.

For each call we first build a *plan* from its static shapes and layouts
(:func:`conv2d_plan`, :func:`matmul_plan`); the layout pass
(:mod:`tvm_cocopie.relay_passes.layout`) asks the same planner which convolutions it
may convert to a blocked layout, so both always agree. Calls we cannot plan
(symbolic shapes, other dtypes, unaligned groups) go to TVM's own legalization,
with a debug log saying why.

Weights are packed here: a constant weight is packed with numpy at compile time
and becomes a new constant; any other weight gets a packing kernel of its own,
which ``FoldConstant`` folds away when its input turns out constant.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
from dataclasses import dataclass

import tvm
from tvm import relax, te, topi

from ...exprs import batched_shape, const_np, is_constant, static_shape
from ...target import CpuInfo
from . import conv2d_nchwc as cn
from . import dense_packed as dp
from . import depthwise_nchwc as dw
from . import gspc, gspc_shift
from . import winograd as wg
from .fast_math import legalize_table
from .tiling import (
    channel_block,
    conv_tile,
    depthwise_tile,
    depthwise_wide_tile,
    gspc_tile,
    matmul_tile,
)

log = logging.getLogger(__name__)

_BLOCKED = re.compile(r"^NCHW(\d+)c$")
SUPPORTED_DTYPES = ("float32",)


def layout_block(layout: str) -> int | None:
    """``"NCHW"`` -> 0, ``"NCHW8c"`` -> 8, anything else -> None."""
    if layout == "NCHW":
        return 0
    m = _BLOCKED.match(layout)
    return int(m.group(1)) if m else None


def _dtype(expr) -> str:
    return str(expr.ty.dtype)


@dataclass(frozen=True)
class Conv2dPlan:
    """How one ``relax.nn.conv2d`` call is computed."""

    geo: cn.ConvGeometry
    tile: cn.ConvTile
    data_block: int  # 0: the data arrives NCHW and is packed in the kernel
    out_block: int  # 0: the result leaves NCHW
    depthwise: bool
    gspc: bool = False  # a grouped conv in GSPC segments (:mod:`.gspc`)
    pixels: bool = False  # ... too narrow for channel vectors: vectors of output pixels
    shift: bool = False  # small groups inside a chunk on lane-shifted vectors (:mod:`.gspc_shift`)


def conv2d_plan(call, info: CpuInfo, data_block: int | None = None,
                out_block: int | None = None, grouped: str = "gspc") -> Conv2dPlan | None:
    """Plan ``call``; ``data_block``/``out_block`` override the call's own layouts
    (the layout pass asks "what if this conv were blocked?"); ``grouped``: the kernel of
    grouped convs whose groups do not fall on whole chunks (:data:`.gspc.GROUPED`)."""
    attrs = call.attrs
    why = conv_unsupported(call)
    if why:
        log.debug("conv2d left to TVM: %s", why)
        return None
    db = layout_block(str(attrs.data_layout)) if data_block is None else data_block
    obk = layout_block(str(attrs.out_layout)) if out_block is None else out_block
    if db is None or obk is None:
        return None
    dshape = batched_shape(call.args[0], SYMBOLIC_DIMS)
    wshape = static_shape(call.args[1])
    if data_block is not None and db and len(dshape) == 4:  # hypothetical blocking
        dshape = [dshape[0], dshape[1] // db, dshape[2], dshape[3], db]
    geo = conv_geometry(call, dshape, wshape)
    # tiles are chosen for a static size: one image, and a symbolic height or width at
    # the planning size (the kernel pads and clamps its tiles to the real extents)
    sized = geo.planned()
    symbolic = geo.symbolic_spatial
    ib = db or channel_block(geo.c, info)
    ob = obk or channel_block(geo.o, info)
    if geo.c % ib or geo.o % ob:
        return None
    if dw.is_depthwise(geo):
        if ib != ob:
            return None
        wide = None if symbolic else depthwise_wide_tile(geo, ob, info)
        if wide is not None:  # a vector over tw pixels of a narrow chunk
            tile = cn.ConvTile(ib, ob, 1, *wide, False, True)
        else:
            th, tw = depthwise_tile(sized.oh, sized.ow, info)
            tile = cn.ConvTile(ib, ob, 1, th, tw, not symbolic and geo.ow % tw != 0)
        return Conv2dPlan(geo, tile, db, obk, True)
    if (gspc.check_choice(grouped) == "gspc"
            and gspc_shift.applies(geo, ib, ob, info.f32_lanes)):
        th, tw = depthwise_tile(sized.oh, sized.ow, info)
        tile = cn.ConvTile(ib, ob, 1, th, tw, not symbolic and geo.ow % tw != 0)
        return Conv2dPlan(geo, tile, db, obk, False, shift=True)
    if gspc.check_choice(grouped) == "gspc" and gspc.applies(geo, ib, ob):
        tile = gspc_tile(sized, ib, ob, gspc.segments(geo, ob), info)
        if symbolic and tile.flat:  # as below: one row, no division by a symbolic width
            tile = dataclasses.replace(tile, flat=False, th=1)
        return Conv2dPlan(geo, tile, db, obk, False, gspc=True,
                          pixels=gspc.pixel_vectors(geo, ib, ob, info.f32_lanes))
    try:
        tile = conv_tile(sized, ib, ob, info)
        if symbolic and tile.flat:  # the same pixels as one row: no division by a width
            tile = dataclasses.replace(tile, flat=False, th=1)
        cbg = cn.group_span(geo, tile)
    except Exception as err:  # noqa: BLE001 - groups that do not align with the chunks
        log.debug("conv2d left to TVM: %s", err)
        return None
    if geo.groups > 1 and cbg * ib > 4 * geo.cpg:
        log.debug("conv2d left to TVM: block-diagonal packing would waste %dx",
                  cbg * ib // geo.cpg)
        return None
    return Conv2dPlan(geo, tile, db, obk, False)


def conv_geometry(call, dshape: list[int], wshape: list[int]) -> cn.ConvGeometry:
    """The geometry of conv ``call`` on data of shape ``dshape`` (``NCHW`` or
    ``NCHW{b}c``) and an ``OIHW`` weight of shape ``wshape``."""
    attrs = call.attrs
    n, c, h, w = (dshape[0], dshape[1] * dshape[4], dshape[2], dshape[3]) \
        if len(dshape) == 5 else dshape
    o, _, kh, kw = wshape
    return cn.ConvGeometry(
        n, c, h, w, o, kh, kw,
        tuple(int(s) for s in attrs.strides), tuple(int(p) for p in attrs.padding),
        tuple(int(d) for d in attrs.dilation), int(attrs.groups),
    )


#: dims of a conv's data (``NCHW`` or ``NCHW{b}c``) that may be symbolic: batch, rows,
#: columns (SOD²: one build for every size)
SYMBOLIC_DIMS = (0, 2, 3)


def bound_geometry(geo: cn.ConvGeometry, data: te.Tensor) -> cn.ConvGeometry:
    """``geo`` with its symbolic sizes taken from the TE placeholder ``data`` (its own
    vars, which the PrimFunc binds from the argument; the Relax-level vars are not)."""
    if isinstance(geo.n, int) and not geo.symbolic_spatial:
        return geo

    def dim(i):
        d = data.shape[i]
        return int(d) if isinstance(d, tvm.tirx.IntImm) else d

    return dataclasses.replace(geo, n=dim(0), h=dim(2), w=dim(3))


def conv_unsupported(call) -> str | None:
    """Why our conv kernels cannot take ``call`` (layout, dtype, symbolic shape), or None."""
    attrs = call.attrs
    if str(attrs.kernel_layout) != "OIHW":
        return f"kernel layout {attrs.kernel_layout}"
    if _dtype(call.args[0]) not in SUPPORTED_DTYPES or _dtype(call.args[1]) not in SUPPORTED_DTYPES:
        return f"dtype {_dtype(call.args[0])}"
    out_dtype = str(attrs.out_dtype or "")
    if out_dtype not in ("", "float32"):
        return f"out_dtype {out_dtype}"
    if (batched_shape(call.args[0], SYMBOLIC_DIMS) is None
            or static_shape(call.args[1]) is None):
        return "symbolic channels or weight shape"
    return None


def to_blocked(data: te.Tensor, block: int) -> te.Tensor:
    """NCHW -> NCHW{block}c."""
    n, c, h, w = data.shape
    return te.compute((n, c // block, h, w, block),
                      lambda i, cb, y, x, ci: data[i, cb * block + ci, y, x], name="to_nchwc")


def from_blocked(data: te.Tensor, channels: int) -> te.Tensor:
    """NCHW{block}c -> NCHW."""
    n, _, h, w, block = data.shape
    return te.compute((n, channels, h, w),
                      lambda i, c, y, x: data[i, c // block, y, x, c % block], name="from_nchwc")


def _packed_weight(bb, weight, pack_numpy, pack_te, name: str):
    if is_constant(weight):
        return relax.const(pack_numpy(const_np(weight)))  # read in place, not copied
    return bb.emit(bb.call_te(pack_te, weight, primfunc_name_hint=name))


def legalize_conv2d(info: CpuInfo, fallback, winograd: str = "auto", grouped: str = "gspc"):
    """The ``relax.nn.conv2d`` legalization for a CPU described by ``info``; ``winograd``:
    Winograd for 3x3 stride-1 convs (:data:`.winograd.SETTINGS`); ``grouped``: the
    kernel of grouped convs off the chunks (:data:`.gspc.GROUPED`)."""

    def _legalize(bb: relax.BlockBuilder, call) -> relax.Expr:
        plan = conv2d_plan(call, info, grouped=grouped)
        if plan is None:
            return fallback(bb, call)
        geo, tile = plan.geo, plan.tile
        if plan.depthwise:
            kernel = _packed_weight(
                bb, call.args[1], lambda w: dw.pack_weight_numpy(w, tile.ob, dw.repeats(tile)),
                lambda w: dw.pack_weight(w, tile.ob, dw.repeats(tile)), "dw_weight_pack")
            compute = dw.depthwise_nchwc
            name = "depthwise_nchwc"
        elif plan.shift:
            kernel = _packed_weight(
                bb, call.args[1], lambda w: gspc_shift.pack_weight_numpy(w, geo, tile.ob),
                lambda w: gspc_shift.pack_weight(w, geo, tile.ob), "shift_weight_pack")
            compute = gspc_shift.conv2d_gspc_shift
            name = "conv2d_gspc_shift"
        elif plan.pixels:
            kernel = call.args[1]  # OIHW: one broadcast weight per FMA

            def compute(data, weight, shaped, tile):
                return gspc.conv2d_gspc_pixels(data, weight, shaped, info.f32_lanes, tile.ob)

            name = "conv2d_gspc_pixels"
        elif plan.gspc:
            kernel = _packed_weight(
                bb, call.args[1], lambda w: gspc.pack_weight_numpy(w, geo, tile),
                lambda w: gspc.pack_weight(w, geo, tile), "gspc_weight_pack")
            compute = gspc.conv2d_gspc
            name = "conv2d_gspc"
        elif (wtile := wg.choose(geo, tile, info, is_constant(call.args[1]),
                                 "off" if grouped == "blocked" and geo.groups > 1
                                 else winograd)) is not None:
            kernel = relax.const(wg.transform_weight_numpy(const_np(call.args[1]), wtile))
            compute, tile = wg.conv2d_winograd_nchwc, wtile
            name = "conv2d_winograd_nchwc"
        else:
            kernel = _packed_weight(
                bb, call.args[1], lambda w: cn.pack_weight_numpy(w, geo, tile),
                lambda w: cn.pack_weight(w, geo, tile), "conv_weight_pack")
            compute = cn.conv2d_nchwc
            name = "conv2d_nchwc"

        def fte(data, packed):
            shaped = bound_geometry(geo, data)
            if not plan.data_block:
                data = to_blocked(data, tile.ib)
            out = compute(data, packed, shaped, tile)
            if not plan.out_block:
                out = from_blocked(out, geo.o)
            return out

        return bb.call_te(fte, call.args[0], kernel, primfunc_name_hint=name)

    return _legalize


@dataclass(frozen=True)
class MatmulPlan:
    """How one matmul call is computed: its sizes, batch, the packed layout of the right-hand side
    and the register tile. Sizes are ints, or TIR expressions where symbolic (the Relax-level
    variables: the computes take their own from the placeholders)."""
    m: object
    n: object
    k: object
    batch: tuple
    shared_rhs: bool
    tile: object


def _matmul_dims(expr) -> list | None:
    """A matmul operand's shape: ints where static, TIR integer expressions where symbolic;
    ``None`` when the shape (or its rank) is unknown."""
    static = static_shape(expr)
    if static is not None:
        return static
    shape = getattr(getattr(expr, "ty", None), "shape", None)
    values = getattr(shape, "values", None)
    if values is None:
        return None
    return [int(v) if isinstance(v, tvm.tirx.IntImm) else v for v in values]


def _same_extent(x, y) -> bool:
    """Equal dims: equal ints, or expressions provably equal (one Relax-level variable)."""
    if isinstance(x, int) and isinstance(y, int):
        return x == y
    return bool(tvm.sym.Analyzer().can_prove_equal(x, y))


def matmul_plan(call, info: CpuInfo) -> MatmulPlan | None:
    """Plan a ``relax.matmul``: A ``(*batch, M, K)`` times B ``(K, N)`` or ``(*batch, K, N)``.

    ``M``, the batch dims, and (for a B that is not constant) ``K`` and ``N`` may be
    symbolic: the tile is then the one planned for :data:`.dense_packed.PLANNED_EXTENT`
    in their place (SOD²: one build for every sequence length, tiles padded at run
    time). Dims that are not provably equal (two unrelated variables) are left to TVM.
    """
    a, b = call.args
    if _dtype(a) not in SUPPORTED_DTYPES or _dtype(b) not in SUPPORTED_DTYPES:
        return None
    out_dtype = str(call.attrs.out_dtype or "")
    if out_dtype not in ("", "float32"):
        return None
    ashape, bshape = _matmul_dims(a), _matmul_dims(b)
    if ashape is None or bshape is None or len(ashape) < 2 or len(bshape) < 2:
        return None
    *batch, m, k = ashape
    if not _same_extent(bshape[-2], k):
        return None
    n = bshape[-1]
    shared = len(bshape) == 2
    if not shared and (len(bshape) != len(ashape)
                       or not all(map(_same_extent, bshape[:-2], batch))):
        return None
    pm, pn, pk = (dp.planned(v) for v in (m, n, k))
    flat = dp.flat_rows(batch, m, shared)
    rows = math.prod(dp.planned(d) for d in (*batch, m)) if flat else pm
    # symbolic: sized at the planned extent, the rows of a time-major (T, 1, K) included
    sized_rows = pm if static_shape(a) is not None else rows
    if pn < info.f32_lanes // 2 or sized_rows * pn * pk < 4096:
        return None
    return MatmulPlan(m, n, k, tuple(batch), shared,
                      matmul_tile(rows, pn, info, k if isinstance(k, int) else None))


def _broadcast_batches(bb: relax.BlockBuilder, call):
    """``call`` with both operands broadcast to one batch shape when their static batch
    dims differ only by broadcasting (``(4, 12, M, K) @ (1, 12, K, N)``, ranks padded with
    ones): the packed kernels take equal batch dims; TVM's generic matmul ran such a
    product 19x ONNX Runtime's time. A 2-D right-hand side (a shared weight) is left."""
    a, b = call.args
    ashape, bshape = static_shape(a), static_shape(b)
    if ashape is None or bshape is None or len(ashape) < 2 or len(bshape) < 3:
        return call
    abatch, bbatch = ashape[:-2], bshape[:-2]
    rank = max(len(abatch), len(bbatch))
    pa, pb = [1] * (rank - len(abatch)) + abatch, [1] * (rank - len(bbatch)) + bbatch
    if pa == pb and len(abatch) == len(bbatch):
        return call
    if any(x != y and 1 not in (x, y) for x, y in zip(pa, pb)):
        return call
    batch = [max(x, y) for x, y in zip(pa, pb)]
    args = []
    for x, shape in ((a, ashape), (b, bshape)):
        full = [*batch, *shape[-2:]]
        args.append(x if list(shape) == full else bb.emit(bb.call_te(
            topi.broadcast_to, x, full, primfunc_name_hint="broadcast_to")))
    return bb.normalize(relax.op.matmul(*args, out_dtype=call.attrs.out_dtype))


def legalize_matmul(info: CpuInfo, fallback):
    """The ``relax.matmul`` legalization for a CPU described by ``info``."""

    def _legalize(bb: relax.BlockBuilder, call) -> relax.Expr:
        call = _broadcast_batches(bb, call)
        plan = matmul_plan(call, info)
        if plan is None:
            return fallback(bb, call)
        nb = plan.tile.nb
        rhs = call.args[1]
        if isinstance(plan.n, int) or is_constant(rhs):
            packed = _packed_weight(bb, rhs, lambda b: dp.pack_rhs_numpy(b, nb),
                                    lambda b: dp.pack_rhs(b, nb), "rhs_pack")
        else:  # K^T of attention, N the sequence: see dp.pack_rhs on its pattern kind
            packed = bb.emit(bb.call_te(lambda b: dp.pack_rhs(b, nb), rhs,
                                        primfunc_name_hint="rhs_pack",
                                        primfunc_attrs={"op_pattern": dp.INJECTIVE}))
        # a symbolic N goes in as an argument: call_te hands the compute the PrimFunc's
        # own variable for it (the packed B only holds ceil(N / nb))
        out = bb.call_te(lambda a, p, n: dp.matmul_packed(a, p, n, plan.tile),
                         call.args[0], packed, plan.n, primfunc_name_hint="matmul_packed")
        if isinstance(plan.n, int):
            return out
        return bb.call_te(dp.slice_columns, bb.emit(out), plan.n,
                          primfunc_name_hint="matmul_columns",
                          primfunc_attrs={"op_pattern": dp.BROADCAST})

    return _legalize


def default_legalize(op_name: str):
    """TVM's registered legalization of ``op_name``."""
    return tvm.ir.Op.get(op_name).get_attr("FLegalize")


def overrides(info: CpuInfo, winograd: str = "auto", grouped: str = "gspc") -> dict:
    """Relax op name -> legalization, for :func:`tvm_cocopie.topi.legalize_overrides`."""

    table = {
        "relax.nn.conv2d": legalize_conv2d(info, default_legalize("relax.nn.conv2d"), winograd,
                                           grouped),
        "relax.matmul": legalize_matmul(info, default_legalize("relax.matmul")),
    }
    for name, legalize in legalize_table(info.f32_lanes).items():
        fallback = default_legalize(name)
        table[name] = lambda bb, call, f=legalize, d=fallback: f(bb, call, d)
    return table


__all__ = [
    "Conv2dPlan",
    "MatmulPlan",
    "conv2d_plan",
    "conv_geometry",
    "conv_unsupported",
    "legalize_conv2d",
    "legalize_matmul",
    "matmul_plan",
    "overrides",
]
