// cli_budget_device_test.cc — `attnflow budget --device`: the tiny model on
// the named targets (numbers worked out by hand in
// tests/nn/device_budget_test.cc), --config as a name and as the committed
// JSON, --ram / --flash overrides, --json, and the usage errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "util/cli_util.h"

namespace attnflow {
namespace {

using testing::CliResult;
using testing::RunCli;

bool Has(const CliResult& o, const std::string& s) { return o.text.find(s) != std::string::npos; }

nlohmann::json Json(const std::string& args) {
  CliResult o =
      RunCli(args, {.env = "", .deadline_s = 0, .stdin_null = false, .merge_stderr = false});
  EXPECT_EQ(o.code, 0) << args << "\n" << o.text;
  return nlohmann::json::parse(o.text, nullptr, false);
}

TEST(CliBudgetDevice, TinyOnEsp32C3InInt8) {
  const std::string config = std::string(ATTNFLOW_SOURCE_DIR) + "/tools/edge/tiny/config.json";
  for (const std::string& c : {std::string("tiny"), config}) {
    nlohmann::json j =
        Json("budget --config " + c + " --device esp32-c3 --weights int8 --kv-cache int8 --json");
    ASSERT_FALSE(j.is_discarded());
    EXPECT_EQ(j["schema"], "attnflow-budget-device/1");
    EXPECT_EQ(j["target"]["ram_bytes"], 320 * 1024);
    EXPECT_EQ(j["flash_bytes"], 92976);
    EXPECT_EQ(j["kv_bytes_per_token"], 256);
    EXPECT_EQ(j["activation_bytes"], 1072);
    EXPECT_EQ(j["arena"]["bytes"], 320);
    EXPECT_EQ(j["max_context_ram"], 1274);
    EXPECT_EQ(j["model_limit"], 128);
    EXPECT_EQ(j["max_context"], 128);
    EXPECT_EQ(j["binds"], "learned positions");
    EXPECT_EQ(j["choices"].size(), 5u);
  }
  CliResult o = RunCli("budget --config tiny --device esp32-c3 --weights int8 --kv-cache int8");
  EXPECT_EQ(o.code, 0) << o.text;
  EXPECT_TRUE(Has(o, "from RAM: 1274 tokens")) << o.text;
  EXPECT_TRUE(Has(o, "usable: 128 tokens, bound by learned positions")) << o.text;
}

TEST(CliBudgetDevice, OverridesAndTargets) {
  // 16 KiB of RAM: (16,384 - 1,392) / 256 = 58 tokens, RAM binds.
  nlohmann::json j = Json(
      "budget --config tiny --device esp32-c3 --ram 16KiB --weights int8 --kv-cache int8 --json");
  EXPECT_EQ(j["max_context"], 58);
  EXPECT_EQ(j["binds"], "RAM");
  // f32 on the STM32F407: (192 KiB - 2,928) / 1,024 = 189 from RAM.
  j = Json("budget --config tiny --device stm32f407 --json");
  EXPECT_EQ(j["flash_bytes"], 324608);
  EXPECT_EQ(j["max_context_ram"], (192 * 1024 - 2928) / 1024);
  // A flash too small for the f32 weights.
  j = Json("budget --config tiny --device custom --ram 64KiB --flash 256KiB --json");
  EXPECT_EQ(j["flash_fits"], false);
  CliResult o = RunCli("budget --config tiny --device custom --ram 64KiB --flash 256KiB");
  EXPECT_TRUE(Has(o, "DOES NOT FIT")) << o.text;
}

TEST(CliBudgetDevice, UsageErrors) {
  for (const char* args : {
           "budget --config tiny --device custom --ram 64KiB",           // no --flash
           "budget --config tiny --device esp8266",                      // unknown target
           "budget --config tiny --device esp32-c3 --weights int8",      // int8 weights, f32 cache
           "budget --config tiny --flash 1MiB",                          // --flash without --device
           "budget --config tiny --device esp32-c3 --kv-bytes 1",        // host flag
           "budget --config tiny --device esp32-c3 --flash lots",        // bad size
           "budget --config tiny --device esp32-c3 --kv-scale-bytes 4",  // scales on an f32 cache
       }) {
    CliResult o = RunCli(args);
    EXPECT_EQ(o.code, 2) << args << "\n" << o.text;
    EXPECT_TRUE(Has(o, "attnflow budget: error: ")) << args << "\n" << o.text;
  }
}

}  // namespace
}  // namespace attnflow
