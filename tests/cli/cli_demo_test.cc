// cli_demo_test.cc — pins `attnflow demo`'s numbers against an independent
// NumPy float64 recomputation (tools/demo/demo_numpy.py, numpy pinned in
// tools/deps/demo.pip), not just the word PASS.
//
// Invariants checked:
//  * every leaf of `attnflow demo --json` that the script also computes
//    (toy X, attention outputs and weights, causal, padding, the sqrt(d_k)
//    statistics over 2000 seeded draws per d_k, order-blindness, learned vs
//    sinusoidal positions, the post-norm block) equals the script's value
//    within abs 1e-10 + rel 1e-9, and the script covers every key the demo
//    prints except its own check flags;
//  * the text mode prints the same scaling statistics (formatted from the
//    script's values) and numbered steps 1..14 in order;
//  * mathematical properties that do not depend on either program: scaled
//    var(q·k) is near 1 and unscaled near d_k; the unscaled max weight grows
//    with d_k while the scaled one stays put.
// Expected values never come from the demo itself.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "util/cli_util.h"

namespace attnflow {
namespace {

using testing::RunCli;
using testing::RunShell;

std::string Python() { return std::string(ATTNFLOW_SOURCE_DIR) + "/.cache/venv/bin/python"; }

nlohmann::json NumpyReference() {
  testing::CliOptions o;
  o.merge_stderr = false;
  const testing::CliResult r =
      RunShell(Python() + " " + ATTNFLOW_SOURCE_DIR + "/tools/demo/demo_numpy.py", o);
  EXPECT_EQ(r.code, 0) << "tools/demo/demo_numpy.py failed (numpy: tools/deps/demo.pip)";
  return nlohmann::json::parse(r.text, nullptr, /*allow_exceptions=*/false);
}

int g_compared = 0;

void ExpectClose(const nlohmann::json& got, const nlohmann::json& want, const std::string& path) {
  if (want.is_object()) {
    ASSERT_TRUE(got.is_object()) << path;
    for (auto it = want.begin(); it != want.end(); ++it) {
      ASSERT_TRUE(got.contains(it.key())) << "demo lacks " << path << "." << it.key();
      ExpectClose(got[it.key()], it.value(), path + "." + it.key());
    }
  } else if (want.is_array()) {
    ASSERT_TRUE(got.is_array()) << path;
    ASSERT_EQ(got.size(), want.size()) << path;
    for (size_t i = 0; i < want.size(); ++i)
      ExpectClose(got[i], want[i], path + "[" + std::to_string(i) + "]");
  } else if (want.is_number()) {
    ASSERT_TRUE(got.is_number()) << path;
    const double g = got.get<double>(), w = want.get<double>();
    EXPECT_LE(std::fabs(g - w), 1e-10 + 1e-9 * std::fabs(w)) << path << ": demo " << g
                                                               << " numpy " << w;
    ++g_compared;
  } else {
    EXPECT_EQ(got, want) << path;
  }
}

TEST(CliDemo, JsonMatchesIndependentNumpyFloat64) {
  const testing::CliResult demo = RunCli("demo --json", {.merge_stderr = false});
  ASSERT_EQ(demo.code, 0) << demo.text;
  const nlohmann::json got = nlohmann::json::parse(demo.text, nullptr, false);
  ASSERT_FALSE(got.is_discarded()) << demo.text;
  const nlohmann::json want = NumpyReference();
  ASSERT_TRUE(want.is_object());
  // The script recomputes every section the demo prints.
  for (auto it = got.begin(); it != got.end(); ++it) {
    if (it.key() == "checks_passed" || it.key() == "failed_checks") continue;
    EXPECT_TRUE(want.contains(it.key())) << "no independent value for " << it.key();
  }
  EXPECT_EQ(got["checks_passed"], true);
  EXPECT_TRUE(got["failed_checks"].empty());
  g_compared = 0;
  ExpectClose(got, want, "");
  EXPECT_GT(g_compared, 400);  // 459 today: matrices and statistics, not a handful

  // Properties of the mathematics (independent of both programs).
  double prev_max = 0;
  for (const auto& s : want["scaling"]) {
    const double dk = s["d_k"].get<double>();
    EXPECT_NEAR(s["scaled"]["var_qk"].get<double>(), 1.0, 0.1) << dk;
    EXPECT_NEAR(s["unscaled"]["var_qk"].get<double>() / dk, 1.0, 0.1) << dk;
    const double mx = s["unscaled"]["max_weight_mean"].get<double>();
    EXPECT_GT(mx, prev_max) << "unscaled saturation must grow with d_k";
    prev_max = mx;
    EXPECT_NEAR(s["scaled"]["max_weight_mean"].get<double>(), 0.5, 0.05) << dk;
  }
  EXPECT_EQ(got["padding"]["real_rows_max_abs_diff"].get<double>(), 0.0);
  EXPECT_EQ(got["padding"]["pad_row_max_abs_out"].get<double>(), 0.0);
  EXPECT_LT(got["order"]["no_pos_out_max_abs_diff"].get<double>(), 1e-12);
  EXPECT_GT(got["order"]["with_pos_out_max_abs_diff"].get<double>(), 0.1);
}

TEST(CliDemo, TextPrintsTheIndependentStatisticsAndNumberedSteps) {
  const testing::CliResult demo = RunCli("demo");
  ASSERT_EQ(demo.code, 0) << demo.text;
  const nlohmann::json want = NumpyReference();
  ASSERT_TRUE(want.is_object());
  for (const auto& s : want["scaling"])
    for (const char* which : {"unscaled", "scaled"}) {
      char buf[128];
      std::snprintf(buf, sizeof buf, "%7.4f ± %7.4f | %7.4f ± %7.4f",
                    s[which]["max_weight_mean"].get<double>(),
                    s[which]["max_weight_sd"].get<double>(), s[which]["entropy_mean"].get<double>(),
                    s[which]["entropy_sd"].get<double>());
      EXPECT_NE(demo.text.find(buf), std::string::npos)
          << "d_k " << s["d_k"] << " " << which << ": text lacks " << buf;
    }
  size_t at = 0;
  for (int step = 1; step <= 14; ++step) {
    const size_t next = demo.text.find("Step " + std::to_string(step) + ".", at);
    ASSERT_NE(next, std::string::npos) << "step " << step << " missing or out of order";
    at = next;
  }
  EXPECT_EQ(demo.text.find("Step 15."), std::string::npos);
  EXPECT_NE(demo.text.find(": PASS"), std::string::npos);
}

}  // namespace
}  // namespace attnflow
