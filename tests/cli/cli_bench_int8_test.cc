// cli_bench_int8_test.cc — `attnflow bench decode --kv-dtype f16,int8`: one
// invocation measures the F16 cache (split_kv_decode) and the int8 KV cache
// (int8_kv_decode, attnflow/kv_int8.h) on the same shape, each with its
// plain read; the int8 row counts the bytes it reads by hand (int8 K and V
// of every visible position plus the float scales); misuse is a usage error.
// No timing thresholds.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/cli_util.h"

namespace attnflow {
namespace {

TEST(CliBenchInt8, F16AndInt8RowsOfOneShapeWithTheirReads) {
  std::vector<nlohmann::json> rows;
  ASSERT_NO_FATAL_FAILURE(testing::RunCliJsonLines(
      "bench decode --kv-dtype f16,int8 --json --no-peak --heads 4 --kv-heads 2 --head-dim 32 "
      "--kv-len 700,300 --repeat 2 --warmup 0 --threads 2",
      &rows));
  ASSERT_EQ(rows.size(), 4u);
  // Each shape with each dtype in turn.
  const int64_t lens[] = {700, 700, 300, 300};
  for (size_t i = 0; i < rows.size(); ++i) {
    const nlohmann::json& j = rows[i];
    const bool int8 = i % 2 == 1;
    EXPECT_EQ(j["kv_len"], lens[i]);
    EXPECT_EQ(j["kv_dtype"], int8 ? "int8" : "f16");
    EXPECT_EQ(j["kernel"], int8 ? "int8_kv_decode" : "split_kv_decode");
    // By hand: B=1 Hkv=2 D=Dv=32; F16 2 bytes per element; int8 1 byte per
    // element plus 2 float scales per kv head.
    const double L = static_cast<double>(lens[i]);
    EXPECT_EQ(j["kv_bytes"].get<double>(), int8 ? 2 * 64 * L + 2 * 2 * 4 : 2 * 64 * L * 2);
    EXPECT_GT(j["median_s"].get<double>(), 0);
    EXPECT_GT(j["read_same_bytes_s"].get<double>(), 0);
    EXPECT_GT(j["read_median_s"].get<double>(), 0);
  }
  // A window: the int8 cache reads the last window_left + 1 positions only.
  std::vector<nlohmann::json> wr;
  ASSERT_NO_FATAL_FAILURE(testing::RunCliJsonLines(
      "bench decode --kv-dtype int8 --json --no-peak --heads 2 --kv-heads 2 --head-dim 16 "
      "--kv-len 500 --window-left 99 --causal bottom_right --repeat 1 --warmup 0 --explain",
      &wr));
  ASSERT_EQ(wr.size(), 1u);
  EXPECT_EQ(wr[0]["kv_bytes"].get<double>(), 2 * 32 * 100.0 + 2 * 2 * 4);
}

TEST(CliBenchInt8, MisuseIsAUsageError) {
  for (const char* args : {"bench prefill --kv-dtype int8 --no-peak",
                           "bench decode --kv-dtype int8 --q-len 2 --no-peak",
                           "bench decode --kv-dtype int4 --no-peak",
                           "bench decode --kv-dtype f16,int8 --kernel naive --no-peak",
                           "bench decode --kv-dtype int8 --causal top_left --no-peak"}) {
    const testing::CliResult r = testing::RunCli(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.text;
    EXPECT_NE(r.text.find("int8"), std::string::npos) << args << "\n" << r.text;
  }
}

}  // namespace
}  // namespace attnflow
