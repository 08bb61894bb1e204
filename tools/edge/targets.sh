# targets.sh — sourced by tools/edge/*.sh: compiler, flags and QEMU command of
# each emulated target (recipes checked in /work/shared/edge/README.md and
# docs/edge.md). Invariant: every target is built -O2, no fast-math,
# picolibc with semihosting crt0 (return from main = QEMU exit status).
EDGE_TARGETS=(rv32imc m4f m33)

edge_cc() {  # target -> compiler
  case $1 in
    rv32imc) echo riscv64-unknown-elf-gcc ;;
    *) echo arm-none-eabi-gcc ;;
  esac
}
edge_prefix() {
  case $1 in
    rv32imc) echo riscv64-unknown-elf- ;;
    *) echo arm-none-eabi- ;;
  esac
}
edge_cflags() {  # target -> code generation flags
  case $1 in
    rv32imc) echo "-march=rv32imc -mabi=ilp32" ;;
    m4f) echo "-mcpu=cortex-m4 -mthumb -mfloat-abi=hard -mfpu=fpv4-sp-d16" ;;
    m33) echo "-mcpu=cortex-m33 -mthumb -mfloat-abi=hard -mfpu=fpv5-sp-d16" ;;
  esac
}
edge_ldflags() {  # target -> memory map + picolibc semihosting
  local base="--specs=picolibc.specs --crt0=semihost --oslib=semihost"
  case $1 in
    rv32imc) echo "$base -Wl,--defsym=__flash=0x80000000 -Wl,--defsym=__flash_size=0x800000 -Wl,--defsym=__ram=0x80800000 -Wl,--defsym=__ram_size=0x400000" ;;
    m4f) echo "$base -Wl,--defsym=__flash=0x00000000 -Wl,--defsym=__flash_size=0x400000 -Wl,--defsym=__ram=0x20000000 -Wl,--defsym=__ram_size=0x400000" ;;
    m33) echo "$base -Wl,--defsym=__flash=0x10000000 -Wl,--defsym=__flash_size=0x400000 -Wl,--defsym=__ram=0x38000000 -Wl,--defsym=__ram_size=0x200000" ;;
  esac
}
edge_qemu() {  # target elf -> runs it (exit status = main's return)
  case $1 in
    rv32imc) timeout 300 qemu-system-riscv32 -M virt -nographic -bios none -kernel "$2" \
               -semihosting-config enable=on,target=native -icount shift=0 ;;
    m4f) timeout 300 qemu-system-arm -M mps2-an386 -nographic \
               -semihosting-config enable=on,target=native -icount shift=0 -kernel "$2" ;;
    m33) timeout 300 qemu-system-arm -M mps2-an505 -nographic \
               -semihosting-config enable=on,target=native -icount shift=0 -kernel "$2" ;;
  esac
}

# The micro library's sources (absolute paths), from THE list micro/sources.txt.
micro_sources() {  # root
  local l
  while IFS= read -r l; do
    l=${l%%#*}
    l=${l//[[:space:]]/}
    [[ -n $l ]] && printf '%s\n' "$1/micro/$l"
  done < "$1/micro/sources.txt"
}
