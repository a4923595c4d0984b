"""Baseline: stock TVM's own ``vrmpy`` tensor intrinsic, tensorized into an int8 conv.

Stock TVM registers ``VRMPY_u8i8i32_INTRIN`` in ``tvm.s_tir.tensor_intrin.hexagon``
(``C[32] += A[4] . B[32, 4]``: four activation bytes broadcast against 32 output
channels times 4 input channels of weights, ``vrmpybusv``). This module is the
strongest stock-TVM contender for GCD²'s kernels (seed 004, §4.5.2 compares against
TVM): the conv compute (:func:`conv_compute`) in TVM's ``NCHWc``-style packing
(weights ``[O/32, C/4, KH, KW, 32, 4]``), scheduled two ways: :func:`conv_func`, a hand
schedule that keeps the 32 accumulators of one pixel in a register, tensorizes the
inner ``32 x 4`` with the intrinsic, and vectorizes the requantization over the 32
output channels; and a MetaSchedule search over the same compute
(:func:`.ms_runner.tune_vrmpy_conv`: ``MultiLevelTilingWithIntrin`` with this
intrinsic), whose candidates are measured in packets under QEMU by a custom
MetaSchedule builder and runner (no RPC device needed). The benchmark takes the better.

Importing ``tvm.s_tir.tensor_intrin`` parses every target's intrinsics (CUDA's
alone take about a minute here); :func:`stock_vrmpy_intrin` instead runs stock TVM's
own ``tensor_intrin/hexagon.py`` source on its own and registers its
``VRMPY_u8i8i32_INTRIN`` (same description and implementation) under a private name,
unless the stock package is already imported.

Input: NHWC uint8 already zero padded (``[1, H+2p, W+2p, C4]``, ``C4`` = ``C``
rounded up to 4), like the GCD² kernels whose input arrives packed.
"""

from __future__ import annotations

import numpy as np

from ...topi.int8.compute import Requant, conv2d_output_size
from ...topi.int8.layouts import round_up


def stock_vrmpy_intrin() -> str:
    """The registered name of stock TVM's ``VRMPY_u8i8i32_INTRIN`` (see module doc)."""
    import sys
    from pathlib import Path

    import tvm.s_tir
    from tvm.s_tir import TensorIntrin

    module = sys.modules.get("tvm.s_tir.tensor_intrin.hexagon")
    if module is not None:
        return module.VRMPY_u8i8i32_INTRIN
    path = Path(tvm.s_tir.__file__).parent / "tensor_intrin" / "hexagon.py"
    source = path.read_text()
    if "from .. import TensorIntrin" not in source:
        from tvm.s_tir.tensor_intrin.hexagon import VRMPY_u8i8i32_INTRIN

        return VRMPY_u8i8i32_INTRIN
    recorded = {}

    class _Recorder:
        @staticmethod
        def register(name, desc, impl, override=False):
            recorded[name] = (desc, impl)

    namespace = {"TensorIntrin": _Recorder, "__name__": "_cocopie_stock_hexagon_intrin"}
    code = compile(source.replace("from .. import TensorIntrin", ""), str(path), "exec")
    exec(code, namespace)  # noqa: S102 - stock TVM's own file, without the other targets
    name = namespace["VRMPY_u8i8i32_INTRIN"]
    private = f"cocopie_stock_{name}"
    if TensorIntrin.get(private, allow_missing=True) is None:
        TensorIntrin.register(private, *recorded[name])
    return private


def pack_weights(w: np.ndarray) -> np.ndarray:
    """HWIO int8 ``[KH, KW, C, O]`` to ``[O/32, C4/4, KH, KW, 32, 4]``."""
    kh, kw, c, o = w.shape
    c4 = round_up(c, 4)
    full = np.zeros((kh, kw, c4, round_up(o, 32)), dtype=np.int8)
    full[:, :, :c, :o] = w
    t = full.reshape(kh, kw, c4 // 4, 4, -1, 32)  # kh kw co ci oo oi
    return np.ascontiguousarray(t.transpose(4, 2, 0, 1, 5, 3))


def pad_input(x: np.ndarray, pad: int) -> np.ndarray:
    """NHWC uint8 to zero-padded ``[1, H+2p, W+2p, C4]``."""
    _, h, w, c = x.shape
    out = np.zeros((1, h + 2 * pad, w + 2 * pad, round_up(c, 4)), dtype=np.uint8)
    out[:, pad : pad + h, pad : pad + w, :c] = x
    return out


def conv_compute(h, w, c, o, kernel, stride, pad, rq: Requant):
    """The unscheduled PrimFunc ``(x, w, bias, y)``: block ``acc`` (the int32 sums in
    ``[OH, OW, O/32, 32]``, the shape the intrinsic tensorizes) and ``y`` (requantized)."""
    from tvm import te

    if o % 32:
        raise ValueError("TVM's vrmpy intrinsic computes 32 output channels at a time")
    c4 = round_up(c, 4)
    oh, ow = conv2d_output_size(h, kernel, stride, pad), conv2d_output_size(w, kernel, stride, pad)
    x = te.placeholder((1, h + 2 * pad, w + 2 * pad, c4), "uint8", name="x")
    wt = te.placeholder((o // 32, c4 // 4, kernel, kernel, 32, 4), "int8", name="w")
    bias = te.placeholder((o,), "int32", name="bias")
    co = te.reduce_axis((0, c4 // 4), "co")
    ry = te.reduce_axis((0, kernel), "ry")
    rx = te.reduce_axis((0, kernel), "rx")
    ci = te.reduce_axis((0, 4), "ci")
    acc = te.compute(
        (oh, ow, o // 32, 32),
        lambda i, j, oo, oi: te.sum(
            x[0, i * stride + ry, j * stride + rx, co * 4 + ci].astype("int32")
            * wt[oo, co, ry, rx, oi, ci].astype("int32"),
            axis=[co, ry, rx, ci],
        ),
        name="acc",
    )
    y = te.compute(
        (1, oh, ow, o),
        lambda n, i, j, oc: rq.te(acc[i, j, oc // 32, oc % 32] + bias[oc]),
        name="y",
    )
    return te.create_prim_func([x, wt, bias, y])


def conv_func(h, w, c, o, kernel, stride, pad, rq: Requant):
    """A PrimFunc ``(x, w, bias, y)`` tensorized with TVM's ``vrmpy`` intrinsic by hand."""
    import tvm

    sch = tvm.s_tir.Schedule(conv_compute(h, w, c, o, kernel, stride, pad, rq))
    b_acc, b_y = sch.get_sblock("acc"), sch.get_sblock("y")
    *_, oc = sch.get_loops(b_y)
    oo, oi = sch.split(oc, factors=[None, 32])
    sch.vectorize(oi)
    sch.compute_at(b_acc, oo)
    # compute_at regenerates the acc loops below ``oo`` as [oi, reductions..., ci]
    # (unit-extent reductions dropped); move oi next to ci for the 32x4 intrinsic
    inner = sch.get_loops(b_acc)[len(sch.get_loops(b_y)) - 1 :]
    a_oi, reductions, a_ci = inner[0], inner[1:-1], inner[-1]
    sch.reorder(*reductions, a_oi, a_ci)
    init = sch.decompose_reduction(b_acc, reductions[0] if reductions else a_oi)
    sch.vectorize(sch.get_loops(init)[-1])
    sch.tensorize(a_oi, stock_vrmpy_intrin())
    return sch.mod["main"]
