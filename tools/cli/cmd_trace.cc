// cmd_trace.cc — `attnflow trace`: run an input with stage capture on and
// write the attention player (HTML) and the trace's data.
//
//   attnflow trace [--html out.html] [--json t.json]            the four-token toy
//   attnflow trace --model DIR --text "a sentence"              MiniLM encoder
//   attnflow trace --model F.gguf --text "prompt" --decode-steps 4   SmolLM2 decoder
//   attnflow trace --from t.json --html out.html                re-check / re-render
//   attnflow trace --vit IMAGE.png|ppm --html vit.html          seeded ViT, CLS->patch grid
//   attnflow trace --bahdanau --html b.html                     seeded Bahdanau GRU loop
//   attnflow trace --transformer --html t.html                  seeded encoder-decoder
//   ... --all-layers                                            every layer's weights (view)
//   attnflow trace --pad 2 [--causal none] --html p.html        toy + 2 masked <pad> keys
//   attnflow trace --model minilm --sentences "a" "longer b" --html b.html   a padded batch
// Options: --layer, --heads 0,2, --decode-steps N, --tokens N (toy length),
// --causal (toy), --pad N (toy), --sentences (encoder batch), --max-page-tokens; exports --safetensors FILE, --npy DIR,
// --csv DIR, --png DIR, --svg DIR.
// Progress: a model trace that runs past ~1 s ($ATTNFLOW_PROGRESS_AFTER_MS
// overrides, for tests) draws "[trace] done/total tokens · tokens/s · ETA" on
// stderr when stderr is a terminal and --quiet is off; the line is cleared
// before the summary is printed.
// Exit: 0 ok; 1 a numeric check of the trace failed (the page is still
// written so the failure is visible); 2 usage error or unreadable/invalid
// input (a corrupted or truncated --from file, a bad model path or layer).
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "attnflow/file_util.h"
#include "attnflow/model.h"
#include "attnflow/player.h"
#include "attnflow/safetensors.h"
#include "cli_common.h"

namespace attnflow::cli {
namespace {

struct TraceArgs {
  std::string model, text, from, vit;
  std::vector<std::string> sentences;  // an encoder batch (--sentences)
  int64_t pad = 0;                     // toy pad keys (--pad)
  bool bahdanau = false, transformer = false, all_layers = false;
  int64_t max_view_tokens = 64;
  int64_t layer = 0, decode_steps = 0, tokens = 4, max_page_tokens = player::kDefaultPageTokens;
  std::vector<int64_t> heads;
  std::string causal = "top_left";
  std::string json, html, safetensors, npy, csv, png, svg;
  bool quiet = false;
  // What a porter changes, to compare a model with its optimised self
  // (docs/golden-format.md "A model against its optimised self").
  std::string kv_dtype = "f32";  // decoder KV cache
  std::string impl = "kernels";  // attention: kernels | reference
  std::string decode_from;       // teacher-force the decode steps with REF's tokens
};

// The outputs, in --help order: each is written when its flag is given.
// A FILE output must not name an input (OutputsAreNotInputs); an export
// writes one live trace (not a --from re-render).
struct TraceOutput {
  const char* flag;
  std::string TraceArgs::*path;
  const char* what;  // FILE or DIR
  bool is_export;
  const char* help;
};
constexpr TraceOutput kOutputs[] = {
    {"--json", &TraceArgs::json, "FILE", false, "Write the page JSON (format attnflow-trace/1)"},
    {"--html", &TraceArgs::html, "FILE", false, "Write the self-contained player page"},
    {"--safetensors", &TraceArgs::safetensors, "FILE", true, "Write every stage, full precision"},
    {"--npy", &TraceArgs::npy, "DIR", true, "Write one .npy per stage into this directory"},
    {"--csv", &TraceArgs::csv, "DIR", true, "Write spreadsheet CSVs into this directory"},
    {"--png", &TraceArgs::png, "DIR", true, "Write PNG heatmaps into this directory"},
    {"--svg", &TraceArgs::svg, "DIR", true, "Write SVG heatmaps into this directory"},
};

const char* StateName(player::CheckState s) {
  switch (s) {
    case player::CheckState::kPass: return "PASS";
    case player::CheckState::kFail: return "FAIL";
    default: return "n/a ";
  }
}

void PrintChecks(const player::TraceSummary& s) {
  std::printf("checks (the page's check panel runs the same):\n");
  for (const auto& c : s.checks)
    std::printf("  %s  %s%s%s\n", StateName(c.state), EscapeLine(c.name).c_str(),
                c.detail.empty() ? "" : ": ", EscapeLine(c.detail).c_str());
  std::printf("  => %s\n", s.all_pass() ? "all checks pass" : "A CHECK FAILED: this trace is broken");
}

std::string KiB(size_t n) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f KiB", n / 1024.0);
  return b;
}

// The progress line: a ticker thread redraws it every 250 ms once the trace
// has run for `after` seconds; Update() is the trace's progress hook.
class TraceProgress {
 public:
  TraceProgress() {
    after_s_ = 1.0;
    if (const char* e = std::getenv("ATTNFLOW_PROGRESS_AFTER_MS"); e != nullptr && *e != 0)
      after_s_ = std::atof(e) / 1000.0;
    t0_ = std::chrono::steady_clock::now();
    try {
      thread_ = std::thread([this] { Run(); });
    } catch (const std::exception&) {
      // No thread to spare (a process limit): the line is then drawn only at
      // each decode step, from Update().
    }
  }
  ~TraceProgress() { Stop(); }
  void Update(int64_t done, int64_t total) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    if (done > 0 && prefill_ == 0) {
      prefill_ = done;
      t_prefill_ = now;
    }
    done_ = done;
    total_ = total;
    t_last_ = now;
    if (done > 0 && done < total) Draw();  // each step, not only on the ticks
  }
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    if (shown_) {
      std::fprintf(stderr, "\r\033[K");
      std::fflush(stderr);
    }
  }

 private:
  static double Sec(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  }
  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::milliseconds(250), [this] { return stop_; })) Draw();
  }
  // Draws the line if the trace has run past the threshold (mu_ held).
  void Draw() {
    {
      const double s = Sec(t0_, std::chrono::steady_clock::now());
      if (s < after_s_ || total_ == 0) return;
      char line[160];
      if (done_ == 0) {
        std::snprintf(line, sizeof line, "[trace] 0/%lld tokens · prefill running · %.1f s",
                      static_cast<long long>(total_), s);
      } else {
        const double rate = static_cast<double>(done_) / Sec(t0_, t_last_);
        // ETA from the decode steps' own rate (one token per forward pass).
        const int64_t steps = done_ - prefill_;
        char eta[48] = "ETA after the first decode step";
        if (done_ >= total_) std::snprintf(eta, sizeof eta, "writing output");
        else if (steps > 0)
          std::snprintf(eta, sizeof eta, "ETA %.1f s",
                        static_cast<double>(total_ - done_) * Sec(t_prefill_, t_last_) / steps);
        std::snprintf(line, sizeof line, "[trace] %lld/%lld tokens · %.1f tokens/s · %s",
                      static_cast<long long>(done_), static_cast<long long>(total_), rate, eta);
      }
      std::fprintf(stderr, "\r\033[K%s", line);
      std::fflush(stderr);
      shown_ = true;
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
  bool stop_ = false, shown_ = false;
  double after_s_ = 1.0;
  int64_t done_ = 0, total_ = 0, prefill_ = 0;
  std::chrono::steady_clock::time_point t0_, t_last_, t_prefill_;
};

int WriteHtml(const std::string& path, const std::string& json) {
  Result<std::string> page = player::RenderPlayerHtml(json);
  if (!page.ok()) {
    PrintError("trace", page.status().ToString());
    return kExitUsage;
  }
  Status st = WriteFileAtomic(path, page.value());
  if (!st.ok()) {
    PrintError("trace", st.ToString());
    return kExitUsage;
  }
  std::printf("wrote %s (player page, %s, self-contained)\n", EscapeLine(path).c_str(),
              KiB(page->size()).c_str());
  return kExitOk;
}

// The first export flag given (kOutputs order), or nullptr.
const char* FirstExportFlag(const TraceArgs& a) {
  for (const TraceOutput& o : kOutputs)
    if (o.is_export && !(a.*o.path).empty()) return o.flag;
  return nullptr;
}

int RunFrom(const TraceArgs& a) {
  const char* flag = FirstExportFlag(a);
  if (flag == nullptr && !a.model.empty()) flag = "--model";
  if (flag != nullptr) {
    PrintError("trace", std::string("--from re-checks and re-renders a trace JSON; ") + flag +
                            " needs a live trace (drop --from)");
    return kExitUsage;
  }
  Result<std::string> text = ReadFileString(a.from);
  if (!text.ok()) {
    PrintError("trace", text.status().message());
    return kExitUsage;
  }
  Result<player::TraceSummary> s = player::ReadTraceJson(text.value(), a.from);
  if (!s.ok()) {
    PrintError("trace", s.status().message());
    return kExitUsage;
  }
  // Everything below comes from the JSON file: escaped (EscapeLine).
  std::printf("trace %s: %s · %s · %s · %s shown · %s\n", EscapeLine(a.from).c_str(),
              EscapeLine(s->source).c_str(), EscapeLine(s->model).c_str(),
              Count(s->num_tokens, "token").c_str(), Count(s->num_heads_shown, "head").c_str(),
              Count(s->decode_steps, "decode step").c_str());
  if (!s->note.empty()) std::printf("view: %s\n", EscapeLine(s->note).c_str());
  if (!a.html.empty()) {
    const int rc = WriteHtml(a.html, text.value());
    if (rc != kExitOk) return rc;
  }
  if (!a.json.empty()) {
    Status st = WriteFileAtomic(a.json, text.value());
    if (!st.ok()) {
      PrintError("trace", st.ToString());
      return kExitUsage;
    }
  }
  PrintChecks(s.value());
  return s->all_pass() ? kExitOk : kExitCheckFailed;
}

// `brief`: the kernel's name and tiles only (KernelChoice::ToString() up to
// its reason).
void PrintKernel(const char* what, const trace::KernelCheck& k, bool brief) {
  if (!k.ran) {
    std::printf("  %s: fast kernel not run (%s)\n", what, EscapeLine(k.note).c_str());
    return;
  }
  const std::string name = brief ? k.kernel.substr(0, k.kernel.find(':')) : k.kernel;
  std::printf("  %s: %s\n      |out - reference| %.2e, |lse - reference| %.2e, weights rebuilt "
              "from its lse %.2e\n",
              what, EscapeLine(name).c_str(), k.max_abs_out, k.max_abs_lse, k.max_abs_weights);
}

// Prints a failed step of `trace` and returns the usage exit code.
int TraceFailed(const Status& st) {
  PrintError("trace", st.ToString());
  return kExitUsage;
}

// Serialises the page (one trace or a padded batch) with the given options.
using PageSerializer = std::function<Result<std::string>(const player::PageOptions&)>;

// A page's full-precision JSON and what reading it back found.
struct Page {
  player::PageOptions options;  // from --max-page-tokens, --max-view-tokens, --heads
  std::string json;
  player::TraceSummary summary;
};

// Serialises the page with the flags' options and reads the JSON back, which
// validates it and runs the page's checks. On error prints it and returns
// false.
bool BuildPage(const TraceArgs& a, const PageSerializer& to_json, Page* page) {
  page->options.max_tokens = a.max_page_tokens;
  page->options.max_view_tokens = a.max_view_tokens;
  page->options.heads = a.heads;
  Result<std::string> json = to_json(page->options);
  if (!json.ok()) {
    TraceFailed(json.status());
    return false;
  }
  Result<player::TraceSummary> s = player::ReadTraceJson(json.value(), "<generated trace>");
  if (!s.ok()) {
    TraceFailed(s.status());
    return false;
  }
  page->json = std::move(json).value();
  page->summary = std::move(s).value();
  return true;
}

// Writes --json (the full-precision page; `json_note` follows its size in
// the message) and --html. Returns kExitOk or the exit code of the first
// failure (printed).
int WritePageFiles(const TraceArgs& a, const PageSerializer& to_json, const Page& page,
                   const std::string& json_note) {
  if (!a.json.empty()) {
    Status st = WriteFileAtomic(a.json, page.json);
    if (!st.ok()) return TraceFailed(st);
    std::printf("wrote %s (page JSON, %s%s)\n", EscapeLine(a.json).c_str(), KiB(page.json.size()).c_str(),
                json_note.c_str());
  }
  if (!a.html.empty()) {
    // The page gets the compact, lossless encoding (base64 floats, constant
    // runs, verified derivations); reading it back checks it once more.
    player::PageOptions po = page.options;
    po.compact = true;
    Result<std::string> packed = to_json(po);
    if (!packed.ok()) return TraceFailed(packed.status());
    Result<player::TraceSummary> ps = player::ReadTraceJson(packed.value(), "<generated page>");
    if (!ps.ok()) return TraceFailed(ps.status());
    const int rc = WriteHtml(a.html, packed.value());
    if (rc != kExitOk) return rc;
  }
  return kExitOk;
}

// A padded encoder batch: one page (sentence 0, every sentence's page in
// "batch.pages"), read back and checked like any page.
int WriteBatch(const TraceArgs& a, const std::vector<trace::Trace>& traces) {
  const PageSerializer to_json = [&traces](const player::PageOptions& po) {
    return player::BatchToJson(traces, po);
  };
  Page page;
  if (!BuildPage(a, to_json, &page)) return kExitUsage;
  const player::TraceSummary& s = page.summary;
  const trace::Trace& t0 = traces.front();
  std::printf("attnflow trace: %s (encoder batch) · layer %lld · %s padded to %s · %s × d_k %lld"
              " · mask kv_lens\n",
              EscapeLine(t0.info.name).c_str(), static_cast<long long>(t0.layer),
              Count(int64_t(traces.size()), "sentence").c_str(),
              Count(int64_t(t0.tokens.size()), "token").c_str(),
              Count(t0.info.num_heads, "head").c_str(), static_cast<long long>(t0.info.head_dim));
  for (const auto& t : traces) {
    const size_t real = t.tokens.size() - t.pad_keys.size();
    std::printf("  sentence %lld: %s + %zu [PAD]", static_cast<long long>(t.batch_index),
                Count(int64_t(real), "token").c_str(), t.pad_keys.size());
    if (!a.quiet) {
      std::printf(" ·");
      for (size_t i = 0; i < std::min<size_t>(real, 16); ++i)
        std::printf(" %s", EscapeLine(trace::ShownToken(t.tokens[i])).c_str());
      if (real > 16) std::printf(" …");
    }
    std::printf("\n");
    if (!a.quiet) PrintKernel("    fast path (same kv_lens)", t.kernel, true);
  }
  const int rc =
      WritePageFiles(a, to_json, page, ", " + std::to_string(traces.size()) + " sentence pages");
  if (rc != kExitOk) return rc;
  PrintChecks(s);
  return s.all_pass() ? kExitOk : kExitCheckFailed;
}

// An output file naming an input file (--from, --vit, a --model file, also
// through a link) would replace what is being read: refused.
bool OutputsAreNotInputs(const TraceArgs& a) {
  for (const std::string* in : {&a.from, &a.vit, &a.model}) {
    if (in->empty()) continue;
    for (const TraceOutput& o : kOutputs) {
      const std::string& out = a.*o.path;
      if (out.empty() || std::string_view(o.what) != "FILE") continue;
      if (Status st = CheckOutputIsNotInput("trace", *in, out); !st.ok()) {
        PrintError("trace", st.message());
        return false;
      }
    }
  }
  return true;
}

// --decode-from REF: the decode steps feed REF's decode_token_ids (a dump
// written by `trace --safetensors`), after checking that the prompt is
// REF's (the same token ids), so the two runs see the same tokens.
Status TeacherTokens(const TraceArgs& a, const Model& model, const std::string& text,
                     trace::ModelTraceOptions* o) {
  Result<SafetensorsFile> ref = SafetensorsFile::Open(a.decode_from);
  if (!ref.ok()) return ref.status();
  const std::string where = "--decode-from " + a.decode_from + ": ";
  if (!ref->Has("decode_token_ids") || !ref->Has("token_ids")) {
    return InvalidArgument(where + "no decode_token_ids / token_ids (a dump of `attnflow trace "
                                   "--model ... --decode-steps N --safetensors FILE`)");
  }
  Result<TensorView> dec = ref->Get("decode_token_ids"), tok = ref->Get("token_ids");
  if (!dec.ok()) return dec.status();
  if (!tok.ok()) return tok.status();
  if (dec->dtype != DType::kI32 || dec->rank != 1 || tok->dtype != DType::kI32 || tok->rank != 1) {
    return InvalidArgument(where + "token_ids and decode_token_ids must be I32 [n]");
  }
  Result<std::vector<int32_t>> mine = model.tokenizer().Encode(text, /*add_special=*/true);
  if (!mine.ok()) return mine.status();
  bool same = static_cast<int64_t>(mine->size()) == tok->shape[0];
  for (int64_t i = 0; same && i < tok->shape[0]; ++i)
    same = static_cast<int32_t>(tok->load(i)) == (*mine)[static_cast<size_t>(i)];
  if (!same) {
    return InvalidArgument(where + "its prompt has other tokens than --prompt (" +
                           std::to_string(tok->shape[0]) + " vs " + std::to_string(mine->size()) +
                           " tokens): trace the same prompt");
  }
  for (int64_t i = 0; i < dec->shape[0]; ++i) o->decode_ids.push_back(static_cast<int32_t>(dec->load(i)));
  if (o->decode_steps == 0) o->decode_steps = dec->shape[0];
  if (o->decode_steps > dec->shape[0]) {
    return InvalidArgument(where + "holds " + std::to_string(dec->shape[0]) +
                           " decode tokens, fewer than --decode-steps " +
                           std::to_string(o->decode_steps));
  }
  return Status::Ok();
}

int RunTrace(TraceArgs a) {
  if (!OutputsAreNotInputs(a)) return kExitUsage;
  if (!a.from.empty()) return RunFrom(a);
  if (std::none_of(std::begin(kOutputs), std::end(kOutputs),
                   [&](const TraceOutput& o) { return !(a.*o.path).empty(); })) {
    std::string flags;
    for (const TraceOutput& o : kOutputs)
      flags += (flags.empty() ? "" : ", ") + std::string(o.flag) + " " + o.what;
    PrintError("trace", "nothing to write: pass at least one of " + flags);
    return kExitUsage;
  }
  std::string display;
  Result<trace::Trace> tr = Status(StatusCode::kInternal, "unset");
  std::unique_ptr<Model> model;
  const int systems = (!a.vit.empty()) + a.bahdanau + a.transformer + (!a.model.empty());
  if (systems > 1) {
    PrintError("trace", "--vit, --bahdanau, --transformer and --model each pick what to trace: "
                        "pass one of them");
    return kExitUsage;
  }
  if (a.pad != 0 && systems > 0) {
    PrintError("trace", "--pad appends <pad> keys to the toy only; a model pads a batch itself: "
                        "pass --model minilm --sentences \"a\" \"longer b\"");
    return kExitUsage;
  }
  if (!a.sentences.empty()) {
    if (a.model.empty()) {
      PrintError("trace", "--sentences runs a padded batch through an encoder: add --model minilm");
      return kExitUsage;
    }
    if (!a.text.empty()) {
      PrintError("trace", "pass either --text (one sentence) or --sentences (a batch), not both");
      return kExitUsage;
    }
    if (a.sentences.size() < 2 || a.sentences.size() > static_cast<size_t>(trace::kMaxBatchSentences)) {
      PrintError("trace", "--sentences takes 2 to " + std::to_string(trace::kMaxBatchSentences) +
                              " sentences, got " + std::to_string(a.sentences.size()) +
                              " (one sentence: --text)");
      return kExitUsage;
    }
    if (const char* flag = FirstExportFlag(a)) {
      PrintError("trace", std::string(flag) + " exports one trace; a --sentences batch writes "
                          "--json / --html (trace one sentence with --text to export it)");
      return kExitUsage;
    }
  }
  if ((!a.vit.empty() || a.bahdanau || a.transformer) &&
      (!a.text.empty() || a.decode_steps != 0 || a.tokens != 4)) {
    PrintError("trace", "--text, --decode-steps and --tokens apply to the toy and --model only "
                        "(the seeded ViT / Bahdanau / Transformer inputs are fixed)");
    return kExitUsage;
  }
  if (!a.vit.empty()) {
    Result<RgbImage> img = ReadImageFile(a.vit);
    if (!img.ok()) {
      PrintError("trace", img.status().message());
      return kExitUsage;
    }
    trace::VitTraceOptions o;
    o.layer = a.layer;
    tr = trace::TraceVit(img.value(), o);
  } else if (a.bahdanau) {
    if (a.layer != 0) {
      PrintError("trace", "the Bahdanau loop has one decoder: --layer must be 0");
      return kExitUsage;
    }
    tr = trace::TraceBahdanau();
  } else if (a.transformer) {
    tr = trace::TraceTransformer(a.layer);
  } else if (a.model.empty()) {
    if (!a.text.empty()) {
      PrintError("trace", "--text needs --model (the toy's sentence is frozen; use --tokens N to lengthen it)");
      return kExitUsage;
    }
    trace::ToyOptions o;
    o.num_tokens = a.tokens;
    o.decode_steps = a.decode_steps;
    o.all_layers = a.all_layers;
    o.pad = a.pad;
    if (a.pad > 0 && a.decode_steps > 0) {
      PrintError("trace", "--pad with --decode-steps: a padded toy has no decode steps (the cache "
                          "would hold pad keys between the prompt and the new tokens)");
      return kExitUsage;
    }
    if (a.tokens + a.pad > trace::kMaxToyTokens) {
      PrintError("trace", "--tokens " + std::to_string(a.tokens) + " + --pad " +
                              std::to_string(a.pad) + " is more than the toy's " +
                              std::to_string(trace::kMaxToyTokens) + " positions");
      return kExitUsage;
    }
    if (!ParseCausal(a.causal, &o.causal)) {
      PrintError("trace", "--causal must be none, top_left or bottom_right, got " + a.causal);
      return kExitUsage;
    }
    if (a.layer != 0) {
      PrintError("trace", "the toy has one layer: --layer must be 0");
      return kExitUsage;
    }
    tr = trace::TraceToy(o);
  } else {
    std::string path;
    if (!ResolveModel("trace", a.model, "", &path, &display)) return kExitUsage;
    const bool gguf = path.size() > 5 && path.compare(path.size() - 5, 5, ".gguf") == 0;
    if (a.kv_dtype != "f32" && !gguf) {
      PrintError("trace", "--kv-dtype is the KV cache of a decoder (.gguf); " + a.model +
                              " is not one");
      return kExitUsage;
    }
    Result<std::unique_ptr<Model>> m = Status::Ok();
    if (gguf) {
      DecoderOptions dopt;
      dopt.kv_dtype = a.kv_dtype == "f16" ? DType::kF16 : a.kv_dtype == "bf16" ? DType::kBF16 : DType::kF32;
      Result<std::unique_ptr<DecoderModel>> d = LoadDecoderModel(path, dopt);
      if (d.ok()) m = std::unique_ptr<Model>(std::move(d).value());
      else m = d.status();
    } else {
      m = LoadModel(path);
    }
    if (!m.ok()) {
      PrintError("trace", m.status().ToString());
      return kExitUsage;
    }
    model = std::move(m).value();
    model->SetReferenceAttention(a.impl == "reference");
    trace::ModelTraceOptions o;
    o.layer = a.layer;
    o.decode_steps = a.decode_steps;
    o.all_layers = a.all_layers;
    // --all-layers with a full-precision export keeps every layer's stages.
    o.keep_layer_stages = a.all_layers && (!a.safetensors.empty() || !a.npy.empty());
    const std::string text = a.text.empty() ? "The cat sat on the mat." : a.text;
    if (!a.decode_from.empty()) {
      Status st = TeacherTokens(a, *model, text, &o);
      if (!st.ok()) {
        PrintError("trace", st.message());
        return kExitUsage;
      }
    }
    std::unique_ptr<TraceProgress> progress;
    if (!a.quiet && StderrIsTerminal()) {
      progress = std::make_unique<TraceProgress>();
      o.progress = [p = progress.get()](int64_t done, int64_t total) { p->Update(done, total); };
    }
    if (!a.sentences.empty()) {
      auto* enc = dynamic_cast<EncoderModel*>(model.get());
      if (enc == nullptr) {
        PrintError("trace", "--sentences needs an encoder (e.g. --model minilm): " + a.model +
                                " is not one (a decoder's prompt is one sequence; no batch)");
        return kExitUsage;
      }
      Result<std::vector<trace::Trace>> batch = trace::TraceEncoderBatch(*enc, a.sentences, o);
      if (progress) progress->Stop();
      if (!batch.ok()) {
        PrintError("trace", batch.status().ToString());
        return kExitUsage;
      }
      for (auto& t : batch.value()) t.info.name = display;
      return WriteBatch(a, batch.value());
    } else if (auto* enc = dynamic_cast<EncoderModel*>(model.get())) {
      tr = trace::TraceEncoder(*enc, text, o);
    } else if (auto* dec = dynamic_cast<DecoderModel*>(model.get())) {
      tr = trace::TraceDecoder(*dec, text, o);
    } else {
      PrintError("trace", a.model + ": neither an encoder nor a decoder model");
      return kExitUsage;
    }
  }
  if (!tr.ok()) {
    PrintError("trace", tr.status().ToString());
    return kExitUsage;
  }
  trace::Trace& t = tr.value();
  if (!display.empty()) t.info.name = display;
  if (model != nullptr) {
    t.attention_impl = a.impl;
    if (dynamic_cast<DecoderModel*>(model.get()) != nullptr) {
      t.kv_dtype = a.kv_dtype == "f16" ? "F16" : a.kv_dtype == "bf16" ? "BF16" : "F32";
    }
  }
  const PageSerializer to_json = [&t](const player::PageOptions& po) {
    return player::TraceToJson(t, po);
  };
  Page page;
  if (!BuildPage(a, to_json, &page)) return kExitUsage;
  const player::TraceSummary& s = page.summary;
  std::printf("attnflow trace: %s (%s) · layer %lld · %s · %s × d_k %lld · mask %s · %s\n",
              EscapeLine(t.info.name).c_str(), EscapeLine(t.source).c_str(),
              static_cast<long long>(t.layer), Count(int64_t(t.tokens.size()), "token").c_str(),
              Count(t.info.num_heads, "head").c_str(), static_cast<long long>(t.info.head_dim),
              CausalName(t.causal), Count(int64_t(t.decode.size()), "decode step").c_str());
  if (!a.quiet) {
    std::printf("  tokens (␣ = space):");
    const size_t show = std::min<size_t>(t.tokens.size(), 24);
    for (size_t i = 0; i < show; ++i) std::printf(" %s", EscapeLine(trace::ShownToken(t.tokens[i])).c_str());
    if (show < t.tokens.size()) std::printf(" … (+%zu)", t.tokens.size() - show);
    std::printf("\n  stages:");
    for (const auto& st : t.stages) std::printf(" %s", EscapeLine(st.name).c_str());
    std::printf("\n");
    PrintKernel("fast path, prefill", t.kernel, false);
    for (size_t i = 0; i < t.decode.size(); ++i) {
      const std::string what = "decode step " + std::to_string(i + 1) + " ('" +
                               EscapeLine(trace::ShownToken(t.decode[i].token)) + "', cache " +
                               std::to_string(t.decode[i].position + 1) + " keys)";
      PrintKernel(what.c_str(), t.decode[i].kernel, true);
    }
  }
  for (const auto& v : s.views)
    std::printf("  view %s (%s): %lld layer(s) × %lld head(s) × %lld × %lld%s\n",
                EscapeLine(v.id).c_str(), EscapeLine(v.kind).c_str(), static_cast<long long>(v.num_layers),
                static_cast<long long>(v.num_heads), static_cast<long long>(v.rows),
                static_cast<long long>(v.cols),
                v.pool > 1 ? (" (pooled " + std::to_string(v.pool) + "×" + std::to_string(v.pool) + " on the page)").c_str() : "");
  if (!t.banner.empty()) std::printf("note: %s\n", EscapeLine(t.banner).c_str());
  if (!s.note.empty()) std::printf("view: %s\n", EscapeLine(s.note).c_str());
  else std::printf("view: full resolution (%zu tokens <= %lld)\n", t.tokens.size(),
                   static_cast<long long>(page.options.max_tokens));

  const int rc = WritePageFiles(a, to_json, page, "");
  if (rc != kExitOk) return rc;
  if (!a.safetensors.empty()) {
    Status st = player::WriteTraceSafetensors(a.safetensors, t);
    if (!st.ok()) return TraceFailed(st);
    std::printf("wrote %s (every stage, full precision, golden-format names%s)\n",
                EscapeLine(a.safetensors).c_str(),
                t.inputs.empty() ? "" : "; a valid golden case: attnflow verify FILE");
  }
  std::vector<std::string> files;
  if (!a.npy.empty()) {
    Status st = player::WriteTraceNpy(a.npy, t, &files);
    if (!st.ok()) return TraceFailed(st);
    std::printf("wrote %zu .npy files to %s\n", files.size(), EscapeLine(a.npy).c_str());
  }
  if (!a.csv.empty()) {
    files.clear();
    Status st = player::WriteTraceCsv(a.csv, t, a.heads, &files);
    if (!st.ok()) return TraceFailed(st);
    std::printf("wrote %zu CSV files to %s\n", files.size(), EscapeLine(a.csv).c_str());
  }
  for (const auto& [dir, fmt] : {std::pair<const std::string*, player::ImageFormat>{&a.png, player::ImageFormat::kPng},
                                 {&a.svg, player::ImageFormat::kSvg}}) {
    if (dir->empty()) continue;
    files.clear();
    Status st = player::WriteTraceHeatmaps(*dir, t, a.heads, fmt, &files);
    if (!st.ok()) return TraceFailed(st);
    std::printf("wrote %zu %s heatmaps to %s\n", files.size(),
                fmt == player::ImageFormat::kPng ? "PNG" : "SVG", EscapeLine(*dir).c_str());
  }
  PrintChecks(s);
  return s.all_pass() ? kExitOk : kExitCheckFailed;
}

void AddTraceOptions(CLI::App& sub, TraceArgs& a) {
  sub.add_option("--model", a.model,
                 "Model: minilm or smollm2 (see `attnflow models`), a BERT directory "
                 "(encoder) or a .gguf file (decoder); empty: the four-token toy");
  sub.add_option("--text,--prompt", a.text,
                 "Sentence (encoder) or prompt (decoder); default \"The cat sat on the mat.\"");
  sub.add_option("--sentences", a.sentences,
                 "Encoder batch: 2 to 16 sentences in ONE padded forward pass (attention "
                 "mask = kv_lens, as sentence-transformers); the page picks the sentence")
      ->expected(1, -1);
  sub.add_option("--pad", a.pad,
                 "Toy: append N <pad> keys masked by a key-padding mask (kv_lens); with "
                 "--causal shows how the two masks combine")
      ->check(InRange(0, 8191));
  sub.add_option("--vit", a.vit,
                 "Trace the seeded (random-weight) ViT on this image (PNG or binary PPM; "
                 "centre-cropped and resized to 88×88 = 11×11 patches of 8 px)");
  sub.add_flag("--bahdanau", a.bahdanau,
               "Trace the seeded Bahdanau GRU encoder-decoder on a toy sentence pair");
  sub.add_flag("--transformer", a.transformer,
               "Trace the seeded encoder-decoder Transformer (encoder, decoder and "
               "cross-attention views)");
  sub.add_flag("--all-layers", a.all_layers,
               "Add a view with every layer's attention weights (toy, --model, --vit, "
               "--transformer always have them); with --safetensors or --npy, a model's "
               "export holds every stage of every layer (layer.<l>.<stage>), one forward pass");
  sub.add_option("--max-view-tokens", a.max_view_tokens,
                 "Above this many rows/cols the extra views are pooled (default 64)")
      ->check(InRange(8, 4096));
  sub.add_option("--from", a.from,
                 "Re-check and re-render an existing trace JSON instead of running a model");
  sub.add_option("--layer", a.layer, "Layer to capture (default 0)")->check(NonNegative());
  sub.add_option("--heads", a.heads, "Query heads to show, e.g. 0,2 (default all)")
      ->delimiter(',')
      ->check(NonNegative());
  sub.add_option("--decode-steps", a.decode_steps,
                 "Decode steps after the prompt (toy: teacher-forced; decoder: greedy)")
      ->check(InRange(0, 1024));
  sub.add_option("--tokens", a.tokens, "Toy length (default 4; more extends the sentence)")
      ->check(InRange(1, 8192));
  sub.add_option("--causal", a.causal, "Toy mask: none, top_left (default), bottom_right")
      ->check(CLI::IsMember({"none", "top_left", "bottom_right"}));
  sub.add_option("--kv-dtype", a.kv_dtype,
                 "Decoder KV cache: f32, f16 or bf16 (compare a model with its optimised self: "
                 "verify --compare OPT REF)")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}))
      ->capture_default_str();
  sub.add_option("--impl", a.impl,
                 "Model attention: kernels (the fast path) or reference (float64 "
                 "reference::Sdpa in every layer)")
      ->check(CLI::IsMember({"kernels", "reference"}))
      ->capture_default_str();
  sub.add_option("--decode-from", a.decode_from,
                 "Teacher-force the decode steps with the tokens of another run's dump "
                 "(REF.safetensors from trace --safetensors; same prompt), so both runs see "
                 "the same tokens");
  sub.add_option("--max-page-tokens", a.max_page_tokens,
                 "Above this length the page pools its views (exports stay full)")
      ->check(InRange(8, 4096));
  for (const TraceOutput& o : kOutputs) sub.add_option(o.flag, a.*o.path, o.help);
  sub.add_flag("-q,--quiet", a.quiet, "Shorter summary and no progress line");
}

}  // namespace

ATTNFLOW_REGISTER_COMMAND(
    trace, "trace",
    "Run an input with stage capture and write the attention player (HTML) and trace data",
    ArgsCommand<TraceArgs>(AddTraceOptions, RunTrace));

}  // namespace attnflow::cli
