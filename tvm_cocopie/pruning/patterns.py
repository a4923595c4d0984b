"""Kernel patterns of PatDNN (seed 004, ch. 2): statistics, pattern sets, projection,
connectivity pruning and detection, in numpy on OIHW conv weights.

A *pattern* is the set of positions a 3x3 kernel keeps, as a sorted tuple of flat
indices ``dy * 3 + dx``. PatDNN keeps 4 per kernel, the centre always among them: there
are ``C(8, 3) = 56`` such patterns (:data:`ALL_PATTERNS`). A kernel's *natural
pattern* is its centre plus its 3 largest-magnitude other weights; the most frequent
natural patterns over a model are its pattern set (:func:`pattern_set`, k = 4 to 12).
Pruning (:func:`project`) keeps in each kernel the pattern of the set that keeps the
most of its L2 norm, then *connectivity pruning* (:func:`prune_connectivity`) removes
whole kernels (input -> output channel links) of smallest L2 norm at a given rate.

:func:`detect` reads the patterns back out of any constant weight: the compiler side
(:mod:`tvm_cocopie.topi.cpu.pattern_conv`) only needs the supports, however they were
made.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..errors import CompilationError

CENTRE = 4
#: every 4-entry 3x3 pattern that keeps the centre (56)
ALL_PATTERNS: tuple[tuple[int, ...], ...] = tuple(
    tuple(sorted((CENTRE, *others)))
    for others in itertools.combinations([i for i in range(9) if i != CENTRE], 3))
#: pattern-set sizes PatDNN evaluates
MIN_PATTERNS, MAX_PATTERNS = 4, 12
#: a detected layer has at most this many distinct kernel supports (after folding
#: subsets into supersets): one code path each
MAX_DETECTED_PATTERNS = 16
#: and at most this fraction of its weights nonzero: denser layers run faster dense
MAX_DETECTED_DENSITY = 0.3


def _kernels(weight: np.ndarray) -> np.ndarray:
    """An OIHW 3x3 weight as ``[O, I, 9]``, with a clear error for anything else."""
    weight = np.asarray(weight)
    if weight.ndim != 4 or weight.shape[2:] != (3, 3):
        raise CompilationError(
            f"pattern pruning takes 3x3 conv weights (O, I, 3, 3); got shape {weight.shape}")
    return weight.reshape(weight.shape[0], weight.shape[1], 9)


def natural_patterns(weight: np.ndarray) -> Counter:
    """How often each pattern is the natural pattern of a nonzero kernel of ``weight``:
    the centre and the 3 other positions of largest magnitude."""
    k = np.abs(_kernels(weight)).reshape(-1, 9)
    k = k[k.any(axis=1)]
    others = np.delete(k, CENTRE, axis=1)
    top = np.argsort(-others, axis=1, kind="stable")[:, :3]
    top = np.where(top >= CENTRE, top + 1, top)  # back to flat 3x3 positions
    keys = np.sort(np.concatenate([top, np.full((len(top), 1), CENTRE)], axis=1), axis=1)
    return Counter(tuple(int(v) for v in row) for row in keys)


def pattern_set(weights, k: int = 8) -> tuple[tuple[int, ...], ...]:
    """The ``k`` most frequent natural patterns over ``weights`` (an iterable of 3x3
    OIHW weights), most frequent first (ties by pattern, so the set is deterministic)."""
    if not MIN_PATTERNS <= k <= MAX_PATTERNS:
        raise CompilationError(f"pattern set size {k} out of range: PatDNN uses "
                               f"{MIN_PATTERNS} to {MAX_PATTERNS} patterns")
    counts: Counter = Counter()
    for w in weights:
        counts.update(natural_patterns(w))
    for p in ALL_PATTERNS:  # a model with few kernels still gets k patterns
        counts.setdefault(p, 0)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return tuple(p for p, _ in ranked[:k])


def _masks(patterns) -> np.ndarray:
    masks = np.zeros((len(patterns), 9), dtype=bool)
    for i, p in enumerate(patterns):
        masks[i, list(p)] = True
    return masks


def project(weight: np.ndarray, patterns) -> tuple[np.ndarray, np.ndarray]:
    """``(pruned weight, pattern id per kernel [O, I])``: each kernel keeps the pattern of
    ``patterns`` that keeps the most of its squared norm (the Euclidean projection onto
    the pattern set); all-zero kernels get id -1."""
    k = _kernels(weight).astype(np.float32)
    masks = _masks(patterns)
    kept = (k * k) @ masks.T.astype(np.float32)  # [O, I, P]
    ids = np.argmax(kept, axis=2)
    out = k * masks[ids]
    ids = np.where(np.any(k != 0, axis=2), ids, -1)
    return out.reshape(weight.shape).astype(weight.dtype), ids.astype(np.int32)


def prune_connectivity(weight: np.ndarray, rate: float) -> np.ndarray:
    """``weight`` with whole kernels removed: of its ``O * I`` kernels keep the
    ``round(O * I / rate)`` of largest L2 norm (at least one per filter, so no output
    channel goes constant)."""
    if rate < 1.0:
        raise CompilationError(f"connectivity pruning rate {rate} < 1: the rate is kernels "
                               "before over kernels after (3.6 keeps 1 in 3.6)")
    k = _kernels(weight)
    o, i, _ = k.shape
    norms = np.sqrt((k.astype(np.float64) ** 2).sum(axis=2))
    keep = max(1, round(o * i / rate))
    flat = np.argsort(-norms, axis=None, kind="stable")[:keep]
    mask = np.zeros(o * i, dtype=bool)
    mask[flat] = True
    mask = mask.reshape(o, i)
    best = np.argmax(norms, axis=1)
    mask[np.arange(o), best] = True
    return (k * mask[:, :, None]).reshape(weight.shape).astype(weight.dtype)


def prune(weight: np.ndarray, patterns, connectivity: float = 1.0) -> np.ndarray:
    """Pattern projection, then connectivity pruning at ``connectivity`` (1: none)."""
    projected, _ = project(weight, patterns)
    return prune_connectivity(projected, connectivity) if connectivity > 1 else projected


@dataclass(frozen=True)
class PatternLayout:
    """The pattern structure :func:`detect` found in one 3x3 weight."""

    patterns: tuple[tuple[int, ...], ...]  # supports, as flat 3x3 positions
    ids: np.ndarray  # [O, I] pattern id per kernel, -1 where the kernel is empty

    @property
    def kernels(self) -> int:
        return int((self.ids >= 0).sum())

    @property
    def connectivity(self) -> float:
        """Kernels of the dense weight over kernels kept."""
        return self.ids.size / max(1, self.kernels)


def detect(weight: np.ndarray, max_patterns: int = MAX_DETECTED_PATTERNS,
           max_density: float = MAX_DETECTED_DENSITY) -> PatternLayout | None:
    """The pattern structure of a 3x3 OIHW ``weight``, or None when it has none worth a
    pattern kernel: more than ``max_density`` of its weights nonzero, more than
    ``2 * max_patterns`` distinct kernel supports or fewer than 4 kernels per support
    (unstructured sparsity, or too few kernels to tell), or more than
    ``max_patterns`` once every support that is a subset of another is read as that
    other (its missing positions as zero weights)."""
    w = np.asarray(weight)
    if w.ndim != 4 or w.shape[2:] != (3, 3) or w.size == 0:
        return None
    nz = _kernels(w) != 0
    if nz.mean() > max_density:
        return None
    codes = (nz * (1 << np.arange(9))).sum(axis=2)  # [O, I] support bitmask
    supports = sorted({int(c) for c in np.unique(codes) if c},
                      key=lambda c: (-c.bit_count(), c))
    if len(supports) > 2 * max_patterns or (codes > 0).sum() < 4 * len(supports):
        return None  # unstructured sparsity: many supports, or few kernels per support
    kept: list[int] = []
    for c in supports:  # widest first: each support joins the first superset kept
        if not any(c & s == c for s in kept):
            kept.append(c)
            if len(kept) > max_patterns:
                return None
    ids = np.full(codes.shape, -1, dtype=np.int32)
    for c in supports:
        ids[codes == c] = next(i for i, s in enumerate(kept) if c & s == c)
    patterns = tuple(tuple(b for b in range(9) if s >> b & 1) for s in kept)
    return PatternLayout(patterns, ids)


__all__ = [
    "ALL_PATTERNS",
    "PatternLayout",
    "detect",
    "natural_patterns",
    "pattern_set",
    "project",
    "prune",
    "prune_connectivity",
]
