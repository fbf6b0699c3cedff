// Status codes and error messages across the C ABI, for C++ code on either side.
// Torch-free: a LibTorch plugin gets c10::Error handling from yeto/plugin.hpp.
#pragma once

#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#include "yeto/plugin.h"

namespace yeto::sdk {

// Throw this from a hook to return a specific status; its message crosses verbatim.
class Failure : public std::runtime_error {
 public:
  Failure(yeto_status status, const std::string& message) : std::runtime_error(message), status_(status) {}
  yeto_status status() const noexcept { return status_; }

 private:
  yeto_status status_;
};

[[noreturn]] inline void fail(yeto_status status, const std::string& message) { throw Failure(status, message); }
[[noreturn]] inline void unsupported(const std::string& what) {
  throw Failure(YETO_ERR_UNSUPPORTED, what + " is not implemented by this plugin");
}

// Writes `message` into a caller-provided buffer (truncated, always NUL-terminated).
inline void write_error(yeto_error* error, const std::string& message) noexcept {
  if (!error) return;
  error->length = message.size();
  if (!error->message || error->capacity == 0) return;
  const std::size_t n = message.size() < error->capacity - 1 ? message.size() : error->capacity - 1;
  std::memcpy(error->message, message.data(), n);
  error->message[n] = '\0';
}

// A message buffer on the caller's side.
class ErrorBuffer {
 public:
  ErrorBuffer() {
    err_.struct_size = sizeof(yeto_error);
    err_.abi_version = YETO_ABI_VERSION;
    err_.message = buf_;
    err_.capacity = sizeof buf_;
    err_.length = 0;
    buf_[0] = '\0';
  }
  ErrorBuffer(const ErrorBuffer&) = delete;
  ErrorBuffer& operator=(const ErrorBuffer&) = delete;
  yeto_error* get() { return &err_; }
  std::string message() const { return err_.length ? std::string(buf_) : std::string(); }

 private:
  yeto_error err_{};
  char buf_[4096];
};

inline const char* status_name(yeto_status s) noexcept {
  switch (s) {
    case YETO_OK: return "ok";
    case YETO_ERR_INVALID_ARGUMENT: return "invalid argument";
    case YETO_ERR_UNSUPPORTED: return "unsupported";
    case YETO_ERR_NOT_FOUND: return "not found";
    case YETO_ERR_OUT_OF_MEMORY: return "out of memory";
    case YETO_ERR_IO: return "I/O error";
    case YETO_ERR_INTERNAL: return "internal error";
    default: return "unknown status";
  }
}

namespace detail {
// The part of exception translation that needs no LibTorch. Called from a catch block.
inline yeto_status translate_current_exception(yeto_error* error) noexcept {
  try {
    throw;
  } catch (const Failure& e) {
    write_error(error, e.what());
    return e.status();
  } catch (const std::bad_alloc&) {
    write_error(error, "out of memory");
    return YETO_ERR_OUT_OF_MEMORY;
  } catch (const std::invalid_argument& e) {
    write_error(error, e.what());
    return YETO_ERR_INVALID_ARGUMENT;
  } catch (const std::exception& e) {
    write_error(error, e.what());
    return YETO_ERR_INTERNAL;
  } catch (...) {
    write_error(error, "unknown exception");
    return YETO_ERR_INTERNAL;
  }
}
}  // namespace detail

// Runs `f` and turns any exception into a status plus message; nothing escapes.
template <class F>
yeto_status guard_basic(yeto_error* error, F&& f) noexcept {
  try {
    std::forward<F>(f)();
    return YETO_OK;
  } catch (...) {
    return detail::translate_current_exception(error);
  }
}

}  // namespace yeto::sdk
