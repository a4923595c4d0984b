"""The int8 operators, now in :mod:`tvm_cocopie.topi.int8_compute` (re-exported here)."""

from ..topi.int8_compute import (  # noqa: F401 - re-exports
    MULTIPLIER_BITS,
    SHIFT_RANGE,
    AddRequant,
    Requant,
    conv2d_output_size,
    qconv2d_func,
    qconv2d_nhwc,
    qdepthwise_conv2d_nhwc,
    qmatmul,
    qmatmul_func,
)
