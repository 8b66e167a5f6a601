// Error handling for the whole project, as STYLE.md asks: two kinds of error.
//  - A user or configuration error is a value: Status / Result<T>, carried up to main(),
//    which alone chooses the exit code and prints the message.
//  - A broken invariant is a bug: TRAINPLAN_CHECK(cond) << "message" aborts with file:line.
// Libraries never call exit().
#pragma once

#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>
#include <variant>

namespace trainplan {

// Exit codes used by every tool (documented in README.md, "Exit codes").
enum class ExitCode : int {
  kOk = 0,
  kInternal = 1,       // a bug: a broken invariant or an unexpected exception
  kUsage = 2,          // bad command line
  kInvalidInput = 3,   // a file or value the user gave is malformed or out of range
  kInfeasible = 4,     // the request is well-formed but no plan can satisfy it
  kRuntime = 5,        // the executor failed while running (a rank died, NaN loss, MPI error)
  kIo = 6,             // a file could not be read or written
};

class Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Error(std::string message, ExitCode code = ExitCode::kInvalidInput) {
    Status s;
    s.ok_ = false;
    s.message_ = std::move(message);
    s.code_ = code;
    return s;
  }
  bool ok() const { return ok_; }
  const std::string& message() const { return message_; }
  ExitCode code() const { return code_; }

 private:
  bool ok_ = true;
  std::string message_;
  ExitCode code_ = ExitCode::kOk;
};

// A value or the Status that explains why there is none.
template <class T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status error) : v_(std::move(error)) {}  // NOLINT: implicit by design
  bool ok() const { return std::holds_alternative<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T& value() & { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(v_); }

 private:
  std::variant<T, Status> v_;
};

namespace detail {
// Collects a message and aborts in its destructor; used only by TRAINPLAN_CHECK.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* cond) {
    stream_ << file << ":" << line << ": internal error: check failed: " << cond << " ";
  }
  [[noreturn]] ~CheckFailure() {
    std::cerr << stream_.str() << std::endl;
    std::abort();
  }
  template <class T>
  CheckFailure& operator<<(const T& v) {
    stream_ << v;
    return *this;
  }

 private:
  std::ostringstream stream_;
};
}  // namespace detail

}  // namespace trainplan

#define TRAINPLAN_CHECK(cond) \
  if (cond) {                 \
  } else                      \
    ::trainplan::detail::CheckFailure(__FILE__, __LINE__, #cond)

// Propagates a non-ok Status from an expression returning Status.
#define TRAINPLAN_RETURN_IF_ERROR(expr)      \
  do {                                       \
    ::trainplan::Status _st = (expr);        \
    if (!_st.ok()) return _st;               \
  } while (0)
