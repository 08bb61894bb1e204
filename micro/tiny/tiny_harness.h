/* tiny_harness.h — what the tiny decoder programs (tiny_*main.c) share:
 * the greedy generation loop (tiny_generate: feed the prompt, pick each
 * generated token from the last step's logits, time every decode step) and
 * the retired-instruction counter (docs/edge.md "Numbers" method): rv32 reads
 * minstret (exact under QEMU -icount shift=0); Cortex-M reads SysTick, whose
 * ticks-per-instruction factor is calibrated by counter_init() with a loop of
 * exactly 800000 instructions; elsewhere (host) it counts nothing.
 * instr(c0, c1) converts two readings taken less than one SysTick wrap
 * apart. Included once per program; no heap. */
#ifndef ATTNFLOW_MICRO_TINY_HARNESS_H_
#define ATTNFLOW_MICRO_TINY_HARNESS_H_
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>

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


/* What a run checks each generated token against (one run per program):
 * f32 programs PyTorch's tokens, int8 programs the NumPy model's int32
 * logits bit for bit and its tokens. */
/* The int8 programs' tied head: logits[i] = emb[i, :] . h (int32, exact). */
static inline void tiny_tied_head_s8(int32_t* logits, const int8_t* emb, const int8_t* h, int V,
                                     int D) {
  int i, j;
  for (i = 0; i < V; ++i) {
    int32_t acc = 0;
    for (j = 0; j < D; ++j) acc += (int32_t)emb[(size_t)i * D + j] * h[j];
    logits[i] = acc;
  }
}

/* What a run checks each generated token against: f32 programs PyTorch's
 * tokens (pick tiny_pick_f32), int8 programs the NumPy model's int32 logits
 * bit for bit and its tokens (tiny_pick_s32, which keeps float out of them). */
typedef struct tiny_check {
  const char* name;
  /* Generated token i from the last step's logits (the first largest,
   * torch.argmax's rule on ties), checked against the reference. */
  int (*pick)(const struct tiny_check* ref, int i);
  int vocab_size;
  const float* logits_f32;        /* f32 programs */
  const int32_t* logits_s32;      /* int8 programs */
  const int* expected_ids;
  const int32_t* expected_logits; /* int8: [gen, vocab_size] */
  const char* vocab;              /* f32: the characters of the tokens */
  char* text;                     /* f32: gen + 1 chars, the generated text */
} tiny_check;
static int tiny_bad, tiny_bad_tok;

static inline int tiny_pick_f32(const tiny_check* ref, int i) {
  const float* lg = ref->logits_f32;
  const int want = ref->expected_ids[i];
  int j, tok = 0;
  for (j = 1; j < ref->vocab_size; ++j)
    if (lg[j] > lg[tok]) tok = j;
  if (tok != want) {
    if (!tiny_bad)
      printf("%s: first mismatch at generated token %d: got %d '%c', expected %d '%c'\n", ref->name,
             i, tok, ref->vocab[tok], want, ref->vocab[want]);
    ++tiny_bad;
  }
  ref->text[i] = ref->vocab[tok];
  return tok;
}

static inline int tiny_pick_s32(const tiny_check* ref, int i) {
  const int32_t* lg = ref->logits_s32;
  const int32_t* e = ref->expected_logits + (size_t)i * ref->vocab_size;
  int j, tok = 0;
  for (j = 0; j < ref->vocab_size; ++j)
    if (lg[j] != e[j]) {
      if (!tiny_bad)
        printf("%s: first logit mismatch at step %d, token %d: got %ld, NumPy %ld\n", ref->name, i,
               j, (long)lg[j], (long)e[j]);
      ++tiny_bad;
      break;
    }
  for (j = 1; j < ref->vocab_size; ++j)
    if (lg[j] > lg[tok]) tok = j;
  if (tok != ref->expected_ids[i]) ++tiny_bad_tok;
  return tok;
}

/* Feeds prompt[0..prompt_len) through step(token, pos) (0: ok), then
 * generates `gen` tokens greedily (ref->pick checks each);
 * every token but the last is stepped and timed. Prints the verdict and the
 * mean retired instructions per decode step. Returns the program's exit
 * code: 101 (a prompt step failed), 102 (a decode step failed), else the
 * mismatches (at most 99; 0 = identical). */
static int tiny_generate(int (*step)(int, int), const int* prompt, int prompt_len, int gen,
                         const tiny_check* ref) {
  int i, pos = 0, bad;
  uint64_t total = 0;
  counter_init();
  for (i = 0; i < prompt_len; ++i)
    if (step(prompt[i], pos++)) return 101;
  for (i = 0; i < gen; ++i) {
    const int tok = ref->pick(ref, i);
    if (i + 1 < gen) {
      /* Counted per step; the 24-bit SysTick cannot wrap within one. */
      const uint32_t c0 = counter();
      if (step(tok, pos++)) return 102;
      total += instr(c0, counter());
    }
  }
  if (ref->text != NULL) {
    ref->text[gen] = 0;
    printf("%s generated: \"%s\"\n", ref->name, ref->text);
    printf("%s: %d/%d tokens identical to PyTorch\n", ref->name, gen - tiny_bad, gen);
  } else {
    printf("%s: %d/%d steps with logits bit-identical to the NumPy model, %d/%d tokens equal\n",
           ref->name, gen - tiny_bad, gen, gen - tiny_bad_tok, gen);
  }
  printf("%s: %lu instructions per generated token (mean of %d decode steps)\n", ref->name,
         (unsigned long)(total / (uint64_t)(gen - 1)), gen - 1);
  bad = tiny_bad + tiny_bad_tok;
  return bad > 99 ? 99 : bad;
}

#endif
