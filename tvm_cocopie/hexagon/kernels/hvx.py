"""HVX instructions as TIR expressions: the vocabulary of GCD²'s int8 kernels.

GCD² (seed 004, §4.3, Fig. 4.1) builds its kernels from three multiply instructions,
each wanting its own data layout:

- ``vmpy``  ``Vdd.h = vmpy(Vu.ub, Rt.b)``: 128 bytes times one weight (1-column layout);
- ``vmpa``  ``Vdd.h = vmpa(Vuu.ub, Rt.b)``: two vectors, pairs of products summed
  (2-column layout);
- ``vrmpy`` ``Vd.w += vrmpy(Vu.ub, Rt.b)``: four products summed into 32 bits
  (4-column layout).

Each helper returns a ``tirx.call_llvm_pure_intrin`` of the LLVM intrinsic
``llvm.hexagon.V6.<name>.128B``. A 128-byte HVX vector is ``int32x32`` in TIR and a
vector pair ``int32x64`` (the intrinsics' LLVM types); :func:`as_vec` and
:func:`as_bytes` reinterpret byte vectors. The lane semantics quoted in each
docstring were checked bit for bit under ``qemu-hexagon`` (``tests/test_hexagon_*``).
"""

from __future__ import annotations

from tvm import tirx

VEC = "int32x32"
PAIR = "int32x64"


def _intrin(dtype: str, name: str, *args):
    return tirx.call_llvm_pure_intrin(dtype, f"llvm.hexagon.V6.{name}.128B", *args)


def as_vec(byte_vector):
    """Reinterpret a ``uint8x128``/``int8x128`` value as an HVX vector (``int32x32``)."""
    return tirx.reinterpret(VEC, byte_vector)


def as_bytes(vec, dtype: str = "uint8x128"):
    """Reinterpret an HVX vector as 128 bytes."""
    return tirx.reinterpret(dtype, vec)


def lo(pair):
    """The low vector of a pair (``Vdd.v[0]``)."""
    return _intrin(VEC, "lo", pair)


def hi(pair):
    """The high vector of a pair (``Vdd.v[1]``)."""
    return _intrin(VEC, "hi", pair)


def combine(high, low):
    """``Vdd = vcombine(Vu, Vv)``: a pair whose ``v[0]`` is ``low``, ``v[1]`` is ``high``."""
    return _intrin(PAIR, "vcombine", high, low)


def vmpybus(vu, rt):
    """``Vdd.h = vmpy(Vu.ub, Rt.b)``.

    ``v[0].h[i] = Vu.ub[2i] * Rt.b[2i % 4]``, ``v[1].h[i] = Vu.ub[2i+1] * Rt.b[(2i+1) % 4]``:
    even bytes to the low vector, odd bytes to the high one; each product fits int16.
    """
    return _intrin(PAIR, "vmpybus", vu, rt)


def vmpabus(vuu, rt):
    """``Vdd.h = vmpa(Vuu.ub, Rt.b)``.

    ``v[0].h[i] = Vuu.v[0].ub[2i] * Rt.b[0] + Vuu.v[1].ub[2i] * Rt.b[1]`` and
    ``v[1].h[i] = Vuu.v[0].ub[2i+1] * Rt.b[2] + Vuu.v[1].ub[2i+1] * Rt.b[3]``.
    The sum of two products wraps modulo 2**16 when it leaves int16.
    """
    return _intrin(PAIR, "vmpabus", vuu, rt)


def vrmpybus_acc(vx, vu, rt):
    """``Vx.w += vrmpy(Vu.ub, Rt.b)``: ``Vx.w[i] += sum_j Vu.ub[4i+j] * Rt.b[j]`` (exact)."""
    return _intrin(VEC, "vrmpybus.acc", vx, vu, rt)


def vaddhw_acc(vxx, vu, vv):
    """``Vxx.w += vadd(Vu.h, Vv.h)``: widen and add.

    ``v[0].w[i] += Vu.h[2i] + Vv.h[2i]``, ``v[1].w[i] += Vu.h[2i+1] + Vv.h[2i+1]``.
    """
    return _intrin(PAIR, "vaddhw.acc", vxx, vu, vv)


def vsatwh(vu, vv):
    """``Vd.h = vsat(Vu.w, Vv.w)``: ``h[2i] = sat16(Vv.w[i])``, ``h[2i+1] = sat16(Vu.w[i])``."""
    return _intrin(VEC, "vsatwh", vu, vv)


def vsathub(vu, vv):
    """``Vd.ub = vsat(Vu.h, Vv.h)``: ``ub[2i] = usat8(Vv.h[i])``, ``ub[2i+1] = usat8(Vu.h[i])``."""
    return _intrin(VEC, "vsathub", vu, vv)


def vasrwh_rnd_sat(vu, vv, shift: int):
    """``Vd.h = vasr(Vu.w, Vv.w, Rt):rnd:sat`` for ``Rt`` in [1, 15]:
    ``h[2i] = sat16((Vv.w[i] + 2**(Rt-1)) >> Rt)``, ``h[2i+1]`` the same of ``Vu.w[i]``
    (the shift amount is ``Rt & 15``, so larger shifts need a plain :func:`vasrw` first)."""
    if not 1 <= shift <= 15:
        raise ValueError(f"vasr(...):rnd:sat shifts by 1 to 15, not {shift}")
    return _intrin(VEC, "vasrwhrndsat", vu, vv, tirx.const(shift, "int32"))


def vaddhsat(vu, vv):
    """``Vd.h = vadd(Vu.h, Vv.h):sat``."""
    return _intrin(VEC, "vaddhsat", vu, vv)


def vmpyewuh(vu, vv):
    """``Vd.w = vmpye(Vu.w, Vv.uh)``: ``(Vu.w[i] * Vv.w[i].uh[0]) >> 16``, exact."""
    return _intrin(VEC, "vmpyewuh", vu, vv)


def mul_shr16(vu, m):
    """``floor(Vu.w * m / 2**16)`` for ``m`` in [0, 2**16): one ``vmpye``. ``m`` is a
    constant, an int32 scalar value (splat: one channel's multiplier) or an ``int32x32``
    vector (a multiplier per lane)."""
    if isinstance(m, int):
        if not 0 <= m < 2**16:
            raise ValueError(f"{m} does not fit an unsigned halfword")
        m = tirx.const(m, "int32")
    return vmpyewuh(vu, m if m.ty.dtype.lanes == 32 else tirx.Broadcast(m, 32))


def saturate_interleave4(y0, y1, y2, y3):
    """Four ``int32x32`` vectors to one ``uint8x128``: ``out[4i+t] = clip(y_t[i], 0, 255)``.

    Three instructions (two ``vsat`` to halfwords, one to bytes); the clip is free.
    """
    low = vsatwh(y2, y0)  # h[2i] = y0[i], h[2i+1] = y2[i]
    high = vsatwh(y3, y1)  # h[2i] = y1[i], h[2i+1] = y3[i]
    return as_bytes(vsathub(high, low))


def vzb(vu):
    """``Vdd.uh = vzxt(Vu.ub)``: zero-extend bytes to halfwords (even bytes to ``v[0]``,
    odd bytes to ``v[1]``, as :func:`vmpybus`)."""
    return _intrin(PAIR, "vzb", vu)


def vsubh(vu, vv):
    """``Vd.h = vsub(Vu.h, Vv.h)`` (wrapping)."""
    return _intrin(VEC, "vsubh", vu, vv)


def vmpyhv(vu, vv):
    """``Vdd.w = vmpy(Vu.h, Vv.h)``: ``v[0].w[i] = Vu.h[2i] * Vv.h[2i]``,
    ``v[1].w[i] = Vu.h[2i+1] * Vv.h[2i+1]`` (exact)."""
    return _intrin(PAIR, "vmpyhv", vu, vv)


def vlut32(vu, vv, rt):
    """``Vd.b = vlut32(Vu.b, Vv.b, Rt)``: byte ``i`` is entry ``Vu.ub[i] % 32`` of the
    32-entry table in ``Vv``'s halfwords where ``Vu.ub[i] >> 5 == Rt & 7``, else 0."""
    return _intrin(VEC, "vlutvvb", vu, vv, rt)


def vlut32_or(vx, vu, vv, rt):
    """``Vx.b |= vlut32(Vu.b, Vv.b, Rt)`` (see :func:`vlut32`)."""
    return _intrin(VEC, "vlutvvb.oracc", vx, vu, vv, rt)


def vrmpybusv_acc(vx, vu, vv):
    """``Vx.w += vrmpy(Vu.ub, Vv.b)``: ``Vx.w[i] += sum_j Vu.ub[4i+j] * Vv.b[4i+j]`` (exact)."""
    return _intrin(VEC, "vrmpybusv.acc", vx, vu, vv)


def vmpyhv_acc(vxx, vu, vv):
    """``Vxx.w += vmpy(Vu.h, Vv.h)`` (lanes as :func:`vmpyhv`)."""
    return _intrin(PAIR, "vmpyhv.acc", vxx, vu, vv)


def vaddw(vu, vv):
    """``Vd.w = vadd(Vu.w, Vv.w)`` (wrapping)."""
    return _intrin(VEC, "vaddw", vu, vv)


def vasrw(vu, shift: int):
    """``Vd.w = vasr(Vu.w, Rt)``: arithmetic shift right of each word."""
    return _intrin(VEC, "vasrw", vu, tirx.const(shift, "int32"))


def vrmpybus(vu, rt):
    """``Vd.w = vrmpy(Vu.ub, Rt.b)``: ``Vd.w[i] = sum_j Vu.ub[4i+j] * Rt.b[j]`` (exact)."""
    return _intrin(VEC, "vrmpybus", vu, rt)


def vrmpyubv_acc(vx, vu, vv):
    """``Vx.uw += vrmpy(Vu.ub, Vv.ub)``: ``Vx.w[i] += sum_j Vu.ub[4i+j] * Vv.ub[4i+j]``
    (exact; with ``Vu = Vv`` a sum of squares)."""
    return _intrin(VEC, "vrmpyubv.acc", vx, vu, vv)


def vmaxub(vu, vv):
    """``Vd.ub = vmax(Vu.ub, Vv.ub)``."""
    return _intrin(VEC, "vmaxub", vu, vv)


def vror(vu, nbytes):
    """``Vd = vror(Vu, Rt)``: byte ``i`` is ``Vu.ub[(i + nbytes) % 128]``."""
    return _intrin(VEC, "vror", vu, tirx.const(nbytes, "int32"))


def xor_swap(vu, k: int):
    """Bytes ``i`` and ``i ^ k`` exchanged (``k`` a power of two below 128): one ``vdelta``
    whose control bytes are all ``k`` (its network swaps at the distances set in byte
    ``i``'s control). ``k`` a multiple of 4 exchanges whole words."""
    ctrl = as_vec(tirx.Broadcast(tirx.const(k, "uint8"), 128))
    return _intrin(VEC, "vdelta", vu, ctrl)


def vlsrw(vu, shift: int):
    """``Vd.uw = vlsr(Vu.uw, Rt)``: logical shift right of each word."""
    return _intrin(VEC, "vlsrw", vu, tirx.const(shift, "int32"))


def vshuff(vu, vv, size: int):
    """``Vdd = vshuff(Vu, Vv, Rt)`` with ``Rt = -size``: the ``size``-byte elements of ``Vu``
    and ``Vv`` interleaved over the pair (``vshuff(V, V, s)``: each element twice, in
    order)."""
    return _intrin(PAIR, "vshuffvdd", vu, vv, tirx.const(-size, "int32"))
