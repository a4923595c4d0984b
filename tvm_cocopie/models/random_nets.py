"""Random networks: architectures drawn from a seed, for training the latency model.

A latency model evaluated leave-one-model-out sees, for each held-out model, only the
kernels of the other models: a kernel class or shape no other model has (a captcha
recognizer's wide recurrent head, a file-type classifier's 1-D convs) is predicted from
nothing near it. :func:`random_network` draws whole networks from the operator
vocabulary of the zoo's builder, with shapes and block types sampled independently of
any particular model, so that training data covers the space models live in rather
than the benchmark's list. The same seed gives the same network (byte for byte).

Three kinds, a third each over seeds (``seed % 3``: 0 image, 1 sequence, 2 signal):

* **image networks** (``[1, 3, H, W]``, H and W 32-224, not always square): a strided
  stem, then 3-8 blocks, each one of plain conv + BN + activation, a residual pair, an
  inverted residual (expansion, depthwise 3x3 / 5x5, projection, optional
  squeeze-excite), a grouped conv, a dilated conv, two branches concatenated, a pool,
  an upsample; channels 8-512; a classifier head (global pool + FC), a dense head
  (1x1 conv over the map) or a text-line head (the map pooled over its height, read
  column by column by a GRU / LSTM, a per-column vocabulary of up to 6000 classes, as
  a CRNN's);
* **sequence networks** (``[1, T, D]`` float features, T 1-256, D 32-768): 2-6 blocks of
  pre-norm attention, an MLP (GELU or ReLU), a plain linear, a GRU or LSTM (uni- or
  bidirectional, hidden 32-256), a depthwise temporal conv, closed by mean pooling + FC
  or a per-token linear;
* **signal networks** (audio frames ``[1, T, F]``, T 16-400, F 13-80, or byte / token
  ids ``[1, T]`` through an embedding, T 64-2048): 1-4 blocks of 1-D conv (k 3-9,
  stride 1-2, grouped or not) + BN + activation, max pools, an optional layer norm
  over channels, then a global max / mean pool + dense layers, or a GRU / LSTM
  (stacked 1-2) with its final state or per-step scores (keyword spotters, voice
  activity, file-type classifiers, CTC heads).

Activations stay O(1) as in the zoo (He-normal weights, BN calibrated on the way).

**Deep networks** (``random_deep_<seed>``, :func:`random_network` with ``deep=True``):
the same three kinds with about three times the blocks (image 10-24, sequence 8-16,
signal 4-10), drawn from a stream of their own (``random_<seed>`` is unchanged); deep
image networks start at 96-224 px, stride more often and never narrow (channels grow
as the map shrinks, as a ResNet's do), deep sequence networks are 128-768 wide. Shallow
networks read at most ~60 MiB per inference, where ResNets, VGG and the detectors read
100-700 MiB and their weights no longer stay cached between inferences: the latency
model learns what that costs a kernel (its model context) only from networks that
large.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

from ..errors import CocopieError
from .graph_builder import GraphBuilder
from .mobilenetv3 import squeeze_excite
from .recurrent import merge_directions, recurrent
from .vit import self_attention

#: the prefix of a random network's name: ``random_<seed>``
PREFIX = "random_"
#: the prefix of a deep random network's name: ``random_deep_<seed>``
DEEP_PREFIX = "random_deep_"
#: blocks per kind, ``(low, high)`` with high exclusive: shallow and deep networks
BLOCKS = {"image": ((3, 9), (10, 25)), "sequence": ((2, 7), (8, 17)),
          "signal": ((1, 5), (4, 11))}
IMAGE_SIZES = (32, 48, 56, 64, 96, 112, 128, 160, 192, 224)
CHANNELS = (8, 12, 16, 24, 32, 40, 48, 64, 80, 96, 120, 128, 160, 192, 256, 320, 384, 512)
ACTIVATIONS = ("relu", "relu6", "hardswish", "silu", "sigmoid", "none")
TOKENS = (1, 8, 16, 25, 32, 49, 64, 100, 128, 197, 256)
WIDTHS = (32, 48, 64, 96, 128, 192, 256, 384, 512, 768)
#: the kinds of network, by ``seed % 3``
KINDS = ("image", "sequence", "signal")
CELLS = ("GRU", "LSTM")
HIDDEN = (32, 48, 64, 96, 128, 192, 256)
#: per-step vocabularies of text-line heads (digits, Latin, a CJK character set)
VOCABS = (11, 37, 97, 512, 2000, 6000)
#: keep a network's size within what a collection can afford: a layer's
#: multiply-adds and a map's elements past these make the sampler shrink its width
MAX_LAYER_MACS = 4e8
MAX_MAP_ELEMENTS = 2.5e6


def _parse(name: str) -> tuple[int, bool] | None:
    """``(seed, deep)`` of a random network's name, ``None`` for any other name."""
    for prefix, deep in ((DEEP_PREFIX, True), (PREFIX, False)):
        if name.startswith(prefix) and name[len(prefix):].isdigit():
            return int(name[len(prefix):]), deep
    return None


def is_random(name: str) -> bool:
    """Whether ``name`` names a random network (``random_<seed>``,
    ``random_deep_<seed>``)."""
    return _parse(name) is not None


def network_name(seed: int, deep: bool = False) -> str:
    """The name of the random network of ``seed`` (deep or not)."""
    return f"{DEEP_PREFIX if deep else PREFIX}{seed}"


def network_by_name(name: str) -> onnx.ModelProto:
    """The random network ``name`` names (:func:`is_random`)."""
    parsed = _parse(name)
    if parsed is None:
        raise CocopieError(f"{name!r} names no random network: random_<seed> or "
                           "random_deep_<seed>, seed a non-negative integer")
    return random_network(*parsed)


def random_network(seed: int, deep: bool = False) -> onnx.ModelProto:
    """The random network of ``seed``: :data:`KINDS` ``[seed % 3]``, with about three
    times the blocks if ``deep`` (see the module docstring)."""
    rng = np.random.default_rng([seed, 0x1A7, 0xDEE] if deep else [seed, 0x1A7])
    gb = GraphBuilder(network_name(seed, deep), seed)
    kind = KINDS[seed % len(KINDS)]
    blocks = {"image": _image_network, "sequence": _sequence_network,
              "signal": _signal_network}[kind](gb, rng, deep)
    depth = "deep " if deep else ""
    return gb.model(f"random {depth}{kind} network (seed {seed}): {', '.join(blocks)}")


def _pick(rng, options):
    return options[int(rng.integers(len(options)))]


def _activation(gb: GraphBuilder, x: str, act: str) -> str:
    if act == "relu":
        return gb.relu(x)
    if act == "relu6":
        return gb.relu6(x)
    if act == "hardswish":
        return gb.hardswish(x)
    if act == "silu":
        return gb.silu(x)
    if act == "sigmoid":
        return gb.mul(x, gb.sigmoid(x))
    return x


def _fit_channels(cout: int, cin: int, k: int, hw: int, groups: int = 1) -> int:
    """``cout`` shrunk (halved) until the layer's multiply-adds and its output map fit
    :data:`MAX_LAYER_MACS` / :data:`MAX_MAP_ELEMENTS`."""
    while cout > 8 and (cout * hw > MAX_MAP_ELEMENTS
                        or cout * (cin // groups) * k * k * hw > MAX_LAYER_MACS):
        cout //= 2
    return max(cout, 1)


def _conv_act(gb: GraphBuilder, x: str, cout: int, k: int, stride: int, act: str,
              groups: int = 1, dilation: int = 1) -> str:
    pad = dilation * (k - 1) // 2
    y = gb.batchnorm(gb.conv(x, cout, k, stride, pad=pad, groups=groups, dilation=dilation))
    return _activation(gb, y, act)


def _image_network(gb: GraphBuilder, rng, deep: bool) -> list[str]:
    sizes = IMAGE_SIZES[4:] if deep else IMAGE_SIZES
    h = int(_pick(rng, sizes))
    w = h if rng.random() < 0.7 else int(_pick(rng, sizes))
    x = gb.input("input", [1, 3, h, w])
    stem_k, stem_s = int(_pick(rng, (3, 3, 5, 7))), int(_pick(rng, (1, 2, 2)))
    c = int(_pick(rng, CHANNELS[:8]))
    done = [f"{h}x{w}", f"stem {stem_k}x{stem_k}/{stem_s} {c}"]
    x = _conv_act(gb, x, c, stem_k, stem_s, _pick(rng, ACTIVATIONS[:4]))
    for i in range(int(rng.integers(*BLOCKS["image"][deep]))):
        cin = gb.channels(x)
        hh, ww = (int(d) for d in gb.values[x].shape[2:])
        act = _pick(rng, ACTIVATIONS)
        block = _pick(rng, ("plain", "plain", "residual", "inverted", "inverted", "grouped",
                            "dilated", "branches", "pool", "upsample"))
        stride = 2 if min(hh, ww) >= 8 and rng.random() < (0.45 if deep else 0.35) else 1
        hw_out = (hh // stride) * (ww // stride)
        low = cin if deep else cin // 2  # deep: channels grow as the map shrinks
        cout = int(_pick(rng, [ch for ch in CHANNELS if low <= ch <= 4 * cin] or [cin]))
        with gb.scope(f"block{i}"):
            if block == "plain":
                k = int(_pick(rng, (1, 3, 3, 5)))
                cout = _fit_channels(cout, cin, k, hw_out)
                x = _conv_act(gb, x, cout, k, stride, act)
                done.append(f"conv {k}x{k}/{stride} {cout} {act}")
            elif block == "residual":
                k = int(_pick(rng, (1, 3)))
                if _fit_channels(cin, cin, k, hh * ww) < cin:
                    continue
                y = _conv_act(gb, x, cin, k, 1, act)
                y = gb.batchnorm(gb.conv(y, cin, k, 1))
                x = gb.relu(gb.add(x, y))
                done.append(f"residual {k}x{k} {cin}")
            elif block == "inverted":
                t, k = int(_pick(rng, (1, 2, 3, 4, 6))), int(_pick(rng, (3, 3, 5)))
                mid = _fit_channels(cin * t, cin, 1, hh * ww)
                y = _conv_act(gb, x, mid, 1, 1, act) if mid != cin else x
                y = _conv_act(gb, y, mid, k, stride, act, groups=mid)
                se = rng.random() < 0.4 and mid >= 16
                if se:
                    y = squeeze_excite(gb, y, max(8, mid // 4))
                cout = _fit_channels(cout, mid, 1, hw_out)
                y = gb.batchnorm(gb.conv(y, cout, 1, 1, pad=0))
                x = gb.add(x, y) if stride == 1 and cout == cin else y
                done.append(f"inverted t{t} dw{k}/{stride} {cout}{' se' if se else ''}")
            elif block == "grouped":
                groups = int(_pick(rng, [g for g in (2, 4, 8, 16, 32)
                                         if cin % g == 0 and cout % g == 0] or [1]))
                cout = _fit_channels(cout, cin, 3, hw_out, groups)
                if cout % groups:
                    cout = cin
                x = _conv_act(gb, x, cout, 3, stride, act, groups=groups)
                done.append(f"grouped 3x3/{stride} g{groups} {cout}")
            elif block == "dilated":
                d = int(_pick(rng, (2, 3)))
                cout = _fit_channels(cout, cin, 3, hh * ww)
                x = _conv_act(gb, x, cout, 3, 1, act, dilation=d)
                done.append(f"dilated 3x3 d{d} {cout}")
            elif block == "branches":
                half = _fit_channels(max(8, cout // 2), cin, 3, hh * ww)
                a = _conv_act(gb, x, half, 1, 1, act)
                b = _conv_act(gb, x, half, 3, 1, act)
                x = gb.concat([a, b], axis=1)
                done.append(f"branches 1x1+3x3 {2 * half}")
            elif block == "pool":
                if min(hh, ww) < 4:
                    continue
                if rng.random() < 0.5:
                    x = gb.maxpool(x, *_pick(rng, ((2, 2, 0), (3, 2, 1))))
                    done.append("maxpool")
                else:
                    x = gb.avgpool(x, 2, 2)
                    done.append("avgpool")
            elif block == "upsample":
                if hh * ww * 4 * cin > MAX_MAP_ELEMENTS or max(hh, ww) > 64:
                    continue
                x = gb.upsample_nearest(x, 2)
                cout = _fit_channels(max(8, cin // 2), cin, 3, hh * ww * 4)
                x = _conv_act(gb, x, cout, 3, 1, act)
                done.append(f"upsample conv {cout}")
    head = rng.random()
    if head < 0.55:
        classes = int(_pick(rng, (10, 100, 1000)))
        x = gb.gemm(gb.flatten(gb.global_avgpool(x)), classes, kind="fc")
        done.append(f"classifier {classes}")
    elif head < 0.8:
        # a text line: the map pooled over its height, its columns read in order
        cols = gb.transpose(gb.reduce_mean(x, [2]), (2, 0, 1))  # [W, 1, C]
        y, hidden, cell, both = _recurrent_layer(gb, rng, cols)
        vocab = int(_pick(rng, VOCABS))
        x = gb.transpose(gb.linear(y, vocab, kind="head"), (1, 0, 2))  # [1, W, vocab]
        done.append(f"text-line {cell.lower()} {hidden}{' bi' if both else ''} -> {vocab}")
    else:
        maps = int(_pick(rng, (1, 2, 4, 19)))
        x = gb.conv(x, maps, 1, 1, pad=0, bias=True, kind="head")
        done.append(f"dense head {maps}")
    gb.output(x)
    return done


def _sequence_network(gb: GraphBuilder, rng, deep: bool) -> list[str]:
    t, d = int(_pick(rng, TOKENS)), int(_pick(rng, WIDTHS[4:] if deep else WIDTHS))
    x = gb.input("input", [1, t, d])
    done = [f"{t}x{d}"]
    for i in range(int(rng.integers(*BLOCKS["sequence"][deep]))):
        block = _pick(rng, ("attention", "attention", "mlp", "mlp", "linear", "recurrent",
                            "recurrent", "temporal_conv"))
        dim = int(gb.values[x].shape[-1])
        with gb.scope(f"block{i}"):
            if block == "attention":
                heads = int(_pick(rng, [h for h in (1, 2, 3, 4, 6, 8, 12) if dim % h == 0
                                        and dim // h >= 16] or [1]))
                x = gb.add(x, self_attention(gb, gb.layernorm(x), heads))
                done.append(f"attention {heads} heads")
            elif block == "mlp":
                ratio = int(_pick(rng, (2, 4)))
                h = gb.linear(gb.layernorm(x), ratio * dim, kind="fc1")
                h = gb.gelu(h) if rng.random() < 0.6 else gb.relu(h)
                x = gb.add(x, gb.linear(h, dim, kind="fc2"))
                done.append(f"mlp x{ratio}")
            elif block == "linear":
                width = int(_pick(rng, WIDTHS))
                x = _activation(gb, gb.linear(x, width), _pick(rng, ("relu", "none", "sigmoid")))
                done.append(f"linear {width}")
            elif block == "recurrent":
                y, hidden, cell, both = _recurrent_layer(gb, rng, gb.transpose(x, (1, 0, 2)))
                x = gb.transpose(y, (1, 0, 2))
                done.append(f"{cell.lower()} {hidden}{' bi' if both else ''}")
            else:  # a Conformer's depthwise conv over time, pointwise around it
                k = int(_pick(rng, (3, 5, 7, 15, 31)))
                y = gb.transpose(gb.layernorm(x), (0, 2, 1))  # [1, D, T]
                y = gb.batchnorm(gb.conv1d(y, dim, k, groups=dim))
                y = gb.conv1d(_activation(gb, y, "silu"), dim, 1, bias=True, kind="pointwise")
                x = gb.add(x, gb.transpose(y, (0, 2, 1)))
                done.append(f"temporal dw{k}")
    if rng.random() < 0.5:
        classes = int(_pick(rng, (2, 10, 100, 1000)))
        x = gb.gemm(gb.reduce_mean(x, [1]), classes, kind="fc")
        done.append(f"pooled classifier {classes}")
    else:
        width = int(_pick(rng, (16, 64, 512, 5000)))
        x = gb.linear(x, width, kind="head")
        done.append(f"per-token head {width}")
    gb.output(x)
    return done


def _recurrent_layer(gb: GraphBuilder, rng, x: str) -> tuple[str, int, str, bool]:
    """A GRU or LSTM over time-major ``x [T, N, I]``, uni- or bidirectional:
    ``(output [T, N, D*hidden], hidden, cell, bidirectional)``."""
    cell, hidden = _pick(rng, CELLS), int(_pick(rng, HIDDEN))
    both = bool(rng.random() < 0.5)
    y, _ = recurrent(gb, x, hidden, cell, both)
    return merge_directions(gb, y), hidden, cell, both


def _signal_network(gb: GraphBuilder, rng, deep: bool) -> list[str]:
    if rng.random() < 0.6:  # audio frames
        t, f = int(_pick(rng, (16, 49, 98, 100, 200, 400))), int(_pick(rng, (13, 40, 64, 80)))
        x = gb.transpose(gb.input("input", [1, t, f]), (0, 2, 1))  # [1, F, T]
        done = [f"frames {t}x{f}"]
    else:  # bytes or tokens
        t, vocab = int(_pick(rng, (64, 256, 512, 1024, 2048))), int(_pick(rng, (257, 1000)))
        dim = int(_pick(rng, (16, 32, 64, 128)))
        ids = gb.input("input", [1, t], TensorProto.INT64, high=vocab)
        x = gb.transpose(gb.embedding(ids, vocab, dim, std=1.0), (0, 2, 1))  # [1, dim, T]
        done = [f"ids {t} vocab {vocab} embed {dim}"]
    for i in range(int(rng.integers(*BLOCKS["signal"][deep]))):
        cin, length = gb.channels(x), int(gb.values[x].shape[2])
        with gb.scope(f"block{i}"):
            k, act = int(_pick(rng, (3, 5, 7, 9))), _pick(rng, ACTIVATIONS[:5])
            stride = 2 if length >= 32 and rng.random() < 0.4 else 1
            cout = int(_pick(rng, [c for c in CHANNELS if 16 <= c <= 256 and c >= cin // 2]
                              or [cin]))
            groups = int(_pick(rng, [g for g in (1, 1, 2, 4, cin)
                                     if cin % g == 0 and cout % g == 0]))
            cout = _fit_channels(cout, cin, k, length // stride, groups)
            if cout % groups:
                groups = 1
            x = _activation(gb, gb.batchnorm(gb.conv1d(x, cout, k, stride, groups=groups)), act)
            done.append(f"conv1d {k}/{stride} g{groups} {cout} {act}")
            if length // stride >= 16 and rng.random() < 0.3:
                x = gb.maxpool1d(x, 2, 2)
                done.append("maxpool1d")
    if rng.random() < 0.3:
        x = gb.transpose(gb.layernorm(gb.transpose(x, (0, 2, 1))), (0, 2, 1))
        done.append("layer norm")
    if rng.random() < 0.5:
        pooled = gb.reduce_max(x, [2]) if rng.random() < 0.5 else gb.reduce_mean(x, [2])
        width = int(_pick(rng, (64, 128, 256, 512)))
        h = gb.relu(gb.gemm(pooled, width, kind="dense"))
        classes = int(_pick(rng, (2, 12, 35, 214, 1000)))
        x = gb.gemm(h, classes, kind="fc")
        done.append(f"pooled dense {width} -> {classes}")
    else:
        seq = gb.transpose(x, (2, 0, 1))  # [T, 1, C]
        for layer in range(int(rng.integers(1, 3))):
            with gb.scope(f"rnn{layer}"):
                seq, hidden, cell, both = _recurrent_layer(gb, rng, seq)
                done.append(f"{cell.lower()} {hidden}{' bi' if both else ''}")
        if rng.random() < 0.5:
            classes = int(_pick(rng, (2, 12, 35)))
            x = gb.gemm(gb.gather(seq, -1, axis=0), classes, kind="fc")  # the last step
            done.append(f"last step -> {classes}")
        else:
            vocab = int(_pick(rng, VOCABS))
            x = gb.transpose(gb.linear(seq, vocab, kind="head"), (1, 0, 2))  # [1, T, vocab]
            done.append(f"per-step head {vocab}")
    gb.output(x)
    return done
