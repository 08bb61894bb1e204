# toolchain-esp32c3-qemu.cmake — the ESP-IDF mock's toolchain: Debian's
# riscv64-unknown-elf-gcc for rv32imc/ilp32 (the ESP32-C3's ISA), picolibc
# with semihosting, the memory map of QEMU's `virt` board as in
# tools/edge/targets.sh. Not the ESP32-C3's memory map or flash cache.
set(CMAKE_SYSTEM_NAME Generic)
set(CMAKE_SYSTEM_PROCESSOR riscv32)
set(CMAKE_C_COMPILER riscv64-unknown-elf-gcc)
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)
set(CMAKE_C_FLAGS_INIT "-march=rv32imc -mabi=ilp32 --specs=picolibc.specs")
set(CMAKE_EXE_LINKER_FLAGS_INIT
    "--crt0=semihost --oslib=semihost -Wl,--defsym=__flash=0x80000000 -Wl,--defsym=__flash_size=0x800000 -Wl,--defsym=__ram=0x80800000 -Wl,--defsym=__ram_size=0x400000")
