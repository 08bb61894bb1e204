/* af_dump.c — writers of the AFDUMP text format (docs/device-dump.md): a
 * port's stages as plain text lines over whatever byte sink the caller has
 * (a UART, semihosting, a buffer), checked on the host by
 * `attnflow verify --compare LOG CASE`.
 *
 * Invariants: no heap, no printf, no static mutable state; every line is
 * built in a stack buffer of AF_DUMP_LINE bytes and handed to the caller's
 * write function whole; f32 values are written as the 8 hex digits of their
 * bit pattern (lossless, no float formatting); each part ends with the
 * FNV-1a hash of its values' little-endian bytes. */
#include <string.h>

#include "af_internal.h"

#define AF_DUMP_LINE 200
#define AF_DUMP_PER_LINE 8
#define AF_DUMP_NAME_MAX 63

typedef struct {
  char buf[AF_DUMP_LINE];
  size_t n;
} af_line;

static void af_put(af_line* l, const char* s) {
  while (*s && l->n < AF_DUMP_LINE - 1) l->buf[l->n++] = *s++;
}

static void af_put_u32(af_line* l, uint32_t v) {
  char t[11];
  int i = 10;
  t[i] = 0;
  do {
    t[--i] = (char)('0' + v % 10u);
    v /= 10u;
  } while (v);
  af_put(l, t + i);
}

static void af_put_i32(af_line* l, int32_t v) {
  if (v < 0) {
    af_put(l, "-");
    af_put_u32(l, (uint32_t)0 - (uint32_t)v);
  } else {
    af_put_u32(l, (uint32_t)v);
  }
}

static void af_put_hex8(af_line* l, uint32_t v) {
  static const char kHex[] = "0123456789abcdef";
  char t[9];
  int i;
  for (i = 7; i >= 0; --i, v >>= 4) t[i] = kHex[v & 15u];
  t[8] = 0;
  af_put(l, t);
}

static void af_emit(af_write_fn w, void* ctx, af_line* l) {
  l->buf[l->n++] = '\n';
  w(ctx, l->buf, l->n);
  l->n = 0;
}

/* A C identifier of 1..AF_DUMP_NAME_MAX chars (so it cannot break a line). */
static int af_name_ok(const char* s) {
  size_t n = 0;
  if (s == NULL || !*s || (*s >= '0' && *s <= '9')) return 0;
  for (; *s; ++s, ++n) {
    const char c = *s;
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          c == '_' || c == '-'))
      return 0;
  }
  return n <= AF_DUMP_NAME_MAX;
}

/* A stage name: a C identifier, or identifiers and numbers joined by '.'
 * ("layer.3.q", "decode.0.weights"), 1..AF_DUMP_NAME_MAX chars. */
static int af_stage_ok(const char* s) {
  size_t n = 0;
  char prev = '.';
  if (s == NULL || !*s || (*s >= '0' && *s <= '9')) return 0;
  for (; *s; ++s, ++n) {
    const char c = *s;
    if (c == '.' && prev == '.') return 0;
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          c == '_' || c == '.'))
      return 0;
    prev = c;
  }
  return prev != '.' && n <= AF_DUMP_NAME_MAX;
}

static uint32_t af_fnv(uint32_t h, uint8_t byte) { return (h ^ byte) * 16777619u; }

/* Appends each string of a NULL-terminated list. */
static void af_put_all(af_line* l, const char* const* parts) {
  for (; *parts != NULL; ++parts) af_put(l, *parts);
}

/* "HEAD STAGE OFFSET COUNT", the start of a part's and of its end's line. */
static void af_put_range(af_line* l, const char* head, const char* stage, uint32_t offset,
                         uint32_t count) {
  const char* const parts[] = {head, stage, " ", NULL};
  af_put_all(l, parts);
  af_put_u32(l, offset);
  af_put(l, " ");
  af_put_u32(l, count);
}

af_status af_dump_begin(af_write_fn write, void* ctx, const char* case_name, const char* kind,
                        const char* impl) {
  af_line l;
  if (write == NULL || case_name == NULL || kind == NULL || impl == NULL) return AF_ERR_NULL;
  if (!af_name_ok(case_name) || !af_name_ok(kind) || !af_name_ok(impl)) return AF_ERR_PARAM;
  {
    const char* const parts[] = {"AFDUMP attnflow-dump/1 case=", case_name, " kind=", kind,
                                 " impl=", impl, NULL};
    l.n = 0;
    af_put_all(&l, parts);
  }
  af_emit(write, ctx, &l);
  return AF_OK;
}

static const char* af_dtype_name(af_dump_dtype t) {
  return t == AF_DUMP_F32 ? "f32" : (t == AF_DUMP_I8 ? "i8" : (t == AF_DUMP_I32 ? "i32" : NULL));
}

af_status af_dump_tensor(af_write_fn write, void* ctx, const char* stage, af_dump_dtype dtype,
                         int32_t rank, const int32_t* dims) {
  af_line l;
  int32_t d;
  if (write == NULL || stage == NULL || (rank > 0 && dims == NULL)) return AF_ERR_NULL;
  if (!af_stage_ok(stage) || af_dtype_name(dtype) == NULL) return AF_ERR_PARAM;
  if (rank < 0 || rank > 8) return AF_ERR_SHAPE;
  for (d = 0; d < rank; ++d)
    if (dims[d] < 0) return AF_ERR_SHAPE;
  {
    const char* const parts[] = {"AFDUMP tensor ", stage, " ", af_dtype_name(dtype), " ", NULL};
    l.n = 0;
    af_put_all(&l, parts);
  }
  af_put_i32(&l, rank);
  for (d = 0; d < rank; ++d) {
    af_put(&l, " ");
    af_put_i32(&l, dims[d]);
  }
  af_emit(write, ctx, &l);
  return AF_OK;
}

af_status af_dump_part(af_write_fn write, void* ctx, const char* stage, af_dump_dtype dtype,
                       uint32_t offset, const void* data, uint32_t count) {
  af_line l;
  uint32_t i, h = 2166136261u;
  if (write == NULL || stage == NULL || (count > 0 && data == NULL)) return AF_ERR_NULL;
  if (!af_stage_ok(stage) || af_dtype_name(dtype) == NULL) return AF_ERR_PARAM;
  if (dtype != AF_DUMP_I8 && !af_aligned(data, 4)) return AF_ERR_ALIGN;
  l.n = 0;
  af_put_range(&l, "AFDUMP part ", stage, offset, count);
  af_emit(write, ctx, &l);
  for (i = 0; i < count; ++i) {
    uint32_t bits;
    if (i % AF_DUMP_PER_LINE == 0) af_put(&l, "AFDUMP d");
    af_put(&l, " ");
    if (dtype == AF_DUMP_I8) {
      const int8_t v = ((const int8_t*)data)[i];
      af_put_i32(&l, v);
      h = af_fnv(h, (uint8_t)v);
    } else {
      if (dtype == AF_DUMP_F32)
        AF_COPY(&bits, (const float*)data + i, 4);
      else
        AF_COPY(&bits, (const int32_t*)data + i, 4);
      if (dtype == AF_DUMP_F32)
        af_put_hex8(&l, bits);
      else
        af_put_i32(&l, (int32_t)bits);
      h = af_fnv(h, (uint8_t)bits);
      h = af_fnv(h, (uint8_t)(bits >> 8));
      h = af_fnv(h, (uint8_t)(bits >> 16));
      h = af_fnv(h, (uint8_t)(bits >> 24));
    }
    if (i % AF_DUMP_PER_LINE == AF_DUMP_PER_LINE - 1 || i + 1 == count) af_emit(write, ctx, &l);
  }
  af_put_range(&l, "AFDUMP end ", stage, offset, count);
  af_put(&l, " ");
  af_put_hex8(&l, h);
  af_emit(write, ctx, &l);
  return AF_OK;
}

af_status af_dump_done(af_write_fn write, void* ctx, const char* case_name) {
  af_line l;
  if (write == NULL || case_name == NULL) return AF_ERR_NULL;
  if (!af_name_ok(case_name)) return AF_ERR_PARAM;
  l.n = 0;
  af_put(&l, "AFDUMP done ");
  af_put(&l, case_name);
  af_emit(write, ctx, &l);
  return AF_OK;
}
