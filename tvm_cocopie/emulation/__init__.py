"""Running TVM-built kernels under QEMU user-mode emulation: Hexagon and aarch64 alike.

- :mod:`.toolchain`: the Debian tools (``qemu-*-static``, ``clang-14``, ``ld.lld-14``);
- :mod:`.harness`: the freestanding C program that feeds the kernels;
- :mod:`.program`: a program of kernel calls, its buffers and input/output bytes;
- :mod:`.packets`: packet counts from QEMU's execution log;
- :mod:`.hexagon`: build and run on Hexagon V66 (cached builds, packet counting);
- :mod:`.aarch64`: build and run on aarch64 (NEON).
"""
