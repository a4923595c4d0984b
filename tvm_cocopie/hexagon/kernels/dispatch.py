"""The HVX kernel of each HVX-layout int8 compute: the one place that maps a descriptor to its kernel."""

from __future__ import annotations

import logging

from tvm import s_tir

from ...topi.int8.compute import Requant
from ...topi.int8.hvx import descriptor, geometry_of
from ...topi.int8.layouts import LAYOUT_OF
from . import layernorm, resize, softmax
from .channels import channel_move_kernel
from .conv2d import conv2d
from .depthwise import depthwise_conv2d
from .elementwise import add_kernel, dense_kernel, lut_kernel, mul_kernel
from .grouped import grouped_conv2d
from .regrid import regrid_copy_kernel, unpack_words_kernel
from .shift_copy import shift_copy_kernel

log = logging.getLogger(__name__)


def vectorize_inner(func, lanes: int = 128):
    """``func`` (a copy or element-wise compute with block ``y``) with its two inner loops fused
    and vectorized by ``lanes`` bytes where they divide."""
    sch = s_tir.Schedule(func)
    block = sch.get_sblock("y")
    loops = sch.get_loops(block)
    inner = sch.fuse(loops[-2], loops[-1])
    if int(sch.get(inner).extent) % lanes == 0:
        sch.vectorize(sch.split(inner, factors=[None, lanes])[-1])
    return sch.mod["main"]


def _in_root_block(kernel):
    """The kernel's body inside an opaque root block, as TE-made functions have it
    (Relax's reshape detection expects one on every single-input ``call_tir``)."""
    if isinstance(kernel.body, s_tir.SBlockRealize):
        return kernel
    root = s_tir.SBlock([], [], [], "root", kernel.body)
    return kernel.with_body(s_tir.SBlockRealize([], True, root))


def _same_layout_copy(desc: dict) -> bool:
    """A regrid between grids of one layout with no padded channel: row copies."""

    variant, _, _, _, c, _ = desc["src"]
    if variant is None:  # the NHWC image: byte copies
        return True
    return variant == desc["variant"] and c % LAYOUT_OF[variant].col_multiple == 0


def _row_kernel(desc: dict, func):
    """The HVX layer norm or softmax of a :mod:`tvm_cocopie.topi.int8.sequence` compute, or
    ``None`` (with a warning: TVM's scalar lowering stays) for sizes the kernels do not take."""
    shape = tuple(int(d) for d in func.params[0].shape)
    if desc["op"] == "layernorm":
        if layernorm.supported(desc["d"]):
            return layernorm.layernorm_kernel(shape, desc["eps"], desc["shift"], desc["zy"],
                                              desc["bits"])
        need = "rows of whole 128-byte vectors"
    else:
        if softmax.supported(desc["size"], desc["length"]):
            inv_m, inv_k, zy = desc["rq"]
            return softmax.softmax_kernel(shape, desc["length"], inv_m, inv_k, zy,
                                          desc["segments"])
        need = "whole 128-byte vectors of segments of 4, 8, ..., 128 bytes"
    log.warning("%s of shape %s: no HVX kernel (it needs %s); TVM's scalar lowering of the "
                "compute is used", desc["op"], list(shape), need)
    return None


def hvx_kernel(func):
    """The scheduled PrimFunc for an HVX-layout compute, or ``None`` if ``func`` is not one
    (or is left to TVM). Attributes of ``func`` (name, descriptor) are kept."""
    desc = descriptor(func)
    if desc is None:
        return None
    op = desc["op"]
    if op in ("conv", "dwconv"):
        rq = Requant(*desc["rq"])
        geo = geometry_of(desc)
        if op == "conv":
            kernel = conv2d(desc["variant"], geo, desc["c"], desc["o"], rq)
        else:
            kernel = depthwise_conv2d(desc["variant"], geo, desc["c"], rq)
    elif op == "gconv":
        kernel = grouped_conv2d(geometry_of(desc), desc["c"], desc["o"], desc["groups"],
                                Requant(*desc["rq"]), desc.get("taps"))
    elif op == "channels":
        kernel = channel_move_kernel(desc["kind"], desc["variant"], desc["src"], desc["c"],
                                     desc["o"], desc["params"])
    elif op == "mul":
        from ...topi.int8.compute import MulRequant

        za, zb, m, shift, zp = desc["rq"]
        shapes = [tuple(int(d) for d in buf.shape) for buf in func.params]
        kernel = mul_kernel(shapes[0], shapes[1], MulRequant(za, zb, Requant(m, shift, zp)),
                            desc["broadcast"])
    elif op == "add":
        from ...topi.int8.compute import AddRequant

        shapes = [tuple(int(d) for d in buf.shape) for buf in func.params]
        kernel = add_kernel(shapes[0], shapes[1], AddRequant(*desc["rq"]),
                            desc.get("broadcast", False))
    elif op == "attention":
        from .attention import attention_kernel

        shapes = [tuple(int(d) for d in buf.shape) for buf in func.params]
        kernel = attention_kernel(desc["kind"], desc["heads"], desc["s"], shapes[0], shapes[1],
                                  *desc["z"], Requant(*desc["rq"]))
    elif op == "dense":
        kernel = dense_kernel(desc["variant"], desc["src"][0], tuple(desc["src"][1]), desc["k"],
                              desc["o"], Requant(*desc["rq"]))
    elif op == "lut":
        kernel = lut_kernel(tuple(int(d) for d in func.params[0].shape))
    elif op == "shift_copy":
        kernel = shift_copy_kernel(desc["v"], desc["groups"], desc["src"], desc["dst"],
                                   desc["shift"])
    elif op == "regrid" and _same_layout_copy(desc):
        _, shape, h, w, c, wq = desc["src"]
        kernel = regrid_copy_kernel(desc["variant"], tuple(shape), h, w, wq, geometry_of(desc), c,
                                    desc.get("pad_value", 0))
    elif op == "unpack" and desc["src"][0] == "vrmpy" and desc["src"][4] % 4 == 0:
        _, shape, h, w, c, wq = desc["src"]
        kernel = unpack_words_kernel(tuple(shape), h, w, wq, c)
    elif op in ("regrid", "maxpool"):
        kernel = vectorize_inner(func)
    elif op in ("layernorm", "softmax"):
        kernel = _row_kernel(desc, func)
        if kernel is None:
            return None
    elif op == "upsample":
        shape = tuple(int(d) for d in func.params[0].shape)
        if not resize.supported(shape, desc["factor"]):
            log.info("upsampling of %s by %d: no HVX kernel for this size, TVM's lowering",
                     list(shape), desc["factor"])
            return None
        kernel = resize.upsample_kernel(shape, desc["factor"])
    else:
        return None
    kernel = _in_root_block(kernel).without_attr("global_symbol")
    for key, value in func.attrs.items():
        kernel = kernel.with_attr(key, value)
    if "op_pattern" in func.attrs:
        kernel = kernel.with_attr("op_pattern", 8)  # opaque: nothing to fuse or rewrite
    return kernel
