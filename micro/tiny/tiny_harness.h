/* counter.h — retired-instruction counter for the tiny decoder programs
 * (docs/edge.md "Numbers" method): rv32 reads minstret (exact under QEMU
 * -icount shift=0); Cortex-M reads SysTick, whose ticks-per-instruction
 * factor is calibrated by counter_init() with a loop of exactly 800000
 * instructions; elsewhere (host) it counts nothing. instr(c0, c1) converts two
 * readings taken less than one SysTick wrap apart. */
#ifndef ATTNFLOW_MICRO_TINY_COUNTER_H_
#define ATTNFLOW_MICRO_TINY_COUNTER_H_
#include <stdint.h>

#if defined(__riscv)
static uint32_t counter(void) {
  uint32_t r;
  __asm__ volatile("rdinstret %0" : "=r"(r));
  return r;
}
static uint64_t instr(uint32_t c0, uint32_t c1) { return c1 - c0; }
static void counter_init(void) {}
#elif defined(__ARM_ARCH)
#define SYST_CSR (*(volatile uint32_t*)0xE000E010)
#define SYST_RVR (*(volatile uint32_t*)0xE000E014)
#define SYST_CVR (*(volatile uint32_t*)0xE000E018)
static uint32_t cal_ticks = 20000;
static uint32_t counter(void) { return SYST_CVR; }
static uint64_t instr(uint32_t c0, uint32_t c1) {
  return (uint64_t)((c0 - c1) & 0xFFFFFFu) * 800000u / cal_ticks;
}
static void counter_init(void) {
  uint32_t it = 100000, c0;
  SYST_RVR = 0xFFFFFF;
  SYST_CVR = 0;
  SYST_CSR = 5;
  c0 = counter();
  __asm__ volatile("1: nop; nop; nop; nop; nop; nop; subs %0, %0, #1; bne 1b" : "+r"(it) : : "cc");
  cal_ticks = (c0 - counter()) & 0xFFFFFFu;
}
#else
static uint32_t counter(void) { return 0; }
static uint64_t instr(uint32_t c0, uint32_t c1) { return (uint64_t)(c1 - c0); }
static void counter_init(void) {}
#endif

#endif
