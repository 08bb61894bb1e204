// cmd_golden.cc — `attnflow golden`: write a v1 golden case from the float64
// reference, so users can make golden vectors for their own ports.
#include <cstdio>
#include <memory>
#include <string>

#include "attnflow/golden.h"
#include "cli_common.h"
#include "common_options.h"

namespace attnflow::cli {
namespace {

struct GoldenArgs {
  GoldenSpec spec;
  std::string causal = "none";
  std::string out;
  double scale = 0;
  bool has_scale = false;
};

int RunGolden(GoldenArgs& a) {
  if (!ParseCausal(a.causal, &a.spec.causal)) {
    PrintError("golden", "--causal must be none, top_left or bottom_right, got " + a.causal);
    return kExitUsage;
  }
  if (!a.spec.mask_shape.empty() && a.spec.mask == "none") {
    PrintError("golden", "--mask-shape needs --mask bool or --mask float (there is no mask to shape)");
    return kExitUsage;
  }
  if (a.has_scale) a.spec.scale = a.scale;
  Status st = WriteGoldenCase(a.spec, a.out);
  if (!st.ok()) {
    PrintError("golden", st.message());
    return kExitUsage;
  }
  std::printf("wrote %s (kind=%s, causal=%s, seed=%llu)\n", EscapeLine(a.out).c_str(),
              EscapeLine(a.spec.kind).c_str(), EscapeLine(a.causal).c_str(),
              static_cast<unsigned long long>(a.spec.seed));
  return kExitOk;
}

}  // namespace

ATTNFLOW_REGISTER_COMMAND(
    golden, "golden", "Write a golden case (format v1) from the float64 reference",
    [](CLI::App& sub) -> std::function<int()> {
      auto a = std::make_shared<GoldenArgs>();
      GoldenSpec& s = a->spec;
      sub.add_option("--kind", s.kind, "sdpa or mha")->check(CLI::IsMember({"sdpa", "mha"}));
      sub.add_option("--batch", s.batch, "B")->check(InRange(0, 1 << 16));
      sub.add_option("--heads", s.num_heads, "H (query heads)")->check(InRange(1, 1 << 12));
      sub.add_option("--kv-heads", s.num_kv_heads, "Hkv (default H; H % Hkv == 0)")
          ->check(InRange(0, 1 << 12));
      sub.add_option("--q-len", s.q_len, "Lq")->check(InRange(0, 1 << 16));
      sub.add_option("--kv-len", s.kv_len, "Lk")->check(InRange(0, 1 << 16));
      sub.add_option("--head-dim", s.head_dim, "D (mha: E = H*D)")->check(InRange(1, 4096));
      sub.add_option("--v-dim", s.v_dim, "Dv (sdpa; default D)")->check(InRange(0, 4096));
      AddCausalOption(sub, a->causal);
      auto* sc = sub.add_option("--scale", a->scale, "Scale, a finite number (default 1/sqrt(D))")
                     ->check(Finite());
      sub.add_option("--mask", s.mask, "none | bool | float")
          ->check(CLI::IsMember({"none", "bool", "float"}));
      sub.add_option("--mask-shape", s.mask_shape, "Mask shape, rank 2-4 (default Lq Lk)")
          ->expected(2, 4);
      sub.add_option("--kv-lens", s.kv_lens, "Valid keys per batch entry (B values)");
      AddWindowOptions(sub, s.window_left, s.window_right);
      sub.add_flag("--alibi", s.alibi, "Add standard ALiBi slopes");
      sub.add_option("--seed", s.seed, "RNG seed for the inputs");
      sub.add_option("--description", s.description, "Free text stored in the case");
      sub.add_option("--out", a->out, "Output .safetensors file")->required();
      return [a, sc] {
        a->has_scale = sc->count() > 0;
        return RunGolden(*a);
      };
    });

}  // namespace attnflow::cli
