// cmd_generate.cc — `attnflow generate` (one prompt, streamed continuation)
// and `attnflow chat` (interactive, using the model's chat template) for
// GGUF Llama-family models.
//
// Output: generated text on stdout as tokens arrive (UTF-8 sequences split
// across tokens are held back until complete). On stderr: why generation
// stopped (eos | max_tokens | context_full | interrupted), always; timing
// (prefill tokens/s, decode ms/token) for generate unless --quiet, for chat
// only with --stats; a progress line during a long prefill when stderr is a
// terminal (not with --quiet). generate --json prints one JSON object on
// stdout instead of the text (schema in docs/cli.md).
// Context: --ctx-size caps it (default: the model's). A prompt that does not
// leave room for one new token is an error before any work, unless --truncate
// drops tokens from its left (and says how many).
// chat: /help /reset /system TEXT /stats /exit are commands, never sent to
// the model; Ctrl-C stops a reply (the partial reply is kept), Ctrl-C again
// at an empty prompt or Ctrl-D exits 0; the oldest turns are dropped (the
// system message is kept) when the conversation nears the context limit.
// Line editing and history come from libedit (BSD licence, Debian
// libedit-dev) when stdin is a terminal and the build found it.
// generate --floor-bytes N: after every decode step, outside its timing, a
// plain read of N bytes (a separate buffer, the model's own pool) gives that
// step's weight-streaming floor milliseconds after the step itself, so
// decode/floor is paired step by step (a host whose bandwidth drifts moves
// both alike); reported as `[floor]` on stderr and "floor" in --json.
// Default --model: smollm2 (attnflow::LocateModel: every place it looks).
// Exit codes: 0 ok, 2 usage error or unreadable/invalid model or input.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnflow/bench.h"
#include "attnflow/model.h"
#include "attnflow/ops.h"
#include "attnflow/sampling.h"
#include "cli_common.h"

#ifdef ATTNFLOW_HAVE_LIBEDIT
#include <editline/readline.h>
#endif

namespace attnflow::cli {
namespace {

volatile sig_atomic_t g_interrupted = 0;
void OnSigint(int) { g_interrupted = 1; }

// SIGINT sets a flag (no SA_RESTART, so a blocking read returns EINTR).
void InstallSigint() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = OnSigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  ::sigaction(SIGINT, &sa, nullptr);
}

struct GenArgs {
  std::string model;
  std::string prompt;
  int64_t max_tokens = 64;
  int64_t ctx_size = 0;
  SamplingOptions sampling;
  std::string kv_dtype = "f32";
  int threads = 0;
  bool chat = false;
  bool ignore_eos = false;
  bool fast_dot = false;
  bool truncate = false;
  bool json = false;
  bool quiet = false;
  bool stats = false;
  bool top_k_set = false, top_p_set = false;
  std::string system;
  int64_t floor_bytes = 0;  // generate --floor-bytes (0 = off)
};

// Holds back incomplete UTF-8 sequences between tokens; what it prints is
// escaped (EscapeText: the tokens' bytes come from the model file, and a
// control character, e.g. ESC, must not drive the terminal; \n and \t
// stay).
class Utf8Stream {
 public:
  explicit Utf8Stream(bool enabled) : enabled_(enabled) {}
  void Write(const std::string& bytes) {
    pending_ += bytes;
    size_t cut = pending_.size();
    for (size_t back = 1; back <= 3 && back <= pending_.size(); ++back) {
      const unsigned char c = static_cast<unsigned char>(pending_[pending_.size() - back]);
      if ((c & 0xC0) == 0x80) continue;  // continuation byte
      const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
      if (need > back) cut = pending_.size() - back;
      break;
    }
    if (enabled_) {
      const std::string shown = EscapeText(std::string_view(pending_).substr(0, cut));
      std::fwrite(shown.data(), 1, shown.size(), stdout);
      std::fflush(stdout);
    }
    pending_.erase(0, cut);
  }
  void Flush() {
    if (enabled_) {
      const std::string shown = EscapeText(pending_);
      std::fwrite(shown.data(), 1, shown.size(), stdout);
      std::fflush(stdout);
    }
    pending_.clear();
  }

 private:
  bool enabled_;
  std::string pending_;
};

double Ms(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

struct Loaded {
  std::unique_ptr<DecoderModel> model;
  const Tokenizer* tok = nullptr;
  std::string display;
  int64_t ctx = 0;  // usable context (positions)
};

int LoadFor(const char* cmd, const GenArgs& a, Loaded* out) {
  DecoderOptions lo;
  if (a.kv_dtype == "f16") {
    lo.kv_dtype = DType::kF16;
  } else if (a.kv_dtype == "bf16") {
    lo.kv_dtype = DType::kBF16;
  } else if (a.kv_dtype != "f32") {
    PrintError(cmd, "--kv-dtype must be f32, f16 or bf16, got " + a.kv_dtype);
    return kExitUsage;
  }
  if (a.ctx_size == 1) {
    PrintError(cmd, "--ctx-size 1 leaves no room for a prompt and a reply: use 0 (the model's) or >= 2");
    return kExitUsage;
  }
  lo.num_threads = a.threads;
  lo.max_context = a.ctx_size;
  lo.fast_dot = a.fast_dot;
  if (a.fast_dot && !ops::QFastDotHasSimd())
    PrintWarning(cmd, "--fast-dot: this CPU has no AVX2, so the fast dot runs its scalar reference "
                      "(the same results, but slower than the default exact path)");
  Status st = Sampler::Validate(a.sampling);
  if (!st.ok()) {
    PrintError(cmd, st.message());
    return kExitUsage;
  }
  if (a.sampling.temperature <= 0 && (a.top_k_set || a.top_p_set))
    PrintWarning(cmd, std::string("--temperature 0 is greedy decoding: ") +
                          (a.top_k_set && a.top_p_set ? "--top-k and --top-p have"
                           : a.top_k_set              ? "--top-k has"
                                                      : "--top-p has") +
                          " no effect (set --temperature > 0 to sample)");
  std::string path;
  if (!ResolveModel(cmd, a.model, "smollm2", &path, &out->display)) return kExitUsage;
  Result<std::unique_ptr<DecoderModel>> m = LoadDecoderModel(path, lo);
  if (!m.ok()) {
    PrintError(cmd, m.status().message());
    return kExitUsage;
  }
  out->model = std::move(m).value();
  out->tok = &out->model->tokenizer();
  out->ctx = out->model->info().max_positions;
  if (a.ctx_size > 0) out->ctx = std::min(out->ctx, a.ctx_size);
  return kExitOk;
}

struct GenStats {
  int64_t prompt_tokens = 0, generated = 0;
  double prefill_ms = 0, decode_ms = 0;
  int64_t decode_steps = 0;
  std::string stop;  // eos | max_tokens | context_full | interrupted
  std::vector<double> step_ms;  // every decode step's time
};

// The plain read behind --floor-bytes (a PlainReadBuffer of N bytes on the
// model's pool), read once after every decode step.
class FloorProbe {
 public:
  static Result<std::unique_ptr<FloorProbe>> Make(int64_t bytes, ThreadPool& pool) {
    const int w = pool.NumWorkers();
    if (PlainReadFloats(bytes, w) <= 0) {
      return InvalidArgument("--floor-bytes " + std::to_string(bytes) + " is less than one " +
                             std::to_string(64 * w * 4) + "-byte chunk per worker (" +
                             std::to_string(w) + " workers)");
    }
    // Every page is touched: refuse what this machine cannot hold (an
    // overcommitted allocation would be killed on first touch instead).
    const double phys =
        static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
    if (phys > 0 && static_cast<double>(bytes) > 0.5 * phys) {
      char msg[160];
      std::snprintf(msg, sizeof msg, "--floor-bytes %lld is more than half of this machine's %.3g GiB",
                    static_cast<long long>(bytes), phys / (1 << 30));
      return InvalidArgument(msg);
    }
    Result<PlainReadBuffer> b =
        PlainReadBuffer::Make(pool, bytes, "--floor-bytes " + std::to_string(bytes) + ": the read buffer");
    if (!b.ok()) return b.status();
    return std::unique_ptr<FloorProbe>(new FloorProbe(std::move(b).value()));
  }
  void Measure() { read_ms_.push_back(1e3 * buf_.Read()); }
  int64_t bytes() const { return buf_.bytes(); }
  const std::vector<double>& read_ms() const { return read_ms_; }

 private:
  explicit FloorProbe(PlainReadBuffer buf) : buf_(std::move(buf)) {}
  PlainReadBuffer buf_;
  std::vector<double> read_ms_;
};

// Quantile q of x (linear between order statistics); x non-empty.
double Quantile(std::vector<double> x, double q) {
  std::sort(x.begin(), x.end());
  const double pos = q * static_cast<double>(x.size() - 1);
  const size_t i = static_cast<size_t>(pos);
  const double f = pos - static_cast<double>(i);
  return i + 1 < x.size() ? x[i] * (1 - f) + x[i + 1] * f : x[i];
}

// decode/floor of the paired steps: step i's time over the read after it.
struct FloorSummary {
  int64_t steps = 0;
  double read_median = 0, read_min = 0, decode_median = 0;
  double ratio_median = 0, ratio_min = 0, ratio_q1 = 0, ratio_q3 = 0;
};
FloorSummary SummariseFloor(const GenStats& s, const FloorProbe& f) {
  FloorSummary r;
  const std::vector<double>& rd = f.read_ms();
  r.steps = static_cast<int64_t>(std::min(rd.size(), s.step_ms.size()));
  if (r.steps == 0) return r;
  std::vector<double> ratio;
  for (int64_t i = 0; i < r.steps; ++i) ratio.push_back(s.step_ms[i] / rd[i]);
  r.read_median = Quantile(rd, 0.5);
  r.read_min = *std::min_element(rd.begin(), rd.end());
  r.decode_median = Quantile(s.step_ms, 0.5);
  r.ratio_median = Quantile(ratio, 0.5);
  r.ratio_min = *std::min_element(ratio.begin(), ratio.end());
  r.ratio_q1 = Quantile(ratio, 0.25);
  r.ratio_q3 = Quantile(ratio, 0.75);
  return r;
}

const char* StopText(const std::string& s) {
  if (s == "eos") return "end of sequence (EOS)";
  if (s == "max_tokens") return "max tokens reached (--max-tokens)";
  if (s == "context_full") return "context full (--ctx-size)";
  if (s == "interrupted") return "interrupted (Ctrl-C)";
  return s.c_str();
}

// Prefill in chunks with a progress line on stderr once it runs past ~1 s
// ($ATTNFLOW_PROGRESS_AFTER_MS overrides the 1000 ms, for tests).
Status Prefill(DecoderModel& m, const std::vector<int32_t>& ids, bool progress, Tensor* logits) {
  constexpr size_t kChunk = 32;
  if (!progress || ids.size() <= kChunk) return m.Forward(ids, false, logits);
  double after_s = 1.0;
  if (const char* e = std::getenv("ATTNFLOW_PROGRESS_AFTER_MS"); e != nullptr && *e != 0)
    after_s = std::atof(e) / 1000.0;
  const auto t0 = std::chrono::steady_clock::now();
  bool shown = false;
  for (size_t done = 0; done < ids.size();) {
    const size_t n = std::min(kChunk, ids.size() - done);
    std::vector<int32_t> part(ids.begin() + static_cast<std::ptrdiff_t>(done),
                              ids.begin() + static_cast<std::ptrdiff_t>(done + n));
    ATTNFLOW_RETURN_IF_ERROR(m.Forward(part, false, logits));
    done += n;
    const double s = Ms(t0, std::chrono::steady_clock::now()) / 1000.0;
    if (s >= after_s && done < ids.size()) {
      const double rate = done / s;
      std::fprintf(stderr, "\r\033[K[prefill] %zu/%zu tokens · %.1f tokens/s · ETA %.1f s", done,
                   ids.size(), rate, (ids.size() - done) / rate);
      std::fflush(stderr);
      shown = true;
    }
  }
  if (shown) std::fprintf(stderr, "\r\033[K");
  return Status::Ok();
}

// Prefills `new_ids` on top of the cache, then samples up to max_tokens,
// streaming text. Appends every token fed to the cache to *fed.
// floor (may be null): measured after every decode step, outside its time.
Status Generate(Loaded& L, const std::vector<int32_t>& new_ids, int64_t max_tokens,
                bool ignore_eos, bool progress, bool stream, Sampler& sampler,
                std::vector<int32_t>* fed, std::vector<int32_t>* generated, GenStats* stats,
                FloorProbe* floor = nullptr) {
  DecoderModel& m = *L.model;
  const Tokenizer& tok = *L.tok;
  Utf8Stream out(stream);
  Tensor logits;
  auto t0 = std::chrono::steady_clock::now();
  ATTNFLOW_RETURN_IF_ERROR(Prefill(m, new_ids, progress, &logits));
  auto t1 = std::chrono::steady_clock::now();
  fed->insert(fed->end(), new_ids.begin(), new_ids.end());
  stats->prompt_tokens = static_cast<int64_t>(new_ids.size());
  stats->prefill_ms = Ms(t0, t1);
  stats->stop = "max_tokens";
  for (int64_t i = 0;; ++i) {
    if (g_interrupted) {
      stats->stop = "interrupted";
      break;
    }
    if (i == max_tokens) break;
    Result<int32_t> next = sampler.Sample(logits.data<float>(), logits.numel());
    if (!next.ok()) return next.status();
    const int32_t id = *next;
    generated->push_back(id);
    ++stats->generated;
    if (id == tok.EosId() && !ignore_eos) {
      stats->stop = "eos";
      break;
    }
    out.Write(tok.TokenBytes(id));
    if (i + 1 == max_tokens) break;
    if (m.CacheLength() >= L.ctx) {  // no room to feed this token back
      stats->stop = "context_full";
      break;
    }
    auto a = std::chrono::steady_clock::now();
    ATTNFLOW_RETURN_IF_ERROR(m.Forward({id}, false, &logits));
    auto b = std::chrono::steady_clock::now();
    fed->push_back(id);
    stats->decode_ms += Ms(a, b);
    stats->step_ms.push_back(Ms(a, b));
    ++stats->decode_steps;
    if (floor != nullptr) floor->Measure();
  }
  out.Flush();
  return Status::Ok();
}

void ReportStats(const GenStats& s) {
  std::fprintf(stderr, "[prefill] %s in %.1f ms: %.1f tokens/s\n",
               Count(s.prompt_tokens, "token").c_str(), s.prefill_ms,
               s.prefill_ms > 0 ? 1000.0 * s.prompt_tokens / s.prefill_ms : 0.0);
  std::fprintf(stderr, "[decode] %s generated, %s: %.2f ms/token\n",
               Count(s.generated, "token").c_str(), Count(s.decode_steps, "decode step").c_str(),
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
  int64_t truncated = 0;
  const int64_t n = static_cast<int64_t>(ids->size());
  if (n >= L.ctx) {  // no room for a single new token
    if (!a.truncate) {
      PrintError("generate", "the prompt is " + std::to_string(n) +
                                 " tokens, the context holds " + std::to_string(L.ctx) +
                                 " (--ctx-size): no room to generate; shorten it, raise "
                                 "--ctx-size or pass --truncate to drop tokens from its left");
      return kExitUsage;
    }
    const int64_t reserve = std::max<int64_t>(1, std::min(a.max_tokens, L.ctx / 2));
    const int64_t keep = L.ctx - reserve;
    truncated = n - keep;
    ids->erase(ids->begin(), ids->begin() + truncated);
    PrintWarning("generate", "--truncate: dropped the first " + std::to_string(truncated) + " of " +
                                 std::to_string(n) + " prompt tokens (kept the last " +
                                 std::to_string(keep) + " so that " + std::to_string(reserve) +
                                 " new token(s) fit in the context of " + std::to_string(L.ctx) + ")");
  }
  std::unique_ptr<FloorProbe> floor;
  if (a.floor_bytes > 0) {
    Result<std::unique_ptr<FloorProbe>> f = FloorProbe::Make(a.floor_bytes, L.model->Pool());
    if (!f.ok()) {
      PrintError("generate", f.status().message());
      return kExitUsage;
    }
    floor = std::move(f).value();
  }
  InstallSigint();
  Sampler sampler(a.sampling);
  std::vector<int32_t> fed, gen;
  GenStats stats;
  const bool progress = !a.quiet && StderrIsTerminal();
  Status st = Generate(L, *ids, a.max_tokens, a.ignore_eos, progress, !a.json, sampler, &fed,
                       &gen, &stats, floor.get());
  if (!st.ok()) {
    PrintError("generate", st.message());
    return kExitUsage;
  }
  if (a.json) {
    std::vector<int32_t> text_ids = gen;
    if (stats.stop == "eos" && !text_ids.empty()) text_ids.pop_back();
    std::string out_text;
    for (int32_t id : text_ids) out_text += L.tok->TokenBytes(id);
    nlohmann::json j = {
        {"schema", "attnflow-generate/1"},
        {"model", L.display},
        {"prompt_tokens", static_cast<int64_t>(ids->size())},
        {"truncated_prompt_tokens", truncated},
        {"ctx_size", L.ctx},
        {"generated_tokens", stats.generated},
        {"token_ids", gen},
        {"text", out_text},
        {"stop_reason", stats.stop},
        {"prefill_ms", stats.prefill_ms},
        {"decode_ms_per_token", stats.decode_steps > 0 ? stats.decode_ms / stats.decode_steps : 0.0},
    };
    if (floor != nullptr) {
      const FloorSummary f = SummariseFloor(stats, *floor);
      j["floor"] = {{"bytes", floor->bytes()},
                    {"steps", f.steps},
                    {"read_ms_median", f.read_median},
                    {"read_ms_min", f.read_min},
                    {"decode_ms_median", f.decode_median},
                    {"decode_over_floor_median", f.ratio_median},
                    {"decode_over_floor_min", f.ratio_min},
                    {"decode_over_floor_q1", f.ratio_q1},
                    {"decode_over_floor_q3", f.ratio_q3}};
    }
    std::printf("%s\n", DumpJson(j).c_str());
  } else {
    std::printf("\n");
  }
  std::fflush(stdout);
  std::fprintf(stderr, "[stop] %s after %s\n", StopText(stats.stop),
               Count(stats.generated, "token").c_str());
  if (!a.quiet) ReportStats(stats);
  if (!a.quiet && floor != nullptr) {
    const FloorSummary f = SummariseFloor(stats, *floor);
    if (f.steps == 0) {
      std::fprintf(stderr, "[floor] no decode step ran: nothing to compare\n");
    } else {
      std::fprintf(stderr,
                   "[floor] %lld bytes read after each of %lld decode steps (same threads): "
                   "read median %.3f ms, min %.3f; decode/floor per step: median %.3f, min %.3f, "
                   "quartiles %.3f-%.3f\n",
                   static_cast<long long>(floor->bytes()), static_cast<long long>(f.steps),
                   f.read_median, f.read_min, f.ratio_median, f.ratio_min, f.ratio_q1, f.ratio_q3);
    }
  }
  return kExitOk;
}

// ---- chat -------------------------------------------------------------------

// One line of input. Returns false at end of input; *interrupted when Ctrl-C
// ended the read.
class LineReader {
 public:
  explicit LineReader(bool edit) : edit_(edit) {}
  bool Read(const char* prompt, std::string* line, bool* interrupted) {
    *interrupted = false;
    g_interrupted = 0;
#ifdef ATTNFLOW_HAVE_LIBEDIT
    if (edit_) {
      char* s = ::readline(prompt);
      if (g_interrupted) {
        std::free(s);
        *interrupted = true;
        return true;
      }
      if (s == nullptr) return false;
      *line = s;
      if (!line->empty()) ::add_history(s);
      std::free(s);
      return true;
    }
#endif
    std::fputs(prompt, stderr);
    std::fflush(stderr);
    line->clear();
    for (;;) {
      char buf[1];
      const ssize_t r = ::read(STDIN_FILENO, buf, 1);
      if (r < 0 && errno == EINTR) {
        if (g_interrupted) {
          *interrupted = true;
          return true;
        }
        continue;
      }
      if (r <= 0) return !line->empty();
      if (buf[0] == '\n') return true;
      *line += buf[0];
    }
  }

 private:
  bool edit_;
};

const char* kChatHelp =
    "commands (never sent to the model):\n"
    "  /help          this list\n"
    "  /reset         forget the conversation (keeps the system message)\n"
    "  /system TEXT   set the system message and reset\n"
    "  /stats         toggle the per-turn timing lines\n"
    "  /exit, /quit   leave (Ctrl-D too)\n"
    "Ctrl-C stops a reply; Ctrl-C at an empty prompt twice in a row exits.\n";

int RunChat(const GenArgs& a) {
  Loaded L;
  if (int rc = LoadFor("chat", a, &L); rc != kExitOk) return rc;
  InstallSigint();
  std::string system = a.system;
  std::vector<std::pair<std::string, std::string>> turns;  // user/assistant, oldest first
  Sampler sampler(a.sampling);
  std::vector<int32_t> fed;  // ids in the KV cache, in order
  bool stats_on = a.stats;
  const bool tty = ::isatty(STDIN_FILENO) == 1;
  LineReader reader(tty);
  std::fprintf(stderr, "attnflow chat: %s · context %lld tokens — /help for commands, /exit or Ctrl-D to quit\n",
               EscapeLine(L.display).c_str(), static_cast<long long>(L.ctx));
  const int64_t reserve = std::max<int64_t>(1, std::min(a.max_tokens, L.ctx / 2));
  bool last_was_interrupt = false;
  std::string line;
  for (;;) {
    bool interrupted = false;
    if (!reader.Read("> ", &line, &interrupted)) {
      std::fprintf(stderr, "\n");
      break;
    }
    if (interrupted) {
      if (last_was_interrupt) {
        std::fprintf(stderr, "\n");
        break;
      }
      std::fprintf(stderr, "\n(Ctrl-C again or Ctrl-D to exit)\n");
      last_was_interrupt = true;
      continue;
    }
    last_was_interrupt = false;
    if (line.empty()) continue;
    if (line[0] == '/') {
      const std::string cmd = line.substr(0, line.find(' '));
      if (cmd == "/exit" || cmd == "/quit") break;
      if (cmd == "/help") {
        std::fputs(kChatHelp, stderr);
      } else if (cmd == "/reset") {
        turns.clear();
        std::fprintf(stderr, "[conversation reset]\n");
      } else if (cmd == "/system") {
        system = line.size() > 8 ? line.substr(8) : "";
        turns.clear();
        std::fprintf(stderr, "[system message %s; conversation reset]\n",
                     system.empty() ? "cleared" : "set");
      } else if (cmd == "/stats") {
        stats_on = !stats_on;
        std::fprintf(stderr, "[timing lines %s]\n", stats_on ? "on" : "off");
      } else {
        std::fprintf(stderr, "unknown command %s (/help lists them; not sent to the model)\n",
                     EscapeText(cmd).c_str());
      }
      continue;
    }
    turns.emplace_back("user", line);
    // Render, dropping the oldest turns while the prompt leaves no room for
    // `reserve` new tokens.
    std::vector<int32_t> ids;
    int dropped = 0;
    bool fits = false;
    std::string err;
    while (!turns.empty()) {
      std::vector<std::pair<std::string, std::string>> msgs;
      if (!system.empty()) msgs.emplace_back("system", system);
      msgs.insert(msgs.end(), turns.begin(), turns.end());
      Result<std::string> r = L.model->ApplyChatTemplate(msgs, true);
      if (!r.ok()) { err = r.status().message(); break; }
      Result<std::vector<int32_t>> e = L.tok->Encode(*r, true);
      if (!e.ok()) { err = e.status().message(); break; }
      if (static_cast<int64_t>(e->size()) + reserve <= L.ctx) {
        ids = std::move(e).value();
        fits = true;
        break;
      }
      if (turns.size() == 1) break;  // the new message alone does not fit
      turns.erase(turns.begin(), turns.begin() + std::min<size_t>(2, turns.size() - 1));
      dropped += 1;
    }
    if (!err.empty()) {
      PrintError("chat", err);
      turns.pop_back();
      continue;
    }
    if (!fits) {
      PrintError("chat", "that message does not fit in the context of " + std::to_string(L.ctx) +
                             " tokens (with room for " + std::to_string(reserve) +
                             " reply tokens); it was not sent");
      turns.pop_back();
      continue;
    }
    if (dropped > 0)
      std::fprintf(stderr, "[context: dropped the %d oldest exchange%s to fit %lld tokens; the system message is kept]\n",
                   dropped, dropped == 1 ? "" : "s", static_cast<long long>(L.ctx));
    // Reuse the cache when it holds a prefix of the new rendering.
    std::vector<int32_t> suffix;
    if (ids.size() > fed.size() && std::equal(fed.begin(), fed.end(), ids.begin())) {
      suffix.assign(ids.begin() + static_cast<std::ptrdiff_t>(fed.size()), ids.end());
    } else {
      L.model->Reset();
      fed.clear();
      suffix = ids;
    }
    std::vector<int32_t> gen;
    GenStats stats;
    g_interrupted = 0;
    Status st = Generate(L, suffix, a.max_tokens, false, !a.quiet && StderrIsTerminal(), true,
                         sampler, &fed, &gen, &stats);
    if (!st.ok()) {
      PrintError("chat", st.message());
      L.model->Reset();
      fed.clear();
      turns.pop_back();
      continue;
    }
    std::printf("\n");
    std::fflush(stdout);
    if (stats.stop != "eos") std::fprintf(stderr, "[stop] %s\n", StopText(stats.stop));
    if (stats.stop == "interrupted") last_was_interrupt = true;
    g_interrupted = 0;
    if (stats_on) ReportStats(stats);
    if (!gen.empty() && gen.back() == L.tok->EosId()) gen.pop_back();
    Result<std::string> reply = L.tok->Decode(gen, true);
    turns.emplace_back("assistant", reply.ok() ? *reply : "");
  }
  return kExitOk;
}

void AddCommon(CLI::App& sub, GenArgs& a) {
  sub.add_option("--model", a.model,
                 "smollm2 (default; found by `attnflow models`) or a GGUF file");
  sub.add_option("--max-tokens", a.max_tokens, "Most tokens to generate (per reply)")
      ->check(InRange(int64_t{0}, int64_t{1} << 20));
  sub.add_option("--ctx-size", a.ctx_size, "Context in tokens, prompt + reply (0 = the model's)")
      ->check(InRange(int64_t{0}, int64_t{1} << 24));
  sub.add_option("--temperature", a.sampling.temperature, "0 = greedy")->check(InRange(0.0, 100.0));
  sub.add_option("--top-k", a.sampling.top_k, "Keep the k most likely tokens (0 = all)")
      ->check(InRange(int64_t{0}, int64_t{1} << 30));
  sub.add_option("--top-p", a.sampling.top_p, "Nucleus mass in (0, 1]")->check(InRange(0.0, 1.0));
  sub.add_option("--seed", a.sampling.seed, "RNG seed for sampling");
  sub.add_option("--kv-dtype", a.kv_dtype, "KV cache dtype: f32 | f16 | bf16")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}));
  sub.add_option("--threads", a.threads, "Worker threads (0 = ATTNFLOW_NUM_THREADS or all cores)")
      ->check(InRange(0, 1024));
  sub.add_option("--system", a.system, "System message for --chat / chat");
  sub.add_flag("--quiet", a.quiet, "No progress line and no timing lines");
  sub.add_flag("--fast-dot", a.fast_dot,
               "Decode with int8 activations and integer dot products (faster, NOT exact; "
               "docs/models-smollm2.md)");
}

std::function<int()> Bind(CLI::App& sub, std::shared_ptr<GenArgs> a, int (*run)(const GenArgs&)) {
  CLI::Option* k = sub.get_option("--top-k");
  CLI::Option* p = sub.get_option("--top-p");
  return [a, k, p, run] {
    a->top_k_set = k->count() > 0;
    a->top_p_set = p->count() > 0;
    return run(*a);
  };
}

}  // namespace

ATTNFLOW_REGISTER_COMMAND(
    generate, "generate",
    "Generate text from a GGUF Llama-family model (streams tokens; says why it stopped; "
    "reports prefill tokens/s and decode ms/token)",
    [](CLI::App& sub) -> std::function<int()> {
      auto a = std::make_shared<GenArgs>();
      AddCommon(sub, *a);
      sub.add_option("--prompt", a->prompt, "Prompt text")->required();
      sub.add_flag("--chat", a->chat, "Wrap the prompt as a user message with the model's chat template");
      sub.add_flag("--ignore-eos", a->ignore_eos, "Do not stop at the end-of-sequence token (benchmarks)");
      sub.add_option("--floor-bytes", a->floor_bytes,
                     "Benchmarks: after every decode step, time a plain read of this many bytes "
                     "(the step's weight-streaming floor) on the same threads; prints decode/floor "
                     "per step ([floor] line, \"floor\" in --json)")
          ->check(InRange(int64_t{1}, int64_t{1} << 40))
          ->default_str("");  // off unless given
      sub.add_flag("--truncate", a->truncate,
                   "Drop prompt tokens from the left when the prompt does not fit the context");
      sub.add_flag("--json", a->json,
                   "Print one JSON object (schema attnflow-generate/1, docs/cli.md) instead of the text");
      return Bind(sub, a, RunGenerate);
    });

ATTNFLOW_REGISTER_COMMAND(
    chat, "chat",
    "Interactive chat with a GGUF model using its chat template (/help for commands; Ctrl-D exits)",
    [](CLI::App& sub) -> std::function<int()> {
      auto a = std::make_shared<GenArgs>();
      a->max_tokens = 256;
      AddCommon(sub, *a);
      sub.add_flag("--stats", a->stats, "Print prefill/decode timing after each reply");
      return Bind(sub, a, RunChat);
    });

}  // namespace attnflow::cli
