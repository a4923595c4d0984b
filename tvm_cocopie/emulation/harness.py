"""A freestanding C program that feeds TVM-built kernels under qemu-hexagon.

The Hexagon SDK's simulator and runtime are proprietary; GCD² (seed 004, ch. 4)
measured on the device. We replace both with a tiny program generated here: no libc,
Linux system calls through ``trap0(#1)`` (number in r6), a static arena holding every
tensor, a bump allocator behind TVM's ``__TVMBackendAllocWorkspace`` /
``__TVMBackendFreeWorkspace`` pointers, and ``DLTensor`` / ``TVMFFIAny`` argument
arrays (from the apache-tvm-ffi headers) passed to each kernel's
``__tvm_ffi_<name>`` entry.

The program reads its inputs from ``inputs.bin`` in its working directory, calls the
kernels in order, and writes its outputs to ``outputs.bin``. Before each call, and
once after the last, it calls ``cocopie_mark``, an empty function whose address the
packet counter uses to split the emulator's execution log per call.

Exit codes: 0 success; 2 the input file is missing or short; 3 a kernel returned an
error (its message is on stderr); 4 the output file could not be written.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Bumped whenever the generated C changes meaning (part of the build cache key).
HARNESS_VERSION = 2

#: Buffers are aligned to this many bytes (two HVX vectors).
ALIGN = 256

#: The name of the marker function the packet counter looks for.
MARK_SYMBOL = "cocopie_mark"

#: The section of the harness's runtime library (memset, division...), counted with
#: the kernel because kernels call it.
LIBC_SECTION = ".text.cocopie_libc"

_DL_CODES = {"i": 0, "u": 1, "f": 2}  # kDLInt, kDLUInt, kDLFloat

#: The Linux system call stub of the generated program (Hexagon: ``trap0(#1)``, number
#: in r6). Another ISA passes its own stub to :func:`generate`; the system call
#: numbers used (openat, close, read, write, exit) are the generic table's, shared by
#: Hexagon and aarch64.
HEXAGON_SYSCALL = r"""static long cp_syscall(long n, long a, long b, long c, long d) {
  register long r0 __asm__("r0") = a;
  register long r1 __asm__("r1") = b;
  register long r2 __asm__("r2") = c;
  register long r3 __asm__("r3") = d;
  register long r6 __asm__("r6") = n;
  __asm__ volatile("trap0(#1)" : "+r"(r0) : "r"(r1), "r"(r2), "r"(r3), "r"(r6) : "memory");
  return r0;
}
"""


@dataclass(frozen=True)
class BufferSpec:
    """One tensor of the program: a name, a static shape and a numpy dtype name."""

    name: str
    shape: tuple
    dtype: str

    @property
    def nbytes(self) -> int:
        """Size of the buffer in bytes."""
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class CallSpec:
    """A kernel call: the kernel's global symbol and the names of its buffer arguments."""

    func: str
    args: tuple


@dataclass(frozen=True)
class ProgramSpec:
    """Everything the harness needs: tensors, which are read/written, calls in order."""

    buffers: tuple  # of BufferSpec
    inputs: tuple  # buffer names, in inputs.bin order
    outputs: tuple  # buffer names, in outputs.bin order
    calls: tuple  # of CallSpec
    workspace_bytes: int = 64 << 20
    #: arena offset of each buffer (a static memory plan, :mod:`tvm_cocopie.hexagon.executor.memplan`), in
    #: ``buffers`` order; ``None`` places every buffer after the previous one.
    offsets: tuple | None = None

    def buffer(self, name: str) -> BufferSpec:
        """The buffer called ``name`` (``KeyError`` if there is none)."""
        for buf in self.buffers:
            if buf.name == name:
                return buf
        raise KeyError(name)


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _dl_dtype(dtype: str) -> str:
    dt = np.dtype(dtype)
    if dt.kind not in _DL_CODES:
        raise ValueError(f"the Hexagon harness cannot pass tensors of dtype {dtype}")
    return f"{{{_DL_CODES[dt.kind]}, {dt.itemsize * 8}, 1}}"


def _c_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


_RUNTIME = r"""
#include <stddef.h>
#include <stdint.h>
#include <tvm/ffi/c_api.h>

#define SYS_OPENAT 56
#define SYS_CLOSE 57
#define SYS_READ 63
#define SYS_WRITE 64
#define SYS_EXIT 93
#define AT_FDCWD (-100)
#define O_RDONLY 0
#define O_WRONLY_CREAT_TRUNC (01 | 0100 | 01000)

@CP_SYSCALL@

static __attribute__((noreturn)) void cp_exit(int code) {
  cp_syscall(SYS_EXIT, code, 0, 0, 0);
  for (;;) {
  }
}

static long cp_strlen(const char* s) {
  long n = 0;
  while (s && s[n]) n++;
  return n;
}

static void cp_puts(int fd, const char* s) { cp_syscall(SYS_WRITE, fd, (long)s, cp_strlen(s), 0); }

static void cp_put_int(int fd, long v) {
  char buf[24];
  int i = 23;
  int neg = v < 0;
  unsigned long u = neg ? -(unsigned long)v : (unsigned long)v;
  buf[i] = 0;
  do {
    buf[--i] = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  if (neg) buf[--i] = '-';
  cp_puts(fd, buf + i);
}

/* The runtime library a kernel may call (LLVM turns loops into memset/memcpy; Hexagon
   has no divide instruction). It lives in its own section, which the packet counter
   counts as part of the kernel, as a device's libc would be. */
#define CP_LIBC __attribute__((section(".text.cocopie_libc")))

CP_LIBC void* memset(void* dst, int c, size_t n) {
  unsigned char* d = (unsigned char*)dst;
  while (n && ((uintptr_t)d & 7)) {
    *d++ = (unsigned char)c;
    n--;
  }
  uint64_t word = (unsigned char)c * 0x0101010101010101ULL;
  for (; n >= 8; n -= 8, d += 8) *(uint64_t*)d = word;
  while (n--) *d++ = (unsigned char)c;
  return dst;
}
CP_LIBC void* memcpy(void* dst, const void* src, size_t n) {
  unsigned char* d = (unsigned char*)dst;
  const unsigned char* s = (const unsigned char*)src;
  if ((((uintptr_t)d ^ (uintptr_t)s) & 7) == 0) {
    while (n && ((uintptr_t)d & 7)) {
      *d++ = *s++;
      n--;
    }
    for (; n >= 8; n -= 8, d += 8, s += 8) *(uint64_t*)d = *(const uint64_t*)s;
  }
  while (n--) *d++ = *s++;
  return dst;
}
CP_LIBC void* memmove(void* dst, const void* src, size_t n) {
  unsigned char* d = (unsigned char*)dst;
  const unsigned char* s = (const unsigned char*)src;
  if (d <= s || d >= s + n) return memcpy(dst, src, n);
  while (n--) d[n] = s[n];
  return dst;
}
CP_LIBC void* __hexagon_memcpy_likely_aligned_min32bytes_mult8bytes(void* d, const void* s, size_t n) {
  return memcpy(d, s, n);
}

/* Integer division helpers the Hexagon backend calls. */
CP_LIBC static unsigned long long cp_udivmod(unsigned long long n, unsigned long long d,
                                             unsigned long long* rem) {
  unsigned long long q = 0, r = 0;
  for (int i = 63; i >= 0; i--) {
    r = (r << 1) | ((n >> i) & 1);
    if (r >= d) {
      r -= d;
      q |= 1ULL << i;
    }
  }
  *rem = r;
  return q;
}
CP_LIBC unsigned long long __hexagon_udivdi3(unsigned long long n, unsigned long long d) {
  unsigned long long r;
  return cp_udivmod(n, d, &r);
}
CP_LIBC unsigned long long __hexagon_umoddi3(unsigned long long n, unsigned long long d) {
  unsigned long long r;
  cp_udivmod(n, d, &r);
  return r;
}
CP_LIBC long long __hexagon_divdi3(long long n, long long d) {
  unsigned long long r;
  unsigned long long q = cp_udivmod(n < 0 ? -(unsigned long long)n : (unsigned long long)n,
                                    d < 0 ? -(unsigned long long)d : (unsigned long long)d, &r);
  return ((n < 0) != (d < 0)) ? -(long long)q : (long long)q;
}
CP_LIBC long long __hexagon_moddi3(long long n, long long d) {
  unsigned long long r;
  cp_udivmod(n < 0 ? -(unsigned long long)n : (unsigned long long)n,
             d < 0 ? -(unsigned long long)d : (unsigned long long)d, &r);
  return n < 0 ? -(long long)r : (long long)r;
}
CP_LIBC unsigned int __hexagon_udivsi3(unsigned int n, unsigned int d) {
  return (unsigned int)__hexagon_udivdi3(n, d);
}
CP_LIBC unsigned int __hexagon_umodsi3(unsigned int n, unsigned int d) {
  return (unsigned int)__hexagon_umoddi3(n, d);
}
CP_LIBC int __hexagon_divsi3(int n, int d) { return (int)__hexagon_divdi3(n, d); }
CP_LIBC int __hexagon_modsi3(int n, int d) { return (int)__hexagon_moddi3(n, d); }

/* Scratch memory for kernels: a bump allocator whose frees pop the newest block. */
static unsigned char cp_workspace[CP_WORKSPACE_BYTES] __attribute__((aligned(CP_ALIGN)));
static size_t cp_ws_top;
static size_t cp_ws_marks[256];
static int cp_ws_depth;

static void* cp_alloc_workspace(int device_type, int device_id, uint64_t nbytes, int code, int bits) {
  (void)device_type; (void)device_id; (void)code; (void)bits;
  size_t start = (cp_ws_top + CP_ALIGN - 1) / CP_ALIGN * CP_ALIGN;
  if (start + nbytes > CP_WORKSPACE_BYTES || cp_ws_depth >= 256) {
    cp_puts(2, "cocopie harness: workspace exhausted asking for ");
    cp_put_int(2, (long)nbytes);
    cp_puts(2, " bytes\n");
    return 0;
  }
  cp_ws_marks[cp_ws_depth++] = cp_ws_top;
  cp_ws_top = start + nbytes;
  return cp_workspace + start;
}

static int cp_free_workspace(int device_type, int device_id, void* ptr) {
  (void)device_type; (void)device_id; (void)ptr;
  if (cp_ws_depth > 0) cp_ws_top = cp_ws_marks[--cp_ws_depth];
  return 0;
}

void* (*__TVMBackendAllocWorkspace)(int, int, uint64_t, int, int) = cp_alloc_workspace;
int (*__TVMBackendFreeWorkspace)(int, int, void*) = cp_free_workspace;

/* TVM's error path: report on stderr; the caller sees the non-zero return code. */
void TVMFFIErrorSetRaisedFromCStrParts(const char* kind, const char** parts, int32_t num_parts) {
  cp_puts(2, "cocopie harness: kernel error: ");
  cp_puts(2, kind);
  cp_puts(2, ": ");
  for (int i = 0; i < num_parts; i++) {
    if (parts[i]) cp_puts(2, parts[i]);
  }
  cp_puts(2, "\n");
}
void TVMFFIErrorSetRaisedFromCStr(const char* kind, const char* message) {
  const char* parts[1] = {message};
  TVMFFIErrorSetRaisedFromCStrParts(kind, parts, 1);
}

__attribute__((noinline, used)) void cocopie_mark(int index) { __asm__ volatile("" ::"r"(index) : "memory"); }

static int cp_transfer(const char* path, int writing, unsigned char** bufs, const long* sizes, int n) {
  int fd = (int)cp_syscall(SYS_OPENAT, AT_FDCWD, (long)path, writing ? O_WRONLY_CREAT_TRUNC : O_RDONLY, 0644);
  if (fd < 0) return -1;
  for (int i = 0; i < n; i++) {
    long done = 0;
    while (done < sizes[i]) {
      long step = sizes[i] - done;
      if (step > (1 << 20)) step = 1 << 20;
      long got = cp_syscall(writing ? SYS_WRITE : SYS_READ, fd, (long)(bufs[i] + done), step, 0);
      if (got <= 0) {
        cp_syscall(SYS_CLOSE, fd, 0, 0, 0);
        return -1;
      }
      done += got;
    }
  }
  cp_syscall(SYS_CLOSE, fd, 0, 0, 0);
  return 0;
}

static void cp_set_args(TVMFFIAny* args, DLTensor** tensors, int n) {
  for (int i = 0; i < n; i++) {
    args[i].type_index = kTVMFFIDLTensorPtr;
    args[i].zero_padding = 0;
    args[i].v_int64 = 0;
    args[i].v_ptr = tensors[i];
  }
}

static void cp_check(int rc, const char* name) {
  if (rc != 0) {
    cp_puts(2, "cocopie harness: kernel ");
    cp_puts(2, name);
    cp_puts(2, " returned ");
    cp_put_int(2, rc);
    cp_puts(2, "\n");
    cp_exit(3);
  }
}
"""


def generate(spec: ProgramSpec, syscall: str | None = None) -> str:
    """The C source of the harness for ``spec``.

    ``syscall``: C source of ``cp_syscall(n, a, b, c, d)`` for another ISA (default:
    :data:`HEXAGON_SYSCALL`; the Hexagon program text is unchanged).
    """
    runtime = _RUNTIME.replace("@CP_SYSCALL@\n", HEXAGON_SYSCALL if syscall is None else syscall)
    index = {buf.name: i for i, buf in enumerate(spec.buffers)}
    offsets, top = [], 0
    for buf in spec.buffers:
        offsets.append(top)
        top += _align(max(buf.nbytes, 1))
    if spec.offsets is not None:
        offsets = [int(o) for o in spec.offsets]
        if any(o % ALIGN for o in offsets):
            raise ValueError(f"arena offsets must be multiples of {ALIGN}")
        top = max(o + _align(max(b.nbytes, 1)) for o, b in zip(offsets, spec.buffers))
    lines = [
        f"/* Generated by tvm_cocopie.emulation.harness v{HARNESS_VERSION}; do not edit. */",
        f"#define CP_ALIGN {ALIGN}",
        f"#define CP_WORKSPACE_BYTES {int(spec.workspace_bytes)}",
        runtime,
        f"static unsigned char cp_arena[{max(top, ALIGN)}] __attribute__((aligned(CP_ALIGN)));",
    ]
    for i, buf in enumerate(spec.buffers):
        dims = ", ".join(str(int(d)) for d in buf.shape) or "1"
        lines.append(f"static int64_t cp_shape_{i}[] = {{{dims}}};  /* {buf.name} */")
        lines.append(
            f"static DLTensor cp_tensor_{i} = {{cp_arena + {offsets[i]}, {{kDLCPU, 0}}, "
            f"{len(buf.shape)}, {_dl_dtype(buf.dtype)}, cp_shape_{i}, NULL, 0}};"
        )
    for func in sorted({call.func for call in spec.calls}):
        lines.append(f"extern int __tvm_ffi_{func}(void*, const TVMFFIAny*, int32_t, TVMFFIAny*);")
    lines += ["", "static int cp_main(void) {"]
    for name, group in (("in", spec.inputs), ("out", spec.outputs)):
        bufs = ", ".join(f"cp_arena + {offsets[index[b]]}" for b in group) or "0"
        sizes = ", ".join(str(spec.buffer(b).nbytes) for b in group) or "0"
        lines.append(f"  unsigned char* {name}_bufs[] = {{{bufs}}};")
        lines.append(f"  long {name}_sizes[] = {{{sizes}}};")
    lines += [
        f'  if (cp_transfer("inputs.bin", 0, in_bufs, in_sizes, {len(spec.inputs)}) != 0) {{',
        '    cp_puts(2, "cocopie harness: cannot read inputs.bin\\n");',
        "    return 2;",
        "  }",
        "  TVMFFIAny result;",
    ]
    for c, call in enumerate(spec.calls):
        tensors = ", ".join(f"&cp_tensor_{index[a]}" for a in call.args)
        lines += [
            "  {",
            f"    DLTensor* tensors[] = {{{tensors}}};",
            f"    TVMFFIAny args[{len(call.args)}];",
            f"    cp_set_args(args, tensors, {len(call.args)});",
            "    result.type_index = kTVMFFINone;",
            f"    cocopie_mark({c});",
            f"    int rc = __tvm_ffi_{call.func}(0, args, {len(call.args)}, &result);",
            f"    cp_check(rc, {_c_string(call.func)});",
            "  }",
        ]
    lines += [
        f"  cocopie_mark({len(spec.calls)});",
        f'  if (cp_transfer("outputs.bin", 1, out_bufs, out_sizes, {len(spec.outputs)}) != 0) {{',
        '    cp_puts(2, "cocopie harness: cannot write outputs.bin\\n");',
        "    return 4;",
        "  }",
        "  return 0;",
        "}",
        "",
        "__attribute__((noreturn)) void _start(void) { cp_exit(cp_main()); }",
        "",
    ]
    return "\n".join(lines)
