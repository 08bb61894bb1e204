// cli_bench_io_test.cc — `attnflow bench prefill --io` end to end: the flash
// and naive schedules agree on a small shape (against the float64 reference,
// computed inside the run), the modelled bytes equal the formula worked by hand
// (docs/kernels.md), both times are positive, and misuse is a usage error.
// No timing thresholds.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/cli_util.h"

namespace attnflow {
namespace {

TEST(CliBenchIo, SmallShapeAgreesAndCountsBytesByHand) {
  std::vector<nlohmann::json> rows;
  ASSERT_NO_FATAL_FAILURE(testing::RunCliJsonLines(
      "bench prefill --io --json --q-len 96 --heads 2 --kv-heads 1 --head-dim 16 --causal top_left "
      "--repeat 1 --warmup 0 --threads 2",
      &rows));
  ASSERT_EQ(rows.size(), 1u);
  const nlohmann::json& j = rows[0];
  EXPECT_EQ(j["agree"], true);
  EXPECT_LT(j["max_err_naive"].get<double>(), 1e-5);
  EXPECT_LT(j["max_err_flash"].get<double>(), 1e-5);
  EXPECT_GT(j["naive_median_s"].get<double>(), 0);
  EXPECT_GT(j["flash_median_s"].get<double>(), 0);
  // By hand: B=1 H=2 Hkv=1 L=96 D=16, fp32.
  const double q_o = 2.0 * 2 * 96 * 16 * 4, sp = 4.0 * 2 * 96 * 96 * 4;
  EXPECT_EQ(j["s_and_p_bytes"].get<double>(), sp);
  EXPECT_EQ(j["naive_bytes"].get<double>(), q_o + 2.0 * 2 * 96 * 16 * 4 + sp);
  const double tile_q = j["tile_q"].get<double>();
  ASSERT_GT(tile_q, 0);
  const double tiles = std::ceil(2 * 96 / tile_q);  // G = 2 heads share a tile
  EXPECT_EQ(j["flash_bytes"].get<double>(), q_o + 2.0 * 1 * 96 * 16 * 4 * tiles);
}

TEST(CliBenchIo, MisuseIsAUsageError) {
  EXPECT_EQ(testing::RunCli("bench decode --io --no-peak").code, 2);
  EXPECT_EQ(testing::RunCli("bench prefill --io --kv-dtype f16").code, 2);
  EXPECT_EQ(testing::RunCli("bench prefill --io --kernel naive").code, 2);
  const testing::CliResult r = testing::RunCli("bench prefill --kernel naive --kv-dtype f16 "
                                               "--q-len 8 --repeat 1 --warmup 0 --no-peak");
  EXPECT_EQ(r.code, 2) << r.text;
  EXPECT_NE(r.text.find("cannot force naive"), std::string::npos) << r.text;
}

}  // namespace
}  // namespace attnflow
