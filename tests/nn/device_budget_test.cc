// device_budget_test.cc — `attnflow budget --device` (nn::ComputeDeviceBudget)
// for the micro kit's tiny decoder, with every number worked out by hand
// below from the model's definition (tools/edge/tiny/train.py) and the
// device programs (micro/tiny/tiny_main.c, tiny_s8_main.c), and checked
// against the committed model files themselves (parameter count from
// tests/data/edge/tiny_model.safetensors, int8 flash bytes from the tensors
// tools/edge/tiny/int8_model.py wrote to tiny_s8.safetensors).
//
// The tiny model: L = 2 layers, E = 64, H = Hkv = 4 heads of Dh = 16,
// F = 128 (ReLU), V = 92 characters, T = 128 learned positions, LayerNorm
// with weight and bias, biases everywhere, final LayerNorm, tied head.
//
// Parameters (per tensor):
//   tok [92,64] 5,888; pos [128,64] 8,192                       = 14,080
//   per layer: ln1 2*64 = 128; wq, wk, wv, wo 4*(64*64 + 64) = 16,640;
//              ln2 128; w1 128*64 + 128 = 8,320; w2 64*128 + 64 = 8,256
//              = 33,472;  2 layers                              = 66,944
//   lnf 2*64                                                    =    128
//   total                                                       = 81,152
// Flash: f32 81,152*4 = 324,608 B; f16 162,304 B.
//   int8 (int8_model.py): tok 92*64 + 8 (multiplier) = 5,896;
//   pos 128*64 + 8 = 8,200; per layer: ln1, ln2 (G, B int32) 2*2*64*4 =
//   1,024; q, k, v, o each 64*64 + 64*4 (bias) + 64*8 (multipliers) = 4,864
//   -> 19,456; w1 128*64 + 128*4 + 128*8 = 9,728; w2 64*128 + 64*4 + 64*8 =
//   8,960; exp and out multipliers 16 -> 39,184 per layer, 78,368 for 2;
//   lnf 2*64*4 = 512. Total 5,896 + 8,200 + 78,368 + 512 = 92,976 B.
// K/V bytes per token: f32 L*2*Hkv*Dh*4 = 2*2*4*16*4 = 1,024;
//   int8 2*2*4*16 = 256 (+ 2*2*4 = 16 per scale byte: 4-byte scales 320).
// Activations of one decode step:
//   f32 (tiny_main.c's statics x, h, q, k, v, att, o [64], ff [128],
//   logits [92]): (7*64 + 128 + 92)*4 = 668*4 = 2,672 B;
//   int8 (tiny_s8_main.c: r [64] int32, h8 q8 k8 v8 a8 [64], f8 [128],
//   logits [92] int32): 256 + 5*64 + 128 + 368 = 1,072 B.
// Arena: f32 2*32*4 = 256 B; int8 2*(24 + 16)*4 = 320 B.
// At 320 KiB = 327,680 B:
//   int8/int8: (327,680 - 1,072 - 320) / 256 = 326,288 / 256 = 1,274 tokens
//   (the "about 1,280" of 320 KiB / 256 B, less the activations and arena);
//   f32/f32: (327,680 - 2,672 - 256) / 1,024 = 324,752 / 1,024 = 317 tokens;
//   both above the 128 learned positions, which bind.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "attnflow/file_util.h"
#include "attnflow/micro.h"
#include "attnflow/nn_budget.h"
#include "attnflow/safetensors.h"

namespace attnflow::nn {
namespace {

const std::string kRoot = ATTNFLOW_SOURCE_DIR;

DeviceBudgetOptions On(int64_t ram, DeviceWeights w, DeviceKv kv, int64_t scale_bytes = 0) {
  DeviceBudgetOptions o;
  o.target = {"test", "test", ram, 4 << 20, ""};
  o.weights = w;
  o.kv = kv;
  o.kv_scale_bytes = scale_bytes;
  return o;
}

int64_t Item(const std::vector<ByteItem>& v, const std::string& name) {
  for (const auto& i : v)
    if (i.name == name) return i.bytes;
  ADD_FAILURE() << "no item " << name;
  return -1;
}

TEST(DeviceBudget, TinyConfigMatchesTheCommittedModel) {
  Result<std::string> text = ReadFileString(kRoot + "/tools/edge/tiny/config.json");
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  Result<ModelShape> json = ParseModelShapeJson(text.value());
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  Result<ModelShape> known = FindModelShape("tiny");
  ASSERT_TRUE(known.ok());
  Result<Budget> bj = ComputeBudget(json.value(), 1), bk = ComputeBudget(known.value(), 1);
  ASSERT_TRUE(bj.ok() && bk.ok());
  // The JSON and the built-in shape are the same model.
  EXPECT_EQ(bj->total_params, bk->total_params);
  EXPECT_EQ(bj->kv_bytes_per_token, bk->kv_bytes_per_token);
  EXPECT_EQ(bj->head_dim, bk->head_dim);
  EXPECT_EQ(bj->num_kv_heads, bk->num_kv_heads);
  EXPECT_EQ(json->max_positions, known->max_positions);
  EXPECT_EQ(json->act, known->act);
  EXPECT_EQ(json->final_norm, known->final_norm);
  EXPECT_EQ(json->tied_lm_head, known->tied_lm_head);
  // The model file: shapes and metadata give every number of the config.
  Result<SafetensorsFile> f =
      SafetensorsFile::Open(kRoot + "/tests/data/edge/tiny_model.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto shape = [&](const std::string& n) {
    const SafetensorsTensorInfo* i = f->Find(n);
    return i == nullptr ? Shape{} : i->shape;
  };
  EXPECT_EQ(shape("tok"), (Shape{92, 64}));                  // vocab 92, d_model 64
  EXPECT_EQ(shape("pos"), (Shape{128, 64}));                 // 128 learned positions
  EXPECT_EQ(shape("layers.0.w1.weight"), (Shape{128, 64}));  // ffn 128
  EXPECT_EQ(shape("layers.1.wq.bias"), (Shape{64}));         // biases
  EXPECT_EQ(shape("lnf.bias"), (Shape{64}));                 // final LayerNorm
  EXPECT_FALSE(f->Has("layers.2.wq.weight"));                // 2 layers
  EXPECT_EQ(f->metadata().at("heads"), "4");
  EXPECT_EQ(f->metadata().at("layers"), "2");
  EXPECT_EQ(f->metadata().at("max_len"), "128");
  int64_t params = 0;
  for (const auto& n : f->names()) {
    EXPECT_TRUE(n == "tok" || n == "pos" || n.rfind("layers.", 0) == 0 || n.rfind("lnf.", 0) == 0)
        << n << ": an untied head or another tensor would change the count";
    int64_t k = 1;
    for (int64_t d : shape(n)) k *= d;
    params += k;
  }
  EXPECT_EQ(params, 81152);
  EXPECT_EQ(bk->total_params, 81152);
}

TEST(DeviceBudget, TinyFlashHandChecked) {
  const ModelShape tiny = FindModelShape("tiny").value();
  Result<DeviceBudget> f32 =
      ComputeDeviceBudget(tiny, On(320 << 10, DeviceWeights::kF32, DeviceKv::kF32));
  Result<DeviceBudget> f16 =
      ComputeDeviceBudget(tiny, On(320 << 10, DeviceWeights::kF16, DeviceKv::kF32));
  Result<DeviceBudget> s8 =
      ComputeDeviceBudget(tiny, On(320 << 10, DeviceWeights::kInt8, DeviceKv::kInt8));
  ASSERT_TRUE(f32.ok() && f16.ok() && s8.ok()) << s8.status().ToString();
  EXPECT_EQ(f32->flash_bytes, 324608);
  EXPECT_EQ(f16->flash_bytes, 162304);
  EXPECT_EQ(s8->flash_bytes, 92976);
  EXPECT_EQ(Item(s8->flash, "token embedding"), 5896);
  EXPECT_EQ(Item(s8->flash, "learned positions"), 8200);
  EXPECT_EQ(Item(s8->flash, "layers"), 78368);
  EXPECT_EQ(Item(s8->flash, "final norm"), 512);
  // The bytes int8_model.py stored for the device (everything but the prompt
  // and the expected outputs), an independent account of the layout.
  Result<SafetensorsFile> f = SafetensorsFile::Open(kRoot + "/tests/data/edge/tiny_s8.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  int64_t stored = 0;
  for (const auto& t : f->tensors()) {
    if (t.name == "prompt" || t.name == "expected_ids" || t.name == "expected_logits") continue;
    stored += t.nbytes();
  }
  EXPECT_EQ(stored, 92976);
  EXPECT_TRUE(f32->flash_fits);
}

TEST(DeviceBudget, TinyRamAndContextHandChecked) {
  const ModelShape tiny = FindModelShape("tiny").value();
  const int64_t ram = 320 << 10;  // 327,680
  Result<DeviceBudget> s8 =
      ComputeDeviceBudget(tiny, On(ram, DeviceWeights::kInt8, DeviceKv::kInt8));
  ASSERT_TRUE(s8.ok()) << s8.status().ToString();
  EXPECT_EQ(s8->kv_bytes_per_token, 256);
  EXPECT_EQ(s8->activation_bytes, 1072);
  EXPECT_EQ(Item(s8->activations, "residual r (int32)"), 256);
  EXPECT_EQ(Item(s8->activations, "q, k, v (int8)"), 192);
  EXPECT_EQ(Item(s8->activations, "logits (int32)"), 368);
  EXPECT_EQ(s8->arena.bytes, 320);
  EXPECT_EQ(s8->max_context_ram, 1274);
  EXPECT_NEAR(double(s8->max_context_ram), 1280.0, 10.0);  // the "about 1,280"
  EXPECT_EQ(s8->model_limit, 128);
  EXPECT_EQ(s8->max_context, 128);
  EXPECT_EQ(s8->binds, "learned positions");
  EXPECT_EQ(s8->context, 128);
  EXPECT_EQ(s8->kv_bytes, 128 * 256);
  EXPECT_EQ(s8->ram_bytes, 1072 + 320 + 128 * 256);

  Result<DeviceBudget> f32 =
      ComputeDeviceBudget(tiny, On(ram, DeviceWeights::kF32, DeviceKv::kF32));
  ASSERT_TRUE(f32.ok());
  EXPECT_EQ(f32->kv_bytes_per_token, 1024);
  EXPECT_EQ(f32->activation_bytes, 2672);
  EXPECT_EQ(f32->arena.bytes, 256);
  EXPECT_EQ(f32->max_context_ram, 317);
  // tiny_main.c's cache: kstore + vstore = 2 * [2][128 * 64] floats = 131,072 B
  // = 128 tokens * 1,024.
  EXPECT_EQ(f32->kv_bytes_per_token * 128, 2 * 2 * 128 * 64 * 4);

  // int8 cache with a 4-byte scale per layer, K/V, head and token: 256 + 64.
  Result<DeviceBudget> sc =
      ComputeDeviceBudget(tiny, On(ram, DeviceWeights::kInt8, DeviceKv::kInt8, 4));
  ASSERT_TRUE(sc.ok());
  EXPECT_EQ(sc->kv_bytes_per_token, 320);
  EXPECT_EQ(sc->max_context_ram, (ram - 1072 - 320) / 320);
  // f32 weights with an int8 cache: f32 activations + int8 q and output.
  Result<DeviceBudget> mix =
      ComputeDeviceBudget(tiny, On(ram, DeviceWeights::kF32, DeviceKv::kInt8));
  ASSERT_TRUE(mix.ok());
  EXPECT_EQ(mix->activation_bytes, 2672 + 2 * 64);
  EXPECT_EQ(mix->max_context_ram, (ram - 2672 - 128 - 320) / 256);

  // RAM binds when it is small: 16 KiB int8 = (16,384 - 1,392) / 256 = 58.
  Result<DeviceBudget> small =
      ComputeDeviceBudget(tiny, On(16 << 10, DeviceWeights::kInt8, DeviceKv::kInt8));
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->max_context_ram, 58);
  EXPECT_EQ(small->max_context, 58);
  EXPECT_EQ(small->binds, "RAM");
  // Not even the activations fit.
  Result<DeviceBudget> none =
      ComputeDeviceBudget(tiny, On(1000, DeviceWeights::kF32, DeviceKv::kF32));
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->max_context, 0);
  EXPECT_FALSE(none->ram_fits || none->max_context_ram > 0);
  // The comparison table holds the five valid pairs with the same numbers.
  ASSERT_EQ(s8->choices.size(), 5u);
  for (const DeviceChoice& c : s8->choices) {
    if (c.weights == DeviceWeights::kInt8) EXPECT_EQ(c.max_context_ram, 1274);
    if (c.weights == DeviceWeights::kF32 && c.kv == DeviceKv::kF32)
      EXPECT_EQ(c.max_context_ram, 317);
  }
}

TEST(DeviceBudget, ArenaFormulaUsesTheMicroLibrarysTiles) {
  EXPECT_EQ(kMicroKeyTile, AF_KEY_TILE);
  EXPECT_EQ(kMicroS8KeyTile, AF_S8_KEY_TILE);
}

TEST(DeviceBudget, TargetsAndBadOptions) {
  Result<DeviceTarget> t = FindDeviceTarget("esp32-c3");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->ram_bytes, 320 << 10);
  EXPECT_EQ(t->flash_bytes, 4 << 20);
  EXPECT_EQ(FindDeviceTarget("stm32f407")->ram_bytes, 192 << 10);
  EXPECT_EQ(FindDeviceTarget("nrf5340")->ram_bytes, 512 << 10);
  EXPECT_FALSE(FindDeviceTarget("esp8266").ok());
  const ModelShape tiny = FindModelShape("tiny").value();
  // int8 weights with an f32 cache, scales on an f32 cache, no RAM.
  EXPECT_FALSE(ComputeDeviceBudget(tiny, On(1 << 20, DeviceWeights::kInt8, DeviceKv::kF32)).ok());
  EXPECT_FALSE(ComputeDeviceBudget(tiny, On(1 << 20, DeviceWeights::kF32, DeviceKv::kF32, 4)).ok());
  EXPECT_FALSE(ComputeDeviceBudget(tiny, On(0, DeviceWeights::kF32, DeviceKv::kF32)).ok());
  // llama-3-8b does not fit any flash here; its counts do not overflow.
  Result<DeviceBudget> big = ComputeDeviceBudget(
      FindModelShape("llama-3-8b").value(), On(512 << 10, DeviceWeights::kInt8, DeviceKv::kInt8));
  ASSERT_TRUE(big.ok()) << big.status().ToString();
  EXPECT_FALSE(big->flash_fits);
  // A context beyond the RAM is reported as not fitting.
  DeviceBudgetOptions o = On(320 << 10, DeviceWeights::kF32, DeviceKv::kF32);
  o.context = 400;
  Result<DeviceBudget> c = ComputeDeviceBudget(tiny, o);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->context, 400);
  EXPECT_FALSE(c->ram_fits);
  EXPECT_NE(FormatDeviceBudget(c.value()).find("DOES NOT FIT"), std::string::npos);
}

}  // namespace
}  // namespace attnflow::nn
