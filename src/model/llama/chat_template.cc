// chat_template.cc — the Jinja2 subset interpreter (see chat_template.h).
//
// Stages: Lex() splits the source into text / {{ }} / {% %} segments applying
// whitespace control, trim_blocks and lstrip_blocks; the statement parser
// builds a tree of TemplateNode; expressions are parsed by recursive descent
// with Jinja's precedence (or < and < not < compare < + - < ~ < unary <
// postfix) into Expr trees; Render() walks the tree. Errors carry the byte
// offset of the construct in the template source. No exception escapes.
#include "model/llama/chat_template.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <new>
#include <stdexcept>

namespace attnflow::llama {

// ---- values ------------------------------------------------------------------

struct Value {
  enum Kind { kUndefined, kNone, kBool, kInt, kString, kList, kMap } kind = kUndefined;
  bool b = false;
  int64_t i = 0;
  std::string s;
  std::shared_ptr<std::vector<Value>> list;
  std::shared_ptr<std::map<std::string, Value>> map;

  static Value Str(std::string v) { Value x; x.kind = kString; x.s = std::move(v); return x; }
  static Value Int(int64_t v) { Value x; x.kind = kInt; x.i = v; return x; }
  static Value Bool(bool v) { Value x; x.kind = kBool; x.b = v; return x; }
  static Value None() { Value x; x.kind = kNone; return x; }

  bool Truthy() const {
    switch (kind) {
      case kUndefined: case kNone: return false;
      case kBool: return b;
      case kInt: return i != 0;
      case kString: return !s.empty();
      case kList: return list && !list->empty();
      case kMap: return map && !map->empty();
    }
    return false;
  }
};

namespace {

const char* KindName(Value::Kind k) {
  switch (k) {
    case Value::kUndefined: return "undefined";
    case Value::kNone: return "none";
    case Value::kBool: return "bool";
    case Value::kInt: return "int";
    case Value::kString: return "string";
    case Value::kList: return "list";
    case Value::kMap: return "dict";
  }
  return "?";
}

bool Equal(const Value& a, const Value& b) {
  if ((a.kind == Value::kUndefined || a.kind == Value::kNone) &&
      (b.kind == Value::kUndefined || b.kind == Value::kNone)) {
    return a.kind == b.kind;
  }
  if (a.kind == Value::kString && b.kind == Value::kString) return a.s == b.s;
  if ((a.kind == Value::kInt || a.kind == Value::kBool) &&
      (b.kind == Value::kInt || b.kind == Value::kBool)) {
    return (a.kind == Value::kInt ? a.i : a.b) == (b.kind == Value::kInt ? b.i : b.b);
  }
  return false;
}

}  // namespace

// ---- expressions ---------------------------------------------------------------

struct Expr {
  enum Kind {
    kLiteral, kName, kAttr, kIndex, kCall, kMethod, kFilter, kTest,
    kNot, kAnd, kOr, kBinary, kNeg
  } kind = kLiteral;
  Value literal;
  std::string name;  // name / attr / filter / test / method / operator
  bool negate = false;  // `is not`, `not in`
  std::vector<std::unique_ptr<Expr>> args;
  size_t offset = 0;
  int depth = 1;  // height of this subtree (bounded by kMaxExprDepth)
};
using ExprPtr = std::unique_ptr<Expr>;

// Limits that keep parsing, evaluation and destruction (all recursive) far
// from the stack's end on hostile templates.
constexpr int kMaxExprDepth = 200;
constexpr int kMaxBlockDepth = 64;

struct TemplateNode {
  enum Kind { kText, kOutput, kIf, kFor, kSet } kind = kText;
  std::string text;
  ExprPtr expr;  // output / set value / for iterable
  std::string var;  // for / set target
  std::vector<std::pair<ExprPtr, std::vector<TemplateNode>>> branches;  // if (null cond = else)
  std::vector<TemplateNode> body;  // for
  size_t offset = 0;
};

namespace {

// ---- lexer of expressions ----------------------------------------------------

struct Tok {
  enum Kind { kEnd, kName, kString, kInt, kOp } kind = kEnd;
  std::string text;
  int64_t value = 0;
  size_t offset = 0;
};

Status Unsupported(const std::string& what, size_t off) {
  return Unimplemented("chat template: unsupported " + what + " at offset " + std::to_string(off) +
                       " (attnflow implements a Jinja subset; see chat_template.h)");
}
Status Syntax(const std::string& what, size_t off) {
  return InvalidArgument("chat template: " + what + " at offset " + std::to_string(off));
}

Status LexExpr(const std::string& src, size_t base, std::vector<Tok>* out) {
  size_t i = 0;
  const size_t n = src.size();
  while (i < n) {
    const char c = src[i];
    if (std::isspace(static_cast<unsigned char>(c))) { ++i; continue; }
    Tok t;
    t.offset = base + i;
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < n && (std::isalnum(static_cast<unsigned char>(src[j])) || src[j] == '_')) ++j;
      t.kind = Tok::kName;
      t.text = src.substr(i, j - i);
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      int64_t v = 0;
      while (j < n && std::isdigit(static_cast<unsigned char>(src[j]))) {
        if (v > (INT64_MAX - 9) / 10) return Syntax("integer literal too large", base + i);
        v = v * 10 + (src[j] - '0');
        ++j;
      }
      if (j < n && src[j] == '.') return Unsupported("float literal", base + i);
      t.kind = Tok::kInt;
      t.value = v;
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string s;
      size_t j = i + 1;
      bool closed = false;
      while (j < n) {
        if (src[j] == '\\' && j + 1 < n) {
          const char e = src[j + 1];
          switch (e) {
            case 'n': s += '\n'; break;
            case 't': s += '\t'; break;
            case 'r': s += '\r'; break;
            case '\\': s += '\\'; break;
            case '\'': s += '\''; break;
            case '"': s += '"'; break;
            default: s += '\\'; s += e; break;
          }
          j += 2;
          continue;
        }
        if (src[j] == c) { closed = true; ++j; break; }
        s += src[j++];
      }
      if (!closed) return Syntax("unterminated string literal", base + i);
      t.kind = Tok::kString;
      t.text = std::move(s);
      i = j;
    } else {
      static const char* two[] = {"==", "!=", "<=", ">="};
      t.kind = Tok::kOp;
      bool matched = false;
      for (const char* op : two) {
        if (src.compare(i, 2, op) == 0) { t.text = op; i += 2; matched = true; break; }
      }
      if (!matched) {
        if (std::string("+-~()[].,|<>=").find(c) == std::string::npos) {
          return Unsupported(std::string("operator '") + c + "'", base + i);
        }
        t.text = std::string(1, c);
        ++i;
      }
    }
    out->push_back(std::move(t));
  }
  Tok end;
  end.offset = base + n;
  out->push_back(end);
  return Status::Ok();
}

// ---- expression parser ------------------------------------------------------------

class ExprParser {
 public:
  explicit ExprParser(std::vector<Tok> toks) : t_(std::move(toks)) {}

  Status ParseAll(ExprPtr* out) {
    ATTNFLOW_RETURN_IF_ERROR(ParseOr(out));
    ATTNFLOW_RETURN_IF_ERROR(CheckDepth());
    if (Peek().kind != Tok::kEnd) return Syntax("unexpected '" + Peek().text + "'", Peek().offset);
    return Status::Ok();
  }
  const Tok& Peek(size_t k = 0) const { return t_[std::min(p_ + k, t_.size() - 1)]; }
  bool IsOp(const char* op, size_t k = 0) const { return Peek(k).kind == Tok::kOp && Peek(k).text == op; }
  bool IsName(const char* n, size_t k = 0) const { return Peek(k).kind == Tok::kName && Peek(k).text == n; }
  Tok Next() { Tok t = Peek(); if (p_ < t_.size() - 1) ++p_; return t; }

  // Counts nested parse calls; Enter() fails past kMaxExprDepth.
  struct Guard {
    explicit Guard(int* d) : d_(d) { ++*d_; }
    ~Guard() { --*d_; }
    int* d_;
  };
  Status CheckDepth() const {
    if (depth_ > kMaxExprDepth || height_error_) {
      return Syntax("expression nested deeper than " + std::to_string(kMaxExprDepth), Peek().offset);
    }
    return Status::Ok();
  }

  // operand (word operand)*: a left-associative chain of one keyword operator.
  Status ParseChain(ExprPtr* out, const char* word, Expr::Kind kind,
                    Status (ExprParser::*operand)(ExprPtr*)) {
    ATTNFLOW_RETURN_IF_ERROR((this->*operand)(out));
    while (IsName(word)) {
      ATTNFLOW_RETURN_IF_ERROR(CheckDepth());
      const size_t off = Next().offset;
      ExprPtr r;
      ATTNFLOW_RETURN_IF_ERROR((this->*operand)(&r));
      *out = Make(kind, off, std::move(*out), std::move(r));
    }
    return Status::Ok();
  }
  Status ParseOr(ExprPtr* out) {
    Guard g(&depth_);
    ATTNFLOW_RETURN_IF_ERROR(CheckDepth());
    return ParseChain(out, "or", Expr::kOr, &ExprParser::ParseAnd);
  }
  Status ParseAnd(ExprPtr* out) {
    return ParseChain(out, "and", Expr::kAnd, &ExprParser::ParseNot);
  }
  // A prefix operator (`not x`, `-x`) when `present`: kind(self(...));
  // otherwise the next level down.
  using Level = Status (ExprParser::*)(ExprPtr*);
  Status ParsePrefix(ExprPtr* out, bool present, Expr::Kind kind, Level self, Level next) {
    if (!present) return (this->*next)(out);
    Guard g(&depth_);
    ATTNFLOW_RETURN_IF_ERROR(CheckDepth());
    const size_t off = Next().offset;
    ExprPtr e;
    ATTNFLOW_RETURN_IF_ERROR((this->*self)(&e));
    *out = Make(kind, off, std::move(e));
    return Status::Ok();
  }
  Status ParseNot(ExprPtr* out) {
    return ParsePrefix(out, IsName("not"), Expr::kNot, &ExprParser::ParseNot, &ExprParser::ParseCompare);
  }
  Status ParseCompare(ExprPtr* out) {
    ATTNFLOW_RETURN_IF_ERROR(ParseAdd(out));
    for (;;) {
      ATTNFLOW_RETURN_IF_ERROR(CheckDepth());
      std::string op;
      bool neg = false;
      if (IsOp("==") || IsOp("!=") || IsOp("<") || IsOp(">") || IsOp("<=") || IsOp(">=")) {
        op = Peek().text;
      } else if (IsName("in")) {
        op = "in";
      } else if (IsName("not") && IsName("in", 1)) {
        op = "in";
        neg = true;
        Next();
      } else if (IsName("is")) {
        const size_t off = Next().offset;
        bool tneg = false;
        if (IsName("not")) { Next(); tneg = true; }
        const Tok name = Next();
        if (name.kind != Tok::kName) return Syntax("expected a test name after 'is'", name.offset);
        if (name.text != "defined" && name.text != "undefined" && name.text != "none" &&
            name.text != "string") {
          return Unsupported("test 'is " + name.text + "'", name.offset);
        }
        ExprPtr e = Make(Expr::kTest, off, std::move(*out));
        e->name = name.text;
        e->negate = tneg;
        *out = std::move(e);
        continue;
      } else {
        return Status::Ok();
      }
      const size_t off = Next().offset;
      ExprPtr r;
      ATTNFLOW_RETURN_IF_ERROR(ParseAdd(&r));
      ExprPtr e = Make(Expr::kBinary, off, std::move(*out), std::move(r));
      e->name = op;
      e->negate = neg;
      *out = std::move(e);
    }
  }
  Status ParseAdd(ExprPtr* out) {
    ATTNFLOW_RETURN_IF_ERROR(ParseConcat(out));
    while (IsOp("+") || IsOp("-")) {
      ATTNFLOW_RETURN_IF_ERROR(CheckDepth());
      const Tok op = Next();
      ExprPtr r;
      ATTNFLOW_RETURN_IF_ERROR(ParseConcat(&r));
      ExprPtr e = Make(Expr::kBinary, op.offset, std::move(*out), std::move(r));
      e->name = op.text;
      *out = std::move(e);
    }
    return Status::Ok();
  }
  Status ParseConcat(ExprPtr* out) {
    ATTNFLOW_RETURN_IF_ERROR(ParseUnary(out));
    while (IsOp("~")) {
      ATTNFLOW_RETURN_IF_ERROR(CheckDepth());
      const Tok op = Next();
      ExprPtr r;
      ATTNFLOW_RETURN_IF_ERROR(ParseUnary(&r));
      ExprPtr e = Make(Expr::kBinary, op.offset, std::move(*out), std::move(r));
      e->name = "~";
      *out = std::move(e);
    }
    return Status::Ok();
  }
  Status ParseUnary(ExprPtr* out) {
    return ParsePrefix(out, IsOp("-"), Expr::kNeg, &ExprParser::ParseUnary, &ExprParser::ParsePostfix);
  }
  Status ParsePostfix(ExprPtr* out) {
    ATTNFLOW_RETURN_IF_ERROR(ParsePrimary(out));
    for (;;) {
      ATTNFLOW_RETURN_IF_ERROR(CheckDepth());
      if (IsOp(".")) {
        Next();
        const Tok name = Next();
        if (name.kind != Tok::kName) return Syntax("expected a name after '.'", name.offset);
        if (IsOp("(")) {
          Next();
          if (!IsOp(")")) return Unsupported("method arguments", Peek().offset);
          Next();
          if (name.text != "strip" && name.text != "lstrip" && name.text != "rstrip") {
            return Unsupported("method '" + name.text + "()'", name.offset);
          }
          ExprPtr e = Make(Expr::kMethod, name.offset, std::move(*out));
          e->name = name.text;
          *out = std::move(e);
        } else {
          ExprPtr e = Make(Expr::kAttr, name.offset, std::move(*out));
          e->name = name.text;
          *out = std::move(e);
        }
      } else if (IsOp("[")) {
        const size_t off = Next().offset;
        ExprPtr idx;
        ATTNFLOW_RETURN_IF_ERROR(ParseOr(&idx));
        if (!IsOp("]")) return IsOp(":") ? Unsupported("slice", Peek().offset)
                                         : Syntax("expected ']'", Peek().offset);
        Next();
        *out = Make(Expr::kIndex, off, std::move(*out), std::move(idx));
      } else if (IsOp("|")) {
        Next();
        const Tok name = Next();
        if (name.kind != Tok::kName) return Syntax("expected a filter name after '|'", name.offset);
        if (name.text != "trim" && name.text != "length" && name.text != "upper" &&
            name.text != "lower") {
          return Unsupported("filter '|" + name.text + "'", name.offset);
        }
        if (IsOp("(")) return Unsupported("filter arguments", Peek().offset);
        ExprPtr e = Make(Expr::kFilter, name.offset, std::move(*out));
        e->name = name.text;
        *out = std::move(e);
      } else if (IsOp("(")) {
        return Unsupported("call", Peek().offset);
      } else {
        return Status::Ok();
      }
    }
  }
  Status ParsePrimary(ExprPtr* out) {
    const Tok t = Next();
    switch (t.kind) {
      case Tok::kString:
        *out = Lit(Value::Str(t.text), t.offset);
        return Status::Ok();
      case Tok::kInt:
        *out = Lit(Value::Int(t.value), t.offset);
        return Status::Ok();
      case Tok::kName: {
        if (t.text == "true" || t.text == "True") { *out = Lit(Value::Bool(true), t.offset); return Status::Ok(); }
        if (t.text == "false" || t.text == "False") { *out = Lit(Value::Bool(false), t.offset); return Status::Ok(); }
        if (t.text == "none" || t.text == "None") { *out = Lit(Value::None(), t.offset); return Status::Ok(); }
        if (t.text == "raise_exception" && IsOp("(")) {
          Next();
          ExprPtr msg;
          ATTNFLOW_RETURN_IF_ERROR(ParseOr(&msg));
          if (!IsOp(")")) return Syntax("expected ')'", Peek().offset);
          Next();
          *out = Make(Expr::kCall, t.offset, std::move(msg));
          (*out)->name = t.text;
          return Status::Ok();
        }
        auto e = std::make_unique<Expr>();
        e->kind = Expr::kName;
        e->name = t.text;
        e->offset = t.offset;
        *out = std::move(e);
        return Status::Ok();
      }
      case Tok::kOp:
        if (t.text == "(") {
          ATTNFLOW_RETURN_IF_ERROR(ParseOr(out));
          if (!IsOp(")")) return Syntax("expected ')'", Peek().offset);
          Next();
          return Status::Ok();
        }
        if (t.text == "[" || t.text == "{") return Unsupported("list/dict literal", t.offset);
        return Syntax("unexpected '" + t.text + "'", t.offset);
      case Tok::kEnd:
        return Syntax("unexpected end of expression", t.offset);
    }
    return Syntax("bad expression", t.offset);
  }

 private:
  static ExprPtr Lit(Value v, size_t off) {
    auto e = std::make_unique<Expr>();
    e->kind = Expr::kLiteral;
    e->literal = std::move(v);
    e->offset = off;
    return e;
  }
  ExprPtr Make(Expr::Kind k, size_t off, ExprPtr a, ExprPtr b = nullptr) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->offset = off;
    e->depth = 1 + std::max(a->depth, b ? b->depth : 0);
    e->args.push_back(std::move(a));
    if (b) e->args.push_back(std::move(b));
    if (e->depth > kMaxExprDepth) height_error_ = true;
    return e;
  }
  std::vector<Tok> t_;
  size_t p_ = 0;
  int depth_ = 0;
  bool height_error_ = false;  // a left-deep chain (a.b.c..., a+b+c...) got too tall
};

Status ParseExpr(const std::string& src, size_t base, ExprPtr* out) {
  std::vector<Tok> toks;
  ATTNFLOW_RETURN_IF_ERROR(LexExpr(src, base, &toks));
  ExprParser p(std::move(toks));
  return p.ParseAll(out);
}

// ---- template lexer ---------------------------------------------------------------

struct Segment {
  enum Kind { kText, kOutput, kStmt } kind;
  std::string body;
  size_t offset;  // of the body in the source
};

Status LexTemplate(const std::string& src, std::vector<Segment>* out) {
  size_t i = 0;
  const size_t n = src.size();
  std::string text;
  size_t text_off = 0;
  bool trim_next_ws = false;   // from a "-%}" / "-}}" / "-#}"
  bool trim_next_nl = false;   // trim_blocks after "%}" / "#}"
  while (i < n) {
    const size_t open = src.find('{', i);
    size_t tag = std::string::npos;
    for (size_t k = open; k != std::string::npos && k + 1 < n; k = src.find('{', k + 1)) {
      const char c = src[k + 1];
      if (c == '{' || c == '%' || c == '#') { tag = k; break; }
    }
    std::string chunk = src.substr(i, (tag == std::string::npos ? n : tag) - i);
    if (trim_next_ws) {
      size_t k = 0;
      while (k < chunk.size() && std::isspace(static_cast<unsigned char>(chunk[k]))) ++k;
      chunk.erase(0, k);
    } else if (trim_next_nl && !chunk.empty() && chunk[0] == '\n') {
      chunk.erase(0, 1);
    }
    trim_next_ws = trim_next_nl = false;
    if (tag == std::string::npos) {
      text += chunk;
      break;
    }
    const char kind = src[tag + 1];
    const bool minus_left = tag + 2 < n && src[tag + 2] == '-';
    const bool plus_left = tag + 2 < n && src[tag + 2] == '+';
    if (minus_left) {
      while (!chunk.empty() && std::isspace(static_cast<unsigned char>(chunk.back()))) chunk.pop_back();
    } else if ((kind == '%' || kind == '#') && !plus_left) {
      // lstrip_blocks: spaces/tabs between a line start and the tag, judged
      // on the source (a newline removed by trim_blocks still counts).
      size_t q = tag;
      while (q > i && (src[q - 1] == ' ' || src[q - 1] == '\t')) --q;
      const bool line_start = q == 0 || (q > i && src[q - 1] == '\n');
      if (line_start) chunk.erase(chunk.size() - std::min(chunk.size(), tag - q));
    }
    if (text.empty()) text_off = i;
    text += chunk;
    const char* close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    const size_t body_start = tag + 2 + ((minus_left || plus_left) ? 1 : 0);
    const size_t end = src.find(close, body_start);
    if (end == std::string::npos) {
      return Syntax(std::string("unterminated '{") + kind + "'", tag);
    }
    size_t body_end = end;
    bool minus_right = false;
    if (body_end > body_start && src[body_end - 1] == '-') {
      minus_right = true;
      --body_end;
    }
    if (!text.empty()) out->push_back({Segment::kText, text, text_off});
    text.clear();
    if (kind != '#') {
      out->push_back({kind == '{' ? Segment::kOutput : Segment::kStmt,
                      src.substr(body_start, body_end - body_start), body_start});
    }
    trim_next_ws = minus_right;
    trim_next_nl = kind != '{';
    i = end + 2;
  }
  if (!text.empty()) out->push_back({Segment::kText, text, text_off});
  return Status::Ok();
}

// ---- statement parser ---------------------------------------------------------------

std::string FirstWord(const std::string& s, size_t* rest) {
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  size_t j = i;
  while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
  *rest = j;
  return s.substr(i, j - i);
}

class StmtParser {
 public:
  explicit StmtParser(std::vector<Segment> segs) : s_(std::move(segs)) {}

  // Parses nodes until one of `stops` (statement keywords) or the end.
  Status ParseBlock(std::vector<TemplateNode>* out, const std::vector<std::string>& stops,
                    std::string* stop_found) {
    if (depth_ >= kMaxBlockDepth) {
      return Syntax("blocks nested deeper than " + std::to_string(kMaxBlockDepth),
                    p_ < s_.size() ? s_[p_].offset : 0);
    }
    ++depth_;
    Status st = ParseBlockImpl(out, stops, stop_found);
    --depth_;
    return st;
  }

  Status ParseBlockImpl(std::vector<TemplateNode>* out, const std::vector<std::string>& stops,
                        std::string* stop_found) {
    while (p_ < s_.size()) {
      const Segment& seg = s_[p_];
      if (seg.kind == Segment::kText) {
        TemplateNode n;
        n.kind = TemplateNode::kText;
        n.text = seg.body;
        n.offset = seg.offset;
        out->push_back(std::move(n));
        ++p_;
        continue;
      }
      if (seg.kind == Segment::kOutput) {
        TemplateNode n;
        n.kind = TemplateNode::kOutput;
        n.offset = seg.offset;
        ATTNFLOW_RETURN_IF_ERROR(ParseExpr(seg.body, seg.offset, &n.expr));
        out->push_back(std::move(n));
        ++p_;
        continue;
      }
      size_t rest = 0;
      const std::string kw = FirstWord(seg.body, &rest);
      for (const std::string& st : stops) {
        if (kw == st) {
          *stop_found = kw;
          return Status::Ok();
        }
      }
      ++p_;
      const std::string tail = seg.body.substr(rest);
      const size_t tail_off = seg.offset + rest;
      if (kw == "if") {
        TemplateNode n;
        n.kind = TemplateNode::kIf;
        n.offset = seg.offset;
        ExprPtr cond;
        ATTNFLOW_RETURN_IF_ERROR(ParseExpr(tail, tail_off, &cond));
        for (;;) {
          std::vector<TemplateNode> body;
          std::string stop;
          ATTNFLOW_RETURN_IF_ERROR(ParseBlock(&body, {"elif", "else", "endif"}, &stop));
          if (stop.empty()) return Syntax("'if' without 'endif'", n.offset);
          n.branches.emplace_back(std::move(cond), std::move(body));
          const Segment& at = s_[p_++];
          size_t r2 = 0;
          FirstWord(at.body, &r2);
          if (stop == "endif") break;
          if (stop == "elif") {
            ATTNFLOW_RETURN_IF_ERROR(ParseExpr(at.body.substr(r2), at.offset + r2, &cond));
          } else {  // else
            cond = nullptr;
            std::vector<TemplateNode> eb;
            std::string st2;
            ATTNFLOW_RETURN_IF_ERROR(ParseBlock(&eb, {"endif"}, &st2));
            if (st2.empty()) return Syntax("'else' without 'endif'", at.offset);
            ++p_;
            n.branches.emplace_back(nullptr, std::move(eb));
            break;
          }
        }
        out->push_back(std::move(n));
      } else if (kw == "for") {
        TemplateNode n;
        n.kind = TemplateNode::kFor;
        n.offset = seg.offset;
        size_t r2 = 0;
        n.var = FirstWord(tail, &r2);
        size_t r3 = 0;
        const std::string in = FirstWord(tail.substr(r2), &r3);
        if (n.var.empty() || in != "in") return Unsupported("for-loop form (only 'for x in expr')", seg.offset);
        const std::string iter = tail.substr(r2 + r3);
        if (iter.find(" if ") != std::string::npos || iter.find("recursive") != std::string::npos) {
          return Unsupported("for-loop filter / recursive loop", seg.offset);
        }
        ATTNFLOW_RETURN_IF_ERROR(ParseExpr(iter, tail_off + r2 + r3, &n.expr));
        std::string stop;
        ATTNFLOW_RETURN_IF_ERROR(ParseBlock(&n.body, {"endfor", "else"}, &stop));
        if (stop.empty()) return Syntax("'for' without 'endfor'", n.offset);
        if (stop == "else") return Unsupported("for-else", s_[p_].offset);
        ++p_;
        out->push_back(std::move(n));
      } else if (kw == "set") {
        TemplateNode n;
        n.kind = TemplateNode::kSet;
        n.offset = seg.offset;
        const size_t eq = tail.find('=');
        if (eq == std::string::npos) return Unsupported("block set", seg.offset);
        size_t r2 = 0;
        n.var = FirstWord(tail.substr(0, eq), &r2);
        if (n.var.empty() || tail.substr(0, eq).find('.') != std::string::npos) {
          return Unsupported("set target (only 'set name = expr')", seg.offset);
        }
        ATTNFLOW_RETURN_IF_ERROR(ParseExpr(tail.substr(eq + 1), tail_off + eq + 1, &n.expr));
        out->push_back(std::move(n));
      } else {
        return Unsupported("statement '{% " + kw + " %}'", seg.offset);
      }
    }
    stop_found->clear();
    return Status::Ok();
  }

  bool AtEnd() const { return p_ >= s_.size(); }
  size_t pos() const { return p_; }
  const Segment& seg() const { return s_[p_]; }

 private:
  std::vector<Segment> s_;
  size_t p_ = 0;
  int depth_ = 0;
};

// ---- evaluation -------------------------------------------------------------------

struct Scope {
  std::vector<std::map<std::string, Value>> frames;
  // The render budget (see ChatTemplate::Render): steps taken so far (node
  // visits and expression evaluations) and the byte limit for the output and
  // for every string value.
  mutable int64_t steps = 0;
  int64_t step_budget = 0;
  size_t byte_budget = 0;
  Status Step(size_t offset) const {
    if (++steps <= step_budget) return Status::Ok();
    return ResourceExhausted("chat template: rendering exceeded the step budget of " +
                             std::to_string(step_budget) + " steps at offset " +
                             std::to_string(offset) + " (loops nested over the messages?)");
  }
  // Work that is not one node visit costs steps too, so that the step budget
  // bounds the render time and not just the node visits: a loop iteration
  // (a fresh scope and the `loop` record) costs kIterationSteps, and every
  // kBytesPerStep bytes a step copies, produces or scans cost one more.
  static constexpr int64_t kIterationSteps = 4;
  static constexpr size_t kBytesPerStep = 64;
  Status Charge(int64_t units, size_t offset) const {
    steps += units - 1;
    return Step(offset);
  }
  Status ChargeBytes(size_t n, size_t offset) const {
    return Charge(1 + static_cast<int64_t>(n / kBytesPerStep), offset);
  }
  Status Bytes(size_t n, size_t offset, const char* what) const {
    if (n <= byte_budget) return Status::Ok();
    return ResourceExhausted("chat template: " + std::string(what) + " of " + std::to_string(n) +
                             " bytes exceeds the budget of " + std::to_string(byte_budget) +
                             " bytes at offset " + std::to_string(offset));
  }
  const Value* Lookup(const std::string& name) const {
    for (auto it = frames.rbegin(); it != frames.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return &f->second;
    }
    return nullptr;
  }
};

std::string ToText(const Value& v) {
  switch (v.kind) {
    case Value::kUndefined: return "";
    case Value::kNone: return "None";
    case Value::kBool: return v.b ? "True" : "False";
    case Value::kInt: return std::to_string(v.i);
    case Value::kString: return v.s;
    default: return "";
  }
}

std::string Strip(const std::string& s, bool left, bool right) {
  size_t a = 0, b = s.size();
  if (left) while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  if (right) while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

Status Eval(const Expr& e, const Scope& sc, Value* out);

Status EvalErr(const Expr& e, const std::string& what) {
  return InvalidArgument("chat template: " + what + " at offset " + std::to_string(e.offset));
}

Status EvalImpl(const Expr& e, const Scope& sc, Value* out);

// One evaluation: a step, plus the bytes of a string result (copied from a
// variable or produced by the operation).
Status Eval(const Expr& e, const Scope& sc, Value* out) {
  ATTNFLOW_RETURN_IF_ERROR(sc.Step(e.offset));
  ATTNFLOW_RETURN_IF_ERROR(EvalImpl(e, sc, out));
  if (out->kind == Value::kString) return sc.ChargeBytes(out->s.size(), e.offset);
  return Status::Ok();
}

Status EvalImpl(const Expr& e, const Scope& sc, Value* out) {
  switch (e.kind) {
    case Expr::kLiteral:
      *out = e.literal;
      return Status::Ok();
    case Expr::kName: {
      const Value* v = sc.Lookup(e.name);
      *out = v ? *v : Value();
      return Status::Ok();
    }
    case Expr::kAttr:
    case Expr::kIndex: {
      Value base;
      ATTNFLOW_RETURN_IF_ERROR(Eval(*e.args[0], sc, &base));
      Value key;
      if (e.kind == Expr::kAttr) {
        key = Value::Str(e.name);
      } else {
        ATTNFLOW_RETURN_IF_ERROR(Eval(*e.args[1], sc, &key));
      }
      *out = Value();
      if (base.kind == Value::kMap && key.kind == Value::kString) {
        auto it = base.map->find(key.s);
        if (it != base.map->end()) *out = it->second;
      } else if (base.kind == Value::kList && key.kind == Value::kInt) {
        int64_t i = key.i;
        const int64_t n = static_cast<int64_t>(base.list->size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) *out = (*base.list)[i];
      } else if (base.kind == Value::kString && key.kind == Value::kInt) {
        // Python indexes code points, not bytes: a scan of the string.
        ATTNFLOW_RETURN_IF_ERROR(sc.ChargeBytes(base.s.size(), e.offset));
        const auto next = [&](size_t at) {
          const unsigned char c = static_cast<unsigned char>(base.s[at]);
          const size_t len = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
          return std::min(base.s.size(), at + len);
        };
        int64_t n = 0;
        for (size_t at = 0; at < base.s.size(); at = next(at)) ++n;
        int64_t i = key.i;
        if (i < 0) i += n;
        if (i >= 0 && i < n) {
          size_t at = 0;
          for (int64_t k = 0; k < i; ++k) at = next(at);
          *out = Value::Str(base.s.substr(at, next(at) - at));
        }
      } else if (base.kind == Value::kUndefined) {
        return EvalErr(e, "attribute/index of an undefined value");
      }
      return Status::Ok();
    }
    case Expr::kMethod: {
      Value base;
      ATTNFLOW_RETURN_IF_ERROR(Eval(*e.args[0], sc, &base));
      if (base.kind != Value::kString) return EvalErr(e, "." + e.name + "() on a " + KindName(base.kind));
      *out = Value::Str(Strip(base.s, e.name != "rstrip", e.name != "lstrip"));
      return Status::Ok();
    }
    case Expr::kFilter: {
      Value base;
      ATTNFLOW_RETURN_IF_ERROR(Eval(*e.args[0], sc, &base));
      if (e.name == "length") {
        if (base.kind == Value::kString) *out = Value::Int(static_cast<int64_t>(base.s.size()));
        else if (base.kind == Value::kList) *out = Value::Int(static_cast<int64_t>(base.list->size()));
        else if (base.kind == Value::kMap) *out = Value::Int(static_cast<int64_t>(base.map->size()));
        else return EvalErr(e, std::string("|length of a ") + KindName(base.kind));
        return Status::Ok();
      }
      if (base.kind != Value::kString) return EvalErr(e, "|" + e.name + " of a " + KindName(base.kind));
      std::string s = base.s;
      if (e.name == "trim") s = Strip(s, true, true);
      for (char& c : s) {
        if (e.name == "upper") c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        if (e.name == "lower") c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      }
      *out = Value::Str(std::move(s));
      return Status::Ok();
    }
    case Expr::kTest: {
      Value v;
      ATTNFLOW_RETURN_IF_ERROR(Eval(*e.args[0], sc, &v));
      bool r = false;
      if (e.name == "defined") r = v.kind != Value::kUndefined;
      else if (e.name == "undefined") r = v.kind == Value::kUndefined;
      else if (e.name == "none") r = v.kind == Value::kNone;
      else if (e.name == "string") r = v.kind == Value::kString;
      *out = Value::Bool(r != e.negate);
      return Status::Ok();
    }
    case Expr::kCall: {
      Value msg;
      ATTNFLOW_RETURN_IF_ERROR(Eval(*e.args[0], sc, &msg));
      return InvalidArgument("chat template: raise_exception: " + ToText(msg));
    }
    case Expr::kNot: {
      Value v;
      ATTNFLOW_RETURN_IF_ERROR(Eval(*e.args[0], sc, &v));
      *out = Value::Bool(!v.Truthy());
      return Status::Ok();
    }
    case Expr::kAnd:
    case Expr::kOr: {
      Value a;
      ATTNFLOW_RETURN_IF_ERROR(Eval(*e.args[0], sc, &a));
      // Jinja returns the deciding operand, not a bool.
      if ((e.kind == Expr::kAnd) != a.Truthy()) {
        *out = a;
        return Status::Ok();
      }
      return Eval(*e.args[1], sc, out);
    }
    case Expr::kNeg: {
      Value v;
      ATTNFLOW_RETURN_IF_ERROR(Eval(*e.args[0], sc, &v));
      if (v.kind != Value::kInt) return EvalErr(e, std::string("unary - on a ") + KindName(v.kind));
      *out = Value::Int(-v.i);
      return Status::Ok();
    }
    case Expr::kBinary: {
      Value a, b;
      ATTNFLOW_RETURN_IF_ERROR(Eval(*e.args[0], sc, &a));
      ATTNFLOW_RETURN_IF_ERROR(Eval(*e.args[1], sc, &b));
      const std::string& op = e.name;
      const bool strings = op == "~" || (op == "+" && a.kind == Value::kString && b.kind == Value::kString);
      if (strings) {
        const std::string x = ToText(a), y = ToText(b);
        ATTNFLOW_RETURN_IF_ERROR(sc.Bytes(x.size() + y.size(), e.offset, "a string"));
        *out = Value::Str(x + y);
      } else if (op == "+" || op == "-") {
        if (a.kind != Value::kInt || b.kind != Value::kInt) {
          return EvalErr(e, "cannot " + std::string(op == "+" ? "add " : "subtract ") + KindName(a.kind) +
                                " and " + KindName(b.kind));
        }
        int64_t r = 0;
        if (op == "+" ? __builtin_add_overflow(a.i, b.i, &r) : __builtin_sub_overflow(a.i, b.i, &r)) {
          return EvalErr(e, "integer overflow in '" + op + "'");
        }
        *out = Value::Int(r);
      } else if (op == "==" || op == "!=") {
        *out = Value::Bool(Equal(a, b) == (op == "=="));
      } else if (op == "in") {
        bool found = false;
        if (b.kind == Value::kString && a.kind == Value::kString) {
          // A substring search compares up to |needle| bytes at every offset.
          const int64_t blocks = static_cast<int64_t>(b.s.size() / Scope::kBytesPerStep + 1);
          const int64_t width = static_cast<int64_t>(a.s.size() / Scope::kBytesPerStep + 1);
          if (width > sc.step_budget / blocks) {
            ATTNFLOW_RETURN_IF_ERROR(sc.Charge(sc.step_budget + 1, e.offset));
          }
          ATTNFLOW_RETURN_IF_ERROR(sc.Charge(blocks * width, e.offset));
          found = b.s.find(a.s) != std::string::npos;
        } else if (b.kind == Value::kList) {
          ATTNFLOW_RETURN_IF_ERROR(sc.Charge(1 + static_cast<int64_t>(b.list->size()), e.offset));
          for (const Value& x : *b.list) found = found || Equal(a, x);
        }
        else if (b.kind == Value::kMap && a.kind == Value::kString) found = b.map->count(a.s) != 0;
        else return EvalErr(e, std::string("'in' on a ") + KindName(b.kind));
        *out = Value::Bool(found != e.negate);
      } else {  // < > <= >=
        int c;
        if (a.kind == Value::kInt && b.kind == Value::kInt) c = a.i < b.i ? -1 : a.i > b.i ? 1 : 0;
        else if (a.kind == Value::kString && b.kind == Value::kString) c = a.s.compare(b.s);
        else return EvalErr(e, "cannot compare " + std::string(KindName(a.kind)) + " and " + KindName(b.kind));
        const bool r = op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
        *out = Value::Bool(r);
      }
      return Status::Ok();
    }
  }
  return EvalErr(e, "bad expression");
}

Status RenderNodes(const std::vector<TemplateNode>& nodes, Scope& sc, std::string* out, int depth) {
  if (depth > 64) return InvalidArgument("chat template: nesting too deep");
  for (const TemplateNode& n : nodes) {
    ATTNFLOW_RETURN_IF_ERROR(sc.Step(n.offset));
    switch (n.kind) {
      case TemplateNode::kText:
        ATTNFLOW_RETURN_IF_ERROR(sc.ChargeBytes(n.text.size(), n.offset));
        ATTNFLOW_RETURN_IF_ERROR(sc.Bytes(out->size() + n.text.size(), n.offset, "the output"));
        *out += n.text;
        break;
      case TemplateNode::kOutput: {
        Value v;
        ATTNFLOW_RETURN_IF_ERROR(Eval(*n.expr, sc, &v));
        if (v.kind == Value::kList || v.kind == Value::kMap) {
          return InvalidArgument("chat template: cannot print a " + std::string(KindName(v.kind)) +
                                 " at offset " + std::to_string(n.offset));
        }
        const std::string text = ToText(v);
        ATTNFLOW_RETURN_IF_ERROR(sc.Bytes(out->size() + text.size(), n.offset, "the output"));
        *out += text;
        break;
      }
      case TemplateNode::kSet: {
        Value v;
        ATTNFLOW_RETURN_IF_ERROR(Eval(*n.expr, sc, &v));
        sc.frames.back()[n.var] = std::move(v);
        break;
      }
      case TemplateNode::kIf:
        for (const auto& [cond, body] : n.branches) {
          bool take = true;
          if (cond) {
            Value v;
            ATTNFLOW_RETURN_IF_ERROR(Eval(*cond, sc, &v));
            take = v.Truthy();
          }
          if (take) {
            ATTNFLOW_RETURN_IF_ERROR(RenderNodes(body, sc, out, depth + 1));
            break;
          }
        }
        break;
      case TemplateNode::kFor: {
        Value it;
        ATTNFLOW_RETURN_IF_ERROR(Eval(*n.expr, sc, &it));
        if (it.kind == Value::kUndefined) break;
        if (it.kind != Value::kList) {
          return InvalidArgument("chat template: for-loop over a " + std::string(KindName(it.kind)) +
                                 " at offset " + std::to_string(n.offset));
        }
        const auto items = it.list;  // keep alive
        const int64_t len = static_cast<int64_t>(items->size());
        // One scope and one `loop` record for the whole loop, reset every
        // iteration: Jinja's variables set inside a loop body do not leak out
        // of the loop nor into the next iteration. (A fresh scope and record
        // per iteration cost ~8 allocations each: the cost of nested loops.)
        sc.frames.emplace_back();
        const size_t f = sc.frames.size() - 1;
        std::shared_ptr<std::map<std::string, Value>> record;
        Status s;
        for (int64_t i = 0; i < len && s.ok(); ++i) {
          const Value& item = (*items)[i];
          s = sc.Charge(Scope::kIterationSteps +
                            static_cast<int64_t>(item.kind == Value::kString
                                                     ? item.s.size() / Scope::kBytesPerStep
                                                     : 0),
                        n.offset);
          if (!s.ok()) break;
          auto& frame = sc.frames[f];  // nested loops may have moved the frames
          for (auto v = frame.begin(); v != frame.end();) {
            v = v->first == "loop" || v->first == n.var ? std::next(v) : frame.erase(v);
          }
          Value& loop = frame["loop"];
          if (!record || record.use_count() > 2) {  // 2: here and in the frame
            record = std::make_shared<std::map<std::string, Value>>();
          }
          (*record)["first"] = Value::Bool(i == 0);
          (*record)["last"] = Value::Bool(i == len - 1);
          (*record)["index"] = Value::Int(i + 1);
          (*record)["index0"] = Value::Int(i);
          (*record)["length"] = Value::Int(len);
          loop = Value();
          loop.kind = Value::kMap;
          loop.map = record;
          frame[n.var] = item;
          s = RenderNodes(n.body, sc, out, depth + 1);
        }
        sc.frames.pop_back();
        ATTNFLOW_RETURN_IF_ERROR(s);
        break;
      }
    }
  }
  return Status::Ok();
}

}  // namespace

namespace {
Result<ChatTemplate> ParseImpl(const std::string& source, std::string* src_out,
                               std::shared_ptr<const std::vector<TemplateNode>>* root_out);
}  // namespace

Result<ChatTemplate> ChatTemplate::Parse(const std::string& source) {
  try {
    ChatTemplate t;
    Result<ChatTemplate> r = ParseImpl(source, &t.source_, &t.root_);
    if (!r.ok()) return r.status();
    return t;
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("chat template: out of memory while parsing");
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, std::string("chat template: ") + e.what());
  }
}

namespace {
Result<ChatTemplate> ParseImpl(const std::string& source, std::string* src_out,
                               std::shared_ptr<const std::vector<TemplateNode>>* root_out) {
  std::vector<Segment> segs;
  ATTNFLOW_RETURN_IF_ERROR(LexTemplate(source, &segs));
  StmtParser p(std::move(segs));
  auto root = std::make_shared<std::vector<TemplateNode>>();
  std::string stop;
  ATTNFLOW_RETURN_IF_ERROR(p.ParseBlock(root.get(), {"endif", "endfor", "elif", "else"}, &stop));
  if (!stop.empty()) return Syntax("unexpected '{% " + stop + " %}'", p.seg().offset);
  *src_out = source;
  *root_out = std::move(root);
  return ChatTemplate();
}
}  // namespace

Result<std::string> ChatTemplate::Render(
    const std::vector<std::pair<std::string, std::string>>& messages,
    bool add_generation_prompt,
    const std::map<std::string, std::string>& string_vars) const {
  if (!root_) return InvalidArgument("chat template: not parsed");
  Scope sc;
  size_t input_bytes = 0;
  for (const auto& [role, content] : messages) input_bytes += role.size() + content.size();
  for (const auto& [k, v] : string_vars) input_bytes += v.size();
  sc.step_budget = kRenderStepBudget + kRenderStepsPerInputByte * static_cast<int64_t>(input_bytes);
  sc.byte_budget = kRenderByteBudget + kRenderBytesPerInputByte * input_bytes;
  sc.frames.emplace_back();
  auto& g = sc.frames.back();
  for (const auto& [k, v] : string_vars) g[k] = Value::Str(v);
  Value msgs;
  msgs.kind = Value::kList;
  msgs.list = std::make_shared<std::vector<Value>>();
  for (const auto& [role, content] : messages) {
    Value m;
    m.kind = Value::kMap;
    m.map = std::make_shared<std::map<std::string, Value>>();
    (*m.map)["role"] = Value::Str(role);
    (*m.map)["content"] = Value::Str(content);
    msgs.list->push_back(std::move(m));
  }
  g["messages"] = std::move(msgs);
  g["add_generation_prompt"] = Value::Bool(add_generation_prompt);
  std::string out;
  try {
    ATTNFLOW_RETURN_IF_ERROR(RenderNodes(*root_, sc, &out, 0));
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("chat template: out of memory while rendering");
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, std::string("chat template: ") + e.what());
  }
  return out;
}

}  // namespace attnflow::llama
