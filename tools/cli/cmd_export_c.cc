// cmd_export_c.cc — `attnflow export-c CASE.safetensors --out case.h`: writes
// a golden case as a C99 header for the on-device harness (micro/harness/,
// docs/edge.md), so a microcontroller needs no file system. Kinds: sdpa (f32
// and int8, below) and mha (f32: inputs, weights, stages q k v lse heads_out
// concat out, as `static const af_golden_mha NAME`).
//
// The header defines one `static const af_golden_sdpa NAME` (struct in
// micro/harness/af_golden.h) holding: the shape, causal rule, scale and the
// case's atol/rtol; the f32 inputs (q, k, v, kv_lens) and the stages the
// micro library produces (out, lse); the int8 inputs quantised per tensor
// (scale = max|x| / 127, so = sv), and the int8 expected output: the float64
// reference (reference::Sdpa) run on the DEQUANTISED int8 inputs, divided by
// so and rounded once (docs/edge.md "int8 golden cases"). Floats are written
// as exact hexadecimal literals. Cases the micro library does not cover
// (attn_mask, ALiBi, sliding window) are refused with exit 2.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "attnflow/attention.h"
#include "attnflow/reference.h"
#include "attnflow/golden.h"
#include "cli_common.h"

namespace attnflow::cli {
namespace {

struct ExportArgs {
  std::string file, out, name;
};

std::string FloatLit(float x) {
  if (std::isinf(x)) return x < 0 ? "-INFINITY" : "INFINITY";
  char buf[48];
  std::snprintf(buf, sizeof buf, "%af", double(x));
  return buf;
}

template <typename T, typename F>
void Array(std::ostream& os, const char* type, const std::string& name, const std::vector<T>& v,
           F fmt) {
  os << "static const " << type << " " << name << "[" << std::max<size_t>(v.size(), 1) << "] = {";
  if (v.empty()) os << "0";
  for (size_t i = 0; i < v.size(); ++i) os << (i % 8 == 0 ? "\n  " : " ") << fmt(v[i]) << ",";
  os << "\n};\n";
}

float QuantScale(const std::vector<float>& x) {
  float mx = 0;
  for (float a : x) mx = std::max(mx, std::fabs(a));
  return mx > 0 ? mx / 127.f : 1.f;
}

std::vector<int8_t> Quantise(const std::vector<float>& x, float s) {
  std::vector<int8_t> q(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    q[i] = int8_t(std::lrint(std::clamp(x[i] / s, -127.f, 127.f)));
  return q;
}

std::string Ident(std::string s) {
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) s = "case_" + s;
  return s;
}

const char* CausalMacro(Causal c) {
  return c == Causal::kTopLeft       ? "AF_CAUSAL_TOP_LEFT"
         : c == Causal::kBottomRight ? "AF_CAUSAL_BOTTOM_RIGHT"
                                     : "AF_CAUSAL_NONE";
}

Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) return Status(StatusCode::kInvalidArgument, "cannot write " + path);
  return Status();
}

// kind = mha: inputs, weights, and the stages af_mha_f32 produces.
template <typename Refuse>
int ExportMha(const ExportArgs& a, const GoldenCase& c, Refuse refuse) {
  const reference::MhaWeights& w = c.weights;
  const int64_t B = c.x_q.shape[0], Lq = c.x_q.shape[1], Lk = c.x_k.shape[1], E = c.x_q.shape[2];
  const int64_t H = w.num_heads, Hkv = w.num_kv_heads ? w.num_kv_heads : H;
  for (int64_t d : {B, Lq, Lk, E})
    if (d > 65535) return refuse("a dimension above 65535");
  for (const char* st : {"q", "k", "v", "lse", "heads_out", "concat", "out"})
    if (!c.file->Has(st)) return refuse(std::string("a case without the '") + st + "' stage");
  const std::string name = a.name.empty()
                               ? Ident(std::filesystem::path(a.file).stem().string())
                               : Ident(a.name);
  std::ostringstream os;
  os << "/* " << name << " — golden case (kind mha) exported by `attnflow export-c` from\n * "
     << std::filesystem::path(a.file).filename().string()
     << "; do not edit. Inputs, weights and the stages of af_mha_f32 (float64\n"
        " * reference rounded to f32), tolerances (docs/edge.md). */\n"
     << "#include <math.h>\n#include \"af_golden.h\"\n\n";
  auto f = [](float x) { return FloatLit(x); };
  auto i32 = [](int32_t x) { return std::to_string(x); };
  auto arr = [&](const std::string& suffix, const TensorView& t) {
    if (t.empty_view()) return std::string("0");
    Array(os, "float", name + "_" + suffix, GoldenFloats(t), f);
    return name + "_" + suffix;
  };
  for (const TensorView* t : {&c.x_q, &c.x_k, &c.x_v})
    for (float x : GoldenFloats(*t))
      if (!std::isfinite(x)) return refuse("a non-finite input");
  const std::string xq = arr("x_q", c.x_q), xk = arr("x_k", c.x_k), xv = arr("x_v", c.x_v);
  const std::string wq = arr("w_q", w.w_q), wk = arr("w_k", w.w_k), wv = arr("w_v", w.w_v),
                    wo = arr("w_o", w.w_o), bq = arr("b_q", w.b_q), bk = arr("b_k", w.b_k),
                    bv = arr("b_v", w.b_v), bo = arr("b_o", w.b_o);
  std::string kl = "0";
  if (!c.opt.kv_lens.empty_view()) {
    std::vector<int32_t> v;
    for (int64_t b = 0; b < B; ++b) v.push_back(int32_t(c.opt.kv_lens.load(b)));
    Array(os, "int32_t", name + "_kv_lens", v, i32);
    kl = name + "_kv_lens";
  }
  std::string st[7];
  const char* names[7] = {"q", "k", "v", "lse", "heads_out", "concat", "out"};
  for (int i = 0; i < 7; ++i) st[i] = arr(std::string("st_") + names[i], c.file->Get(names[i]).value());
  const float scale = float(std::isnan(c.opt.scale) ? DefaultScale(E / H) : c.opt.scale);
  os << "static const af_golden_mha " << name << " = {\n  \"" << name << "\",\n  {" << B << ", "
     << Lq << ", " << Lk << ", " << E << ", " << H << ", " << Hkv << ", "
     << CausalMacro(c.opt.causal) << "},\n  " << FloatLit(scale) << ", "
     << FloatLit(float(c.atol)) << ", " << FloatLit(float(c.rtol)) << ",\n  " << xq << ", " << xk
     << ", " << xv << ",\n  {" << wq << ", " << wk << ", " << wv << ", " << wo << ", " << bq << ", "
     << bk << ", " << bv << ", " << bo << "},\n  " << kl << ",\n  " << st[0] << ", " << st[1]
     << ", " << st[2] << ", " << st[3] << ", " << st[4] << ", " << st[5] << ", " << st[6]
     << "\n};\n";
  Status ws = WriteText(a.out, os.str());
  if (!ws.ok()) {
    PrintError("export-c", ws.message());
    return kExitUsage;
  }
  std::printf("export-c: %s -> %s (%s, mha B=%lld Lq=%lld Lk=%lld E=%lld H=%lld Hkv=%lld)\n",
              a.file.c_str(), a.out.c_str(), name.c_str(), (long long)B, (long long)Lq,
              (long long)Lk, (long long)E, (long long)H, (long long)Hkv);
  return kExitOk;
}

int RunExport(const ExportArgs& a) {
  Result<GoldenCase> c = LoadGoldenCase(a.file);
  if (!c.ok()) {
    PrintError("export-c", c.status().message());
    return kExitUsage;
  }
  auto refuse = [&](const std::string& why) {
    PrintError("export-c", a.file + ": " + why + " is not supported by the micro library "
                                                  "(docs/edge.md lists what it covers)");
    return kExitUsage;
  };
  if (c->kind != "sdpa" && c->kind != "mha") return refuse("kind '" + c->kind + "'");
  if (!c->opt.attn_mask.empty_view()) return refuse("attn_mask");
  if (!c->opt.alibi_slopes.empty_view()) return refuse("ALiBi");
  if (c->opt.softcap != 0.0) return refuse("softcap");
  if (c->opt.kv_align != KvAlign::kPadded) return refuse("per-sequence diagonal alignment");
  if (c->opt.window_left >= 0 || c->opt.window_right >= 0) return refuse("a sliding window");
  if (c->kind == "mha") return ExportMha(a, c.value(), refuse);
  const TensorView &q = c->q, &k = c->k, &v = c->v;
  const int64_t B = q.shape[0], H = q.shape[1], Hkv = k.shape[1], Lq = q.shape[2],
                Lk = k.shape[2], D = q.shape[3], Dv = v.shape[3];
  for (int64_t d : {B, H, Lq, Lk, D, Dv})
    if (d > 65535 || d < 0) return refuse("a dimension above 65535");
  if (D < 1 || Dv < 1) return refuse("head_dim or v_dim 0");
  Result<TensorView> out_st = c->file->Get("out"), lse_st = c->file->Get("lse");
  if (!out_st.ok() || !lse_st.ok())
    return refuse("a case without the 'out' and 'lse' stages");
  const std::vector<float> fq = GoldenFloats(q), fk = GoldenFloats(k), fv = GoldenFloats(v);
  for (const auto* t : {&fq, &fk, &fv})
    for (float x : *t)
      if (!std::isfinite(x)) return refuse("a non-finite input");
  const float scale = float(std::isnan(c->opt.scale) ? DefaultScale(D) : c->opt.scale);
  std::vector<int32_t> kv_lens;
  std::vector<int64_t> kv64;
  if (!c->opt.kv_lens.empty_view())
    for (int64_t b = 0; b < B; ++b) {
      kv64.push_back(int64_t(c->opt.kv_lens.load(b)));
      kv_lens.push_back(int32_t(kv64.back()));
    }
  // int8 inputs and the expected int8 output from the float64 reference.
  const float sq = QuantScale(fq), sk = QuantScale(fk), sv = QuantScale(fv), so = sv;
  const std::vector<int8_t> q8 = Quantise(fq, sq), k8 = Quantise(fk, sk), v8 = Quantise(fv, sv);
  std::vector<double> dq(q8.size()), dk(k8.size()), dv(v8.size());
  for (size_t i = 0; i < q8.size(); ++i) dq[i] = double(q8[i]) * sq;
  for (size_t i = 0; i < k8.size(); ++i) dk[i] = double(k8[i]) * sk;
  for (size_t i = 0; i < v8.size(); ++i) dv[i] = double(v8[i]) * sv;
  std::vector<double> ref(size_t(B * H * Lq * Dv));
  SdpaOptions opt;
  opt.causal = c->opt.causal;
  opt.scale = scale;
  if (!kv64.empty()) opt.kv_lens = MakeView(kv64.data(), DType::kI64, {B});
  Status st = reference::Sdpa(MakeView(ref.data(), DType::kF64, {B, H, Lq, Dv}), TensorView{},
                              MakeView(dq.data(), DType::kF64, {B, H, Lq, D}),
                              MakeView(dk.data(), DType::kF64, {B, Hkv, Lk, D}),
                              MakeView(dv.data(), DType::kF64, {B, Hkv, Lk, Dv}), opt);
  if (!st.ok()) {
    PrintError("export-c", a.file + ": " + st.message());
    return kExitUsage;
  }
  std::vector<int8_t> out8(ref.size());
  for (size_t i = 0; i < ref.size(); ++i)
    out8[i] = int8_t(std::clamp(std::nearbyint(ref[i] / so), -128.0, 127.0));

  const std::string name = a.name.empty()
                               ? Ident(std::filesystem::path(a.file).stem().string())
                               : Ident(a.name);
  std::ostringstream os;
  os << "/* " << name << " — golden case exported by `attnflow export-c` from\n * "
     << std::filesystem::path(a.file).filename().string()
     << "; do not edit. Inputs, the out and lse stages (float64 reference rounded\n"
        " * to f32), tolerances, and the int8 inputs/expected output (docs/edge.md). */\n"
     << "#include <math.h>\n#include \"af_golden.h\"\n\n";
  auto f = [](float x) { return FloatLit(x); };
  auto i8 = [](int8_t x) { return std::to_string(int(x)); };
  auto i32 = [](int32_t x) { return std::to_string(x); };
  Array(os, "float", name + "_q", fq, f);
  Array(os, "float", name + "_k", fk, f);
  Array(os, "float", name + "_v", fv, f);
  Array(os, "int32_t", name + "_kv_lens", kv_lens, i32);
  Array(os, "float", name + "_out", GoldenFloats(out_st.value()), f);
  Array(os, "float", name + "_lse", GoldenFloats(lse_st.value()), f);
  Array(os, "int8_t", name + "_q8", q8, i8);
  Array(os, "int8_t", name + "_k8", k8, i8);
  Array(os, "int8_t", name + "_v8", v8, i8);
  Array(os, "int8_t", name + "_out8", out8, i8);
  const char* causal = c->opt.causal == Causal::kTopLeft       ? "AF_CAUSAL_TOP_LEFT"
                       : c->opt.causal == Causal::kBottomRight ? "AF_CAUSAL_BOTTOM_RIGHT"
                                                               : "AF_CAUSAL_NONE";
  os << "static const af_golden_sdpa " << name << " = {\n  \"" << name << "\",\n  {" << B << ", "
     << H << ", " << Hkv << ", " << Lq << ", " << Lk << ", " << D << ", " << Dv << ", " << causal
     << "},\n  " << FloatLit(scale) << ", " << FloatLit(float(c->atol)) << ", "
     << FloatLit(float(c->rtol)) << ",\n  " << name << "_q, " << name << "_k, " << name << "_v, "
     << (kv_lens.empty() ? "0" : name + "_kv_lens") << ",\n  " << name << "_out, " << name
     << "_lse,\n  " << name << "_q8, " << name << "_k8, " << name << "_v8, " << FloatLit(sq) << ", "
     << FloatLit(sk) << ", " << FloatLit(sv) << ", " << FloatLit(so) << ",\n  " << name
     << "_out8, AF_S8_BOUND_LSB\n};\n";
  std::ofstream out(a.out, std::ios::binary);
  out << os.str();
  out.close();
  if (!out) {
    PrintError("export-c", "cannot write " + a.out);
    return kExitUsage;
  }
  std::printf("export-c: %s -> %s (%s, B=%lld H=%lld Hkv=%lld Lq=%lld Lk=%lld D=%lld Dv=%lld)\n",
              a.file.c_str(), a.out.c_str(), name.c_str(), (long long)B, (long long)H,
              (long long)Hkv, (long long)Lq, (long long)Lk, (long long)D, (long long)Dv);
  return kExitOk;
}

}  // namespace

ATTNFLOW_REGISTER_COMMAND(
    export_c, "export-c", "Write a golden case (sdpa) as a C header for the micro harness",
    [](CLI::App& sub) -> std::function<int()> {
      auto a = std::make_shared<ExportArgs>();
      sub.add_option("file", a->file, "Golden case (.safetensors, kind sdpa)")->required();
      sub.add_option("--out", a->out, "Header to write (case.h)")->required();
      sub.add_option("--name", a->name, "C identifier of the case (default: the file stem)");
      return [a] { return RunExport(*a); };
    });

}  // namespace attnflow::cli
