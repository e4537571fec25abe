#pragma once
// What the libFuzzer harnesses share. Inputs become files in a private directory (the readers
// under test take paths, as the CLI does), and every harness checks the same contract: bad
// input ends in a genesis::Error whose message is genesis's own words (no raw JSON-library
// text); any other exception is a finding, as are crashes, sanitizer reports, leaks and hangs,
// which libFuzzer reports itself.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <typeinfo>

#include "libgenesis/core/error.h"

namespace genesis::fuzz {

// A directory of this process's own, removed at exit.
inline const std::filesystem::path& work_dir() {
  static const std::filesystem::path dir = [] {
    std::filesystem::path d = std::filesystem::temp_directory_path() / ("genesis-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(std::filesystem::temp_directory_path() /
                                      ("genesis-fuzz-" + std::to_string(::getpid())),
                                  ec);
    });
    return d;
  }();
  return dir;
}

// Writes `bytes` to work_dir()/name (replacing it) and returns the path.
inline std::filesystem::path write_input(const std::string& name, std::string_view bytes) {
  const std::filesystem::path path = work_dir() / name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    std::fprintf(stderr, "genesis fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
  return path;
}

[[noreturn]] inline void finding(const char* what, std::string_view detail) {
  std::fprintf(stderr, "genesis fuzz: %s: %.*s\n", what, static_cast<int>(detail.size()), detail.data());
  std::abort();
}

// Runs `body` on one input. A genesis::Error is the expected answer to bad input; its message
// must be non-empty and not nlohmann's text passed on as it is (which starts with its
// "[json.exception..." tag; the tag elsewhere may be quoted input). Anything else thrown is a
// finding (std::bad_alloc, std::length_error, a raw parser exception, ...).
template <class Body>
void expect_clean(Body&& body) {
  try {
    body();
  } catch (const Error& e) {
    const std::string_view message = e.what();
    if (message.empty()) finding("an error without a message", typeid(e).name());
    if (message.starts_with("[json.")) finding("a JSON-library message passed on as it is", message);
  } catch (const std::exception& e) {
    finding("an exception that is not a genesis::Error", std::string(typeid(e).name()) + ": " + e.what());
  }
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace genesis::fuzz
