# cmake/toolchains/aarch64-linux-gnu.cmake — cross-compile attnflow for
# aarch64 Linux with Debian's g++-aarch64-linux-gnu, against the :arm64
# multiarch -dev packages (libhwy-dev:arm64, libgtest-dev:arm64; installed by
# tools/ci/aarch64.sh). Used as -DCMAKE_TOOLCHAIN_FILE=... (docs/aarch64.md).
#
# Invariants: libraries and packages are only taken from the aarch64 multiarch
# directories (/usr/lib/aarch64-linux-gnu, /usr/aarch64-linux-gnu) or from
# architecture-independent ones (header-only nlohmann_json), never from the
# host's x86_64 directories; programs (build tools) come from the host.
# Cross-built executables run through CMAKE_CROSSCOMPILING_EMULATOR
# (qemu-aarch64 from qemu-user), so try_run, gtest_discover_tests and ctest
# also work on x86 hosts. The emulator takes the dynamic loader AND libc from
# the multiarch libc6:arm64 (/lib/ld-linux-aarch64.so.1, pulled in by
# libhwy1:arm64), never "-L /usr/aarch64-linux-gnu": with :arm64 libraries
# installed, that loader (libc6-arm64-cross) finds the multiarch libc.so.6
# through the host's ld.so.cache, and the mixed pair hangs in pthread_create.
# This file lives in a subdirectory: CMakeLists.txt includes every
# cmake/*.cmake at top level as a feature file.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# /usr for the multiarch -dev packages (lib/aarch64-linux-gnu) and the
# architecture-independent headers; /usr/aarch64-linux-gnu for the cross libc.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /usr)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# -cpu max: every feature qemu emulates (NEON, SVE, SVE2, ...), so that the
# runtime dispatch sees the widest target set. ATTNFLOW_QEMU_CPU overrides it.
if(DEFINED ENV{ATTNFLOW_QEMU_CPU})
  set(_af_qemu_cpu "$ENV{ATTNFLOW_QEMU_CPU}")
else()
  set(_af_qemu_cpu max)
endif()
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -cpu ${_af_qemu_cpu})
