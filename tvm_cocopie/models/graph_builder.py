"""Build ONNX graphs in code, with deterministic weights that keep activations O(1).

:class:`GraphBuilder` is the small internal tool behind every model of the zoo. It
holds nodes and initializers and emits the operator patterns the PyTorch ONNX
exporter emits at opset 17 (Conv, BatchNormalization, Gemm, MatMul + Add, Clip for
ReLU6, HardSwish, HardSigmoid, Sigmoid + Mul for SiLU, Erf-based GELU,
LayerNormalization, Reshape/Transpose around attention and channel shuffles, Split,
Concat, nearest Resize for upsampling, pooling and ReduceMean).

Weights come from ``numpy.random.default_rng(seed)`` in construction order, so the
same builder calls give byte-identical models:

- convolutions and linear layers: He-normal, ``std = sqrt(2 / fan_in)`` (He et al.,
  "Delving Deep into Rectifiers", ICCV 2015); optional biases ``U(-1/sqrt(fan_in),
  1/sqrt(fan_in))``, PyTorch's default;
- BatchNormalization: ``gamma ~ U(0.5, 1.5)``, ``beta ~ N(0, 0.1)``, and running
  statistics ``mean ~ N(0, 0.1)`` and ``var ~ U(0.5, 1.5)`` *in units of the data
  that reaches the layer* (see below);
- LayerNormalization: ``gamma ~ U(0.5, 1.5)``, ``beta ~ N(0, 0.1)``.

Why calibrate BN statistics. A trained network's running statistics match the data
flowing through it, so every BN output is near unit scale. Statistics drawn from a
fixed distribution do not match, and since inference BN is a fixed affine map the
mismatch compounds block after block through residual networks: with fixed ``var ~
U(0.5, 1.5)`` the logits of ResNet-50 at 224x224 have a standard deviation of about
1e4, those of ResNeXt-50 about 4e4. An analytic estimate of each layer's scale
drifts too (a max pool, or a ReLU of channels with non-zero means, follows no simple
rule), and the drift compounds the same way. So the builder runs the graph as it
builds it: every op also computes its output in numpy for a fixed calibration batch
(N(0, 1) images, 1 to 16 of them so that they hold :data:`CALIBRATION_PIXELS`
pixels, or random token ids; drawn from a random stream separate from the weights'),
and each BN reads the per-channel mean ``mu_c`` and variance ``s2_c`` of its real
input, sets ``running_mean = mu_c + N(0, 0.1) * s_c`` and ``running_var = s2_c * U(0.5,
1.5)``, with ``s2_c`` shrunk toward the layer's mean variance when a channel has few
samples (a 1x1 final map). The logits of every zoo CNN then have a standard
deviation between 0.5 and 6 on fresh N(0, 1) inputs, at 224x224 as at 32x32.
The forward pass costs about as much as building the weights
(under a second for ResNet-50 at 224x224). ``GraphBuilder(calibrate_bn=False)``
gives the uncalibrated statistics, for comparison.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterator, Sequence

import numpy as np
import onnx
from numpy.lib.stride_tricks import sliding_window_view
from onnx import TensorProto, helper, numpy_helper

logger = logging.getLogger(__name__)

Dim = int | str

#: The opset and IR version every zoo model is written with. onnx 1.23 defaults to
#: IR 14, which onnxruntime 1.2x refuses to load.
OPSET = 17
IR_VERSION = 10

#: Pseudo-count that shrinks a BN layer's per-channel calibration variance toward
#: the layer's mean variance (matters when a channel has few samples).
SHRINK_SAMPLES = 64

#: Calibration images carry at least this many pixels, up to 16 images (a 224x224
#: model is calibrated on 1 image, a 64x64 one on 4, a 32x32 one on 13): enough
#: samples per channel for the last stage's BN layers.
CALIBRATION_PIXELS = 112 * 112


def _erf(x: np.ndarray) -> np.ndarray:
    """erf to within 1.5e-7 (Abramowitz and Stegun 7.1.26); numpy has none."""
    s = np.sign(x)
    a = np.abs(x).astype(np.float64)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741
                + t * (-1.453152027 + t * 1.061405429))))
    return (s * (1.0 - poly * np.exp(-a * a))).astype(x.dtype)


def _windows(x: np.ndarray, k: int, stride: int, pad: int, dilation: int = 1,
             fill: float = 0.0) -> np.ndarray:
    """``[N, C, Ho, Wo, k, k]`` view of the padded input's sliding windows."""
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=fill)
    span = dilation * (k - 1) + 1
    v = sliding_window_view(xp, (span, span), axis=(2, 3))
    return v[:, :, ::stride, ::stride, ::dilation, ::dilation]


def conv2d_reference(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, stride: int,
                     pad: int, groups: int, dilation: int = 1) -> np.ndarray:
    """NCHW grouped convolution in numpy (im2col + one batched matmul per group)."""
    n = x.shape[0]
    cout, cpg, k, _ = w.shape
    v = _windows(x, k, stride, pad, dilation)
    ho, wo = v.shape[2:4]
    # columns [groups, cpg*k*k, n*ho*wo]: one GEMM per group, batch folded in
    cols = v.reshape(n, groups, cpg, ho, wo, k, k).transpose(1, 2, 5, 6, 0, 3, 4)
    cols = cols.reshape(groups, cpg * k * k, n * ho * wo)
    y = np.matmul(w.reshape(groups, cout // groups, cpg * k * k), cols)
    y = y.reshape(cout, n, ho, wo).transpose(1, 0, 2, 3)
    if b is not None:
        y = y + b[None, :, None, None]
    return np.ascontiguousarray(y, dtype=np.float32)


def conv1d_reference(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, stride: int,
                     pad: int, groups: int, dilation: int = 1) -> np.ndarray:
    """NCL grouped 1-D convolution in numpy (windows + one batched matmul per group)."""
    n, _, _ = x.shape
    cout, cpg, k = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad)))
    v = sliding_window_view(xp, dilation * (k - 1) + 1, axis=2)[:, :, ::stride, ::dilation]
    lo = v.shape[2]
    cols = v.reshape(n, groups, cpg, lo, k).transpose(1, 2, 4, 0, 3)
    cols = cols.reshape(groups, cpg * k, n * lo)
    y = np.matmul(w.reshape(groups, cout // groups, cpg * k), cols)
    y = y.reshape(cout, n, lo).transpose(1, 0, 2)
    if b is not None:
        y = y + b[None, :, None]
    return np.ascontiguousarray(y, dtype=np.float32)


class GraphBuilder:
    """Accumulates an ONNX graph; every op method returns the name of its output.

    Besides the graph, the builder keeps ``values``: each tensor's value for the
    calibration batch, from which BN statistics and the declared output
    shapes are taken. Names are ``<scope>.<kind>`` (``_1``, ``_2``... on repeats),
    with scopes pushed by :meth:`scope`, so node names read like PyTorch module
    paths (``layer1.0.conv1``).
    """

    def __init__(self, name: str, seed: int = 0, calibrate_bn: bool = True) -> None:
        self.name = name
        self.calibrate_bn = calibrate_bn
        self.rng = np.random.default_rng(seed)
        self.sample_rng = np.random.default_rng([seed, 0x5A3])
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self.values: dict[str, np.ndarray] = {}
        self.batch: Dim = 1
        self._scopes: list[str] = []
        self._used: set[str] = set()
        self._scalars: dict[bytes, str] = {}

    # ------------------------------------------------------------------ naming
    @contextlib.contextmanager
    def scope(self, name: str) -> Iterator[None]:
        """Prefix the names made inside the ``with`` block by ``name``."""
        self._scopes.append(str(name))
        try:
            yield
        finally:
            self._scopes.pop()

    def fresh(self, kind: str) -> str:
        """A new unique name for a tensor or node of ``kind`` in the current scope."""
        base = ".".join([*self._scopes, kind])
        name, n = base, 0
        while name in self._used:
            n += 1
            name = f"{base}_{n}"
        self._used.add(name)
        return name

    def channels(self, x: str) -> int:
        """Size of axis 1 (channels of an NCHW tensor)."""
        return int(self.values[x].shape[1])

    # ----------------------------------------------------------- graph edges
    def input(self, name: str, shape: Sequence[Dim], dtype: int = TensorProto.FLOAT,
              high: int = 100) -> str:
        """Declare a graph input; symbolic dims are strings, dim 0 is the batch.

        The calibration sample has batch 1, or for images as many (up to 16) as
        give :data:`CALIBRATION_PIXELS` pixels, symbolic dims 1: N(0, 1) floats or
        integers in ``[0, high)``.
        """
        self._used.add(name)
        self.inputs.append(helper.make_tensor_value_info(name, dtype, list(shape)))
        self.batch = shape[0]
        concrete = [d if isinstance(d, int) else 1 for d in shape]
        concrete[0] = 1
        if len(shape) == 4:  # images: enough pixels for per-channel statistics
            concrete[0] = min(16, max(1, math.ceil(CALIBRATION_PIXELS / math.prod(concrete[2:]))))
        np_dtype = helper.tensor_dtype_to_np_dtype(dtype)
        if np.issubdtype(np_dtype, np.integer):
            self.values[name] = self.sample_rng.integers(0, high, concrete).astype(np_dtype)
        else:
            self.values[name] = self.sample_rng.standard_normal(concrete).astype(np_dtype)
        return name

    def output(self, x: str, name: str = "output") -> str:
        """Declare ``x`` a graph output, renamed to ``name``; dim 0 is the batch."""
        if name != x:
            if name in self._used:
                raise ValueError(f"name {name!r} is already used")
            for node in self.nodes:
                for i, v in enumerate(node.output):
                    if v == x:
                        node.output[i] = name
                for i, v in enumerate(node.input):
                    if v == x:
                        node.input[i] = name
            self.values[name] = self.values.pop(x)
            self._used.add(name)
        value = self.values[name]
        shape = [self.batch, *value.shape[1:]]
        dtype = helper.np_dtype_to_tensor_dtype(value.dtype)
        self.outputs.append(helper.make_tensor_value_info(name, dtype, shape))
        return name

    def const(self, value: np.ndarray, kind: str = "const") -> str:
        """Add an initializer; one-element constants of equal value and dtype are shared."""
        value = np.asarray(value)
        key = None
        if value.size == 1 and value.ndim <= 1:
            key = f"{value.ndim}{value.dtype.str}".encode() + value.tobytes()
            if key in self._scalars:
                return self._scalars[key]
        name = self.fresh(kind)
        self.initializers.append(numpy_helper.from_array(value, name))
        self.values[name] = value
        if key is not None:
            self._scalars[key] = name
        return name

    def scalar(self, v: float) -> str:
        """A float32 scalar initializer."""
        return self.const(np.array(v, dtype=np.float32), "scalar")

    def node(self, op: str, inputs: Sequence[str], value: np.ndarray,
             kind: str | None = None, **attrs: object) -> str:
        """Append one single-output node whose calibration output is ``value``."""
        name = self.fresh(kind or op.lower())
        self.nodes.append(helper.make_node(op, list(inputs), [name], name=name, **attrs))
        self.values[name] = value
        return name

    # ------------------------------------------------------------- weights
    def he_normal(self, shape: Sequence[int], fan_in: int) -> np.ndarray:
        """He-normal weights, ``N(0, 2 / fan_in)``."""
        w = self.rng.standard_normal(tuple(shape), dtype=np.float32)
        w *= np.float32(math.sqrt(2.0 / fan_in))
        return w

    def fan_in_uniform(self, shape: Sequence[int], fan_in: int) -> np.ndarray:
        """PyTorch's default bias init, ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``."""
        bound = 1.0 / math.sqrt(fan_in)
        return self.rng.uniform(-bound, bound, tuple(shape)).astype(np.float32)

    # ------------------------------------------------------------ conv family
    def conv(self, x: str, cout: int, k: int = 3, stride: int = 1, pad: int | None = None,
             groups: int = 1, bias: bool = False, dilation: int = 1,
             kind: str = "conv") -> str:
        """2-D convolution (NCHW), He-normal weights ``[cout, cin/groups, k, k]``.

        ``pad`` defaults to "same" for stride 1 (``dilation * (k - 1) // 2``).
        """
        cin = self.channels(x)
        if cin % groups or cout % groups:
            raise ValueError(f"groups={groups} must divide cin={cin} and cout={cout}")
        pad = dilation * (k - 1) // 2 if pad is None else pad
        fan_in = cin // groups * k * k
        w = self.he_normal((cout, cin // groups, k, k), fan_in)
        inputs = [x, self.const(w, f"{kind}.weight")]
        b = None
        if bias:
            b = self.fan_in_uniform((cout,), fan_in)
            inputs.append(self.const(b, f"{kind}.bias"))
        y = conv2d_reference(self.values[x], w, b, stride, pad, groups, dilation)
        return self.node("Conv", inputs, y, kind=kind, kernel_shape=[k, k],
                         strides=[stride, stride], pads=[pad] * 4,
                         dilations=[dilation, dilation], group=groups)

    def conv1d(self, x: str, cout: int, k: int = 3, stride: int = 1, pad: int | None = None,
               groups: int = 1, bias: bool = False, dilation: int = 1,
               kind: str = "conv") -> str:
        """1-D convolution (NCL, as PyTorch's ``nn.Conv1d`` exports), He-normal weights
        ``[cout, cin/groups, k]``; ``pad`` defaults to "same" for stride 1."""
        cin = self.channels(x)
        if cin % groups or cout % groups:
            raise ValueError(f"groups={groups} must divide cin={cin} and cout={cout}")
        pad = dilation * (k - 1) // 2 if pad is None else pad
        fan_in = cin // groups * k
        w = self.he_normal((cout, cin // groups, k), fan_in)
        inputs = [x, self.const(w, f"{kind}.weight")]
        b = None
        if bias:
            b = self.fan_in_uniform((cout,), fan_in)
            inputs.append(self.const(b, f"{kind}.bias"))
        y = conv1d_reference(self.values[x], w, b, stride, pad, groups, dilation)
        return self.node("Conv", inputs, y, kind=kind, kernel_shape=[k], strides=[stride],
                         pads=[pad, pad], dilations=[dilation], group=groups)

    def batchnorm(self, x: str, eps: float = 1e-5, kind: str = "bn") -> str:
        """Inference BatchNormalization with statistics calibrated to its input."""
        v = self.values[x].astype(np.float64)
        c = v.shape[1]
        axes = tuple(i for i in range(v.ndim) if i != 1)
        mu, s2 = (v.mean(axis=axes), v.var(axis=axes)) if self.calibrate_bn else (0.0, 1.0)
        if self.calibrate_bn:
            # Few samples per channel (a 2x2 map of one image) make per-channel
            # variances noisy; shrink them toward the layer's pooled variance.
            n = v.size // c
            s2 = (n * s2 + SHRINK_SAMPLES * s2.mean()) / (n + SHRINK_SAMPLES)
        s2 = np.maximum(s2, 1e-6)
        gamma = self.rng.uniform(0.5, 1.5, c).astype(np.float32)
        beta = (self.rng.standard_normal(c) * 0.1).astype(np.float32)
        mean = (mu + self.rng.standard_normal(c) * 0.1 * np.sqrt(s2)).astype(np.float32)
        var = (s2 * self.rng.uniform(0.5, 1.5, c)).astype(np.float32)
        params = [(gamma, "weight"), (beta, "bias"), (mean, "running_mean"),
                  (var, "running_var")]
        names = [self.const(p, f"{kind}.{suffix}") for p, suffix in params]
        shape = (1, c) + (1,) * (v.ndim - 2)
        scale = (gamma / np.sqrt(var + eps)).reshape(shape)
        y = (self.values[x] - mean.reshape(shape)) * scale + beta.reshape(shape)
        return self.node("BatchNormalization", [x, *names], y.astype(np.float32), kind=kind,
                         epsilon=eps)

    def conv_bn(self, x: str, cout: int, k: int = 3, stride: int = 1, groups: int = 1,
                pad: int | None = None, kind: str = "conv") -> str:
        """Bias-free conv followed by BatchNormalization (``conv1`` -> ``bn1``)."""
        y = self.conv(x, cout, k, stride, pad=pad, groups=groups, kind=kind)
        return self.batchnorm(y, kind=kind.replace("conv", "bn") if "conv" in kind else "bn")

    # -------------------------------------------------------- elementwise
    def relu(self, x: str) -> str:
        """Append ``Relu(x)``; the output's name."""
        return self.node("Relu", [x], np.maximum(self.values[x], 0))

    def clip(self, x: str, lo: float, hi: float) -> str:
        """Clip with min/max as inputs (opset >= 11)."""
        y = np.clip(self.values[x], lo, hi)
        return self.node("Clip", [x, self.scalar(lo), self.scalar(hi)], y)

    def relu6(self, x: str) -> str:
        """ReLU6, which PyTorch exports as ``Clip(x, 0, 6)``."""
        return self.clip(x, 0.0, 6.0)

    def add(self, a: str, b: str) -> str:
        """Append ``Add(a, b)``; the output's name."""
        return self.node("Add", [a, b], self.values[a] + self.values[b])

    def mul(self, a: str, b: str) -> str:
        """Append ``Mul(a, b)``; the output's name."""
        return self.node("Mul", [a, b], self.values[a] * self.values[b])

    def scale(self, x: str, factor: float) -> str:
        """``x * factor`` with a scalar initializer."""
        s = self.scalar(factor)
        return self.node("Mul", [x, s], self.values[x] * self.values[s])

    def div(self, x: str, divisor: float) -> str:
        """``x / divisor`` with a scalar initializer."""
        s = self.scalar(divisor)
        return self.node("Div", [x, s], self.values[x] / self.values[s])

    def gelu(self, x: str) -> str:
        """Exact GELU as exporters emit it below opset 20: ``x*(1+erf(x/sqrt2))*0.5``."""
        t = self.div(x, math.sqrt(2.0))
        t = self.node("Erf", [t], _erf(self.values[t]))
        one = self.scalar(1.0)
        t = self.node("Add", [t, one], self.values[t] + self.values[one])
        t = self.mul(x, t)
        return self.scale(t, 0.5)

    def sub(self, a: str, b: str) -> str:
        """Append ``Sub(a, b)``; the output's name."""
        return self.node("Sub", [a, b], self.values[a] - self.values[b])

    def sigmoid(self, x: str) -> str:
        """Append ``Sigmoid(x)``; the output's name."""
        y = 1.0 / (1.0 + np.exp(-self.values[x].astype(np.float64)))
        return self.node("Sigmoid", [x], y.astype(np.float32))

    def silu(self, x: str) -> str:
        """SiLU / swish, ``x * sigmoid(x)``, as the exporter writes it (Sigmoid + Mul)."""
        return self.mul(x, self.sigmoid(x))

    def hardsigmoid(self, x: str) -> str:
        """PyTorch's Hardsigmoid, ``clip(x / 6 + 1/2, 0, 1)``: ``HardSigmoid(alpha=1/6)``."""
        y = np.clip(self.values[x] / np.float32(6.0) + np.float32(0.5), 0, 1)
        return self.node("HardSigmoid", [x], y.astype(np.float32), alpha=1.0 / 6.0,
                         beta=0.5)

    def hardswish(self, x: str) -> str:
        """``x * relu6(x + 3) / 6``: the opset-14 ``HardSwish`` op PyTorch exports."""
        v = self.values[x]
        y = v * np.clip(v / np.float32(6.0) + np.float32(0.5), 0, 1)
        return self.node("HardSwish", [x], y.astype(np.float32))

    def softmax(self, x: str, axis: int = -1) -> str:
        """Append ``Softmax(x)`` over ``axis``; the output's name."""
        v = self.values[x]
        e = np.exp(v - v.max(axis=axis, keepdims=True))
        return self.node("Softmax", [x], e / e.sum(axis=axis, keepdims=True), axis=axis)

    # -------------------------------------------------------------- pooling
    def maxpool(self, x: str, k: int, stride: int, pad: int = 0) -> str:
        """Append a ``k x k`` ``MaxPool`` with ``stride`` and ``pad``; the output's name."""
        y = _windows(self.values[x], k, stride, pad, fill=-np.inf).max(axis=(4, 5))
        return self.node("MaxPool", [x], y, kernel_shape=[k, k], strides=[stride, stride],
                         pads=[pad] * 4)

    def avgpool(self, x: str, k: int, stride: int, pad: int = 0) -> str:
        """AveragePool; padding counts as zeros (``count_include_pad=1``)."""
        y = _windows(self.values[x], k, stride, pad).mean(axis=(4, 5))
        return self.node("AveragePool", [x], y.astype(np.float32), kernel_shape=[k, k],
                         strides=[stride, stride], pads=[pad] * 4, count_include_pad=1)

    def maxpool1d(self, x: str, k: int, stride: int) -> str:
        """``MaxPool`` over the last axis of ``[N, C, L]`` (``nn.MaxPool1d``, no padding)."""
        v = sliding_window_view(self.values[x], k, axis=2)[:, :, ::stride]
        return self.node("MaxPool", [x], np.ascontiguousarray(v.max(axis=3)), kind="maxpool",
                         kernel_shape=[k], strides=[stride])

    def global_avgpool(self, x: str) -> str:
        """Append ``GlobalAveragePool(x)``; the output's name."""
        y = self.values[x].mean(axis=(2, 3), keepdims=True)
        return self.node("GlobalAveragePool", [x], y, kind="avgpool")

    def reduce_mean(self, x: str, axes: Sequence[int], keepdims: bool = False) -> str:
        """``ReduceMean`` with ``axes`` as an attribute (opset 17), e.g. torch's ``x.mean([2, 3])``."""
        y = self.values[x].mean(axis=tuple(axes), keepdims=keepdims)
        return self.node("ReduceMean", [x], y.astype(np.float32), axes=list(axes),
                         keepdims=int(keepdims))

    def reduce_max(self, x: str, axes: Sequence[int], keepdims: bool = False) -> str:
        """``ReduceMax`` with ``axes`` as an attribute (opset 17): a global max pool."""
        y = self.values[x].max(axis=tuple(axes), keepdims=keepdims)
        return self.node("ReduceMax", [x], y.astype(np.float32), axes=list(axes),
                         keepdims=int(keepdims))

    def upsample_nearest(self, x: str, factor: int = 2) -> str:
        """``nn.Upsample(scale_factor, mode="nearest")`` as exported at opset 17: ``Resize``
        with empty ``roi``, ``scales [1, 1, f, f]``, asymmetric coordinates, floor rounding."""
        v = self.values[x]
        y = np.repeat(np.repeat(v, factor, axis=2), factor, axis=3)
        scales = self.const(np.array([1, 1, factor, factor], dtype=np.float32), "scales")
        return self.node("Resize", [x, "", scales], y, kind="resize", mode="nearest",
                         coordinate_transformation_mode="asymmetric",
                         nearest_mode="floor")

    # ---------------------------------------------------------------- shape
    def concat(self, xs: Sequence[str], axis: int = 1) -> str:
        """Append ``Concat(xs, axis)``; the output's name."""
        y = np.concatenate([self.values[x] for x in xs], axis=axis)
        return self.node("Concat", list(xs), y, axis=axis)

    def split(self, x: str, sizes: Sequence[int], axis: int = 1) -> list[str]:
        """``Split`` into pieces of ``sizes`` along ``axis`` (sizes as an input, opset >= 13);
        torch's ``chunk``/``split``. The names of the pieces."""
        v = self.values[x]
        if sum(sizes) != v.shape[axis]:
            raise ValueError(f"split sizes {list(sizes)} do not add up to {v.shape[axis]}")
        pieces = np.split(v, np.cumsum(sizes)[:-1], axis=axis)
        name = self.fresh("split")
        outs = [self.fresh(f"split.{i}") for i in range(len(sizes))]
        sizes_name = self.const(np.array(sizes, dtype=np.int64), "split_sizes")
        self.nodes.append(helper.make_node("Split", [x, sizes_name], outs, name=name,
                                           axis=axis))
        for out, piece in zip(outs, pieces):
            self.values[out] = np.ascontiguousarray(piece)
        return outs

    def squeeze(self, x: str, axes: Sequence[int]) -> str:
        """``Squeeze`` with ``axes`` as an input (opset >= 13)."""
        y = np.squeeze(self.values[x], axis=tuple(axes))
        a = self.const(np.array(list(axes), dtype=np.int64), "axes")
        return self.node("Squeeze", [x, a], y)

    def gather(self, x: str, index: int, axis: int) -> str:
        """``Gather`` of one scalar ``index`` along ``axis`` (drops that axis): ``x[:, 0]``."""
        y = np.take(self.values[x], index, axis=axis)
        i = self.const(np.array(index, dtype=np.int64), "index")
        return self.node("Gather", [x, i], np.ascontiguousarray(y), axis=axis)

    def flatten(self, x: str) -> str:
        """``Flatten(axis=1)``: ``[N, C, H, W] -> [N, C*H*W]``."""
        v = self.values[x]
        return self.node("Flatten", [x], v.reshape(v.shape[0], -1), axis=1)

    def reshape(self, x: str, shape: Sequence[int]) -> str:
        """Reshape with ONNX semantics: 0 copies the input dim, -1 is inferred."""
        v = self.values[x]
        concrete = [v.shape[i] if d == 0 else d for i, d in enumerate(shape)]
        target = self.const(np.array(shape, dtype=np.int64), "shape")
        return self.node("Reshape", [x, target], v.reshape(concrete))

    def transpose(self, x: str, perm: Sequence[int]) -> str:
        """Append ``Transpose(x, perm)``; the output's name."""
        y = np.ascontiguousarray(self.values[x].transpose(perm))
        return self.node("Transpose", [x], y, perm=list(perm))

    # ------------------------------------------------------------- dense
    def gemm(self, x: str, nout: int, bias: bool = True, kind: str = "fc") -> str:
        """``Gemm(x, W, b, transB=1)`` with ``W: [nout, nin]``: torch's nn.Linear on 2-D."""
        nin = int(self.values[x].shape[1])
        w = self.he_normal((nout, nin), nin)
        inputs = [x, self.const(w, f"{kind}.weight")]
        y = self.values[x] @ w.T
        if bias:
            b = self.fan_in_uniform((nout,), nin)
            inputs.append(self.const(b, f"{kind}.bias"))
            y = y + b
        return self.node("Gemm", inputs, y, kind=kind, transB=1)

    def linear(self, x: str, nout: int, bias: bool = True, kind: str = "linear") -> str:
        """``MatMul(x, W) + b`` with ``W: [nin, nout]``: torch's nn.Linear on 3-D."""
        nin = int(self.values[x].shape[-1])
        w = self.const(self.he_normal((nin, nout), nin), f"{kind}.weight")
        y = self.node("MatMul", [x, w], self.values[x] @ self.values[w], kind=kind)
        if not bias:
            return y
        b = self.const(self.fan_in_uniform((nout,), nin), f"{kind}.bias")
        return self.add(y, b)

    def matmul(self, a: str, b: str) -> str:
        """MatMul of two tensors (batched, numpy semantics)."""
        return self.node("MatMul", [a, b], np.matmul(self.values[a], self.values[b]))

    def layernorm(self, x: str, eps: float = 1e-5, kind: str = "layernorm") -> str:
        """Opset-17 LayerNormalization over the last axis."""
        v = self.values[x]
        h = int(v.shape[-1])
        gamma = self.rng.uniform(0.5, 1.5, h).astype(np.float32)
        beta = (self.rng.standard_normal(h) * 0.1).astype(np.float32)
        g = self.const(gamma, f"{kind}.weight")
        b = self.const(beta, f"{kind}.bias")
        mu = v.mean(axis=-1, keepdims=True)
        y = (v - mu) / np.sqrt(v.var(axis=-1, keepdims=True) + eps) * gamma + beta
        return self.node("LayerNormalization", [x, g, b], y.astype(np.float32), kind=kind,
                         axis=-1, epsilon=eps)

    def embedding(self, ids: str, num: int, dim: int, std: float = 0.02,
                  kind: str = "embedding") -> str:
        """``Gather(table, ids)`` with a ``[num, dim]`` table ~ N(0, std)."""
        table = (self.rng.standard_normal((num, dim)) * std).astype(np.float32)
        t = self.const(table, f"{kind}.weight")
        return self.node("Gather", [t, ids], table[self.values[ids]], kind=kind, axis=0)

    # -------------------------------------------------------------- output
    def model(self, doc: str = "") -> onnx.ModelProto:
        """The finished model: opset 17, IR version 10.

        Not checked here (``check_model(full_check=True)`` serializes and re-infers a
        100 MB model in about a second); the zoo's tests check every model.
        """
        graph = helper.make_graph(
            self.nodes, self.name, self.inputs, self.outputs, self.initializers
        )
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET)],
            ir_version=IR_VERSION,
            producer_name="tvm_cocopie.models",
            doc_string=doc,
        )
        logger.debug("built %s: %d nodes, %d initializers", self.name, len(self.nodes),
                     len(self.initializers))
        return model


def batch_dim(batch: int, dynamic_batch: bool) -> Dim:
    """The batch dimension of a graph input: ``"N"`` when dynamic, else ``batch``."""
    return "N" if dynamic_batch else int(batch)
