// nanscope — detail/recorder_support.hpp: the recorder's small helpers: user text callbacks, glob rules, integer
// ranges as torch computes them, serial numbers, the formatter hooks report.hpp fills, and JSON/file-name text.
#ifndef NANSCOPE_DETAIL_RECORDER_SUPPORT_HPP
#define NANSCOPE_DETAIL_RECORDER_SUPPORT_HPP

#include "../config.hpp"
#include "../dtype.hpp"
#include "../frame.hpp"
#include "../recorder_options.hpp"
#include "../view.hpp"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <string>
#include <string_view>

NANSCOPE_NAMESPACE_BEGIN
namespace detail {
/// Hands `text` to a user's text callback (a recorder's sink, a tree writer's or controller's on_error). One that
/// throws (a logger whose disk is full) must not lose the text nor end the process from a destructor (~scope
/// completes frames through the sink): the text goes to stderr with a line saying what the callback threw.
inline void call_text_callback(const std::function<void(std::string_view)>& fn, std::string_view text,
                               const char* who) noexcept {
#if NANSCOPE_IMPL_EXCEPTIONS
  // no allocation on this path (a callback failing for want of memory must not make it throw again)
  try {
    fn(text);
    return;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nanscope: %s threw (%s); the text it was given follows\n", who, e.what());
  } catch (...) {
    std::fprintf(stderr, "nanscope: %s threw (an exception that is not a std::exception); the text it was given "
                 "follows\n", who);
  }
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
#else
  (void)who;
  fn(text);
#endif
}

inline bool glob_match(std::string_view pat, std::string_view s) {
  std::size_t p = 0, i = 0, star = std::string_view::npos, mark = 0;
  while (i < s.size()) {
    if (p < pat.size() && (pat[p] == '?' || pat[p] == s[i])) {
      ++p;
      ++i;
    } else if (p < pat.size() && pat[p] == '*') {
      star = p++;
      mark = i;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      i = ++mark;
    } else {
      return false;
    }
  }
  while (p < pat.size() && pat[p] == '*') ++p;
  return p == pat.size();
}

/// Reference statistics for the next tensor this thread records, if its data pointer is `data`: an adapter
/// sets them right before recording (offer_reference_stats) and recorder::record takes them.
struct pending_reference {
  const void* data = nullptr;
  reference_stats stats;
};
inline pending_reference& pending_reference_slot() {
  thread_local pending_reference p;
  return p;
}
inline void offer_reference_stats(const void* data, double mean, double std) {
  pending_reference& p = pending_reference_slot();
  p.data = data;
  p.stats = reference_stats{true, mean, std};
}
inline reference_stats take_reference_stats(const void* data) {
  pending_reference& p = pending_reference_slot();
  reference_stats r;
  if (p.data != nullptr && p.data == data) r = p.stats;
  p.data = nullptr;
  return r;
}

/// A process-wide serial number for recorders (1, 2, ...).
inline std::uint64_t next_recorder_id() {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}
/// A process-wide serial number for frames (frame::serial: 1, 2, ...).
inline std::uint64_t next_frame_serial() {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

// Report formatting lives in report.hpp (it needs fmt); the recorder calls it through this hook so that
// recorder.hpp itself needs no fmt. report.hpp installs the formatter at static-initialisation time.
using report_fn = std::string (*)(report_style, const detection&);
inline std::atomic<report_fn>& report_formatter() {
  static std::atomic<report_fn> fn{nullptr};
  return fn;
}
using trace_fn = std::string (*)(const frame&, bool banner);
inline std::atomic<trace_fn>& trace_formatter() {
  static std::atomic<trace_fn> fn{nullptr};
  return fn;
}
using warn_fn = std::string (*)(const frame&, const tensor_record&, lp_format, double threshold);
inline std::atomic<warn_fn>& warning_formatter() {
  static std::atomic<warn_fn> fn{nullptr};
  return fn;
}
/// A source file's name without its directories ("src/model.cpp" -> "model.cpp").
inline std::string short_file(const char* file) {
  std::string s = file != nullptr ? file : "";
  const std::size_t slash = s.find_last_of("/\\");
  return slash == std::string::npos ? s : s.substr(slash + 1);
}
/// A file-name-safe version of s: letters, digits, '.', '-' kept; everything else '_'.
inline std::string file_safe(const std::string& s) {
  std::string out;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
    out += ok ? c : '_';
  }
  if (out.size() > 80) out.resize(80);
  return out.empty() ? std::string("root") : out;
}
/// A JSON string literal: quotes, backslashes and control characters escaped; valid UTF-8 kept; every byte of
/// an invalid UTF-8 sequence replaced by U+FFFD, so the result is always valid JSON.
inline std::string json_quote(const std::string& s) {
  std::string out = "\"";
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  for (std::size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      if (c == '"' || c == '\\') {
        out += '\\';
        out += static_cast<char>(c);
      } else if (c < 0x20 || c == 0x7F) {
        static const char hex[] = "0123456789abcdef";
        out += "\\u00";
        out += hex[c >> 4];
        out += hex[c & 15];
      } else {
        out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    // multi-byte: lead byte decides the length; reject overlongs, surrogates and > U+10FFFF
    std::size_t len = (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
    bool ok = len != 0 && i + len <= n;
    for (std::size_t k = 1; ok && k < len; ++k) ok = (p[i + k] & 0xC0) == 0x80;
    if (ok && len == 3) ok = !(c == 0xE0 && p[i + 1] < 0xA0) && !(c == 0xED && p[i + 1] >= 0xA0);
    if (ok && len == 4) ok = !(c == 0xF0 && p[i + 1] < 0x90) && !(c == 0xF4 && p[i + 1] >= 0x90);
    if (ok) {
      out.append(s, i, len);
      i += len;
    } else {
      out += "\\ufffd";
      ++i;
    }
  }
  return out + "\"";
}
inline const char* role_word(tensor_role r) {
  switch (r) {
    case tensor_role::parameter: return "parameter";
    case tensor_role::input: return "input";
    case tensor_role::output: return "output";
    case tensor_role::checkpoint: return "checkpoint";
  }
  return "?";
}
}  // namespace detail
NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_DETAIL_RECORDER_SUPPORT_HPP
