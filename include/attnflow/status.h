// attnflow/status.h — error reporting without exceptions.
//
// Every public operation returns a Status (or Result<T>). A failed Status
// carries a code and a message that names the operation and the offending
// shapes or values, e.g. "sdpa: q has rank 3 [2,5,8], expected rank 4
// [B,H,Lq,D]". The library never aborts or throws on bad input.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace attnflow {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // bad shapes, values, flags
  kOutOfRange,         // index or length outside its valid range
  kIoError,            // file cannot be opened / read / written
  kCorrupt,            // a file's content is malformed
  kUnimplemented,      // a valid request that this build does not support
  kResourceExhausted,  // allocation failed or a size overflows
  kInternal,
};

const char* StatusCodeName(StatusCode code);

// A string that came from the user (a name, a path, a field value), quoted
// for an error message: 'text' when it has at most `max_bytes` bytes, else
// its first `max_bytes` bytes (cut at a UTF-8 character boundary) and
// "...' (N bytes)". Messages never echo an unbounded user string.
constexpr size_t kMaxQuotedBytes = 80;
std::string QuoteBounded(std::string_view s, size_t max_bytes = kMaxQuotedBytes);
// "1 head", "3 heads", "2 queries": a count and its noun in the right number
// (`many` defaults to `one` + "s"), the one writer of counts in messages.
std::string CountOf(int64_t n, std::string_view one, std::string_view many = {});

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message)
      : code_(code), message_(std::move(message)) {}
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid_argument: sdpa: ..." — for logs and the CLI.
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Status factories, one per non-OK code.
inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status Corrupt(std::string m) { return {StatusCode::kCorrupt, std::move(m)}; }
inline Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status ResourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }

// A value or an error. Access value() only when ok().
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}  // NOLINT
  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  std::variant<T, Status> v_;
};

#define ATTNFLOW_RETURN_IF_ERROR(expr)          \
  do {                                          \
    ::attnflow::Status _af_st = (expr);         \
    if (!_af_st.ok()) return _af_st;            \
  } while (0)

}  // namespace attnflow
