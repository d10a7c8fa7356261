// nanscope tests — support/files.hpp: temporary directories, whole-file reads and directory listings, shared by
// the test files (one definition each, so that the unity build's batches do not define them twice).
#ifndef NANSCOPE_TESTS_SUPPORT_FILES_HPP
#define NANSCOPE_TESTS_SUPPORT_FILES_HPP

#include <doctest/doctest.h>

#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace nstest {

/// A new empty directory /tmp/nanscope_<tag>_XXXXXX (mkdtemp); the test fails when it cannot be made.
inline std::string make_temp_dir(const std::string& tag) {
  std::string tmpl = "/tmp/nanscope_" + tag + "_XXXXXX";
  const char* d = ::mkdtemp(&tmpl[0]);
  REQUIRE_MESSAGE(d != nullptr, tmpl);
  return tmpl;
}

/// The whole file, bytes as they are; "" when it cannot be opened.
inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// The whole file; the test fails when it cannot be opened.
inline std::string read_existing(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE_MESSAGE(f.good(), path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

/// Every name in a directory except "." and "..", in readdir order (hidden files included).
inline std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") out.push_back(name);
    }
    ::closedir(d);
  }
  return out;
}

/// Removes a directory and everything under it (symbolic links are removed, not followed); quiet on failure.
inline void remove_tree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    for (const std::string& name : list_dir(path)) remove_tree(path + "/" + name);
    ::rmdir(path.c_str());
  } else {
    ::unlink(path.c_str());
  }
}

}  // namespace nstest

#endif  // NANSCOPE_TESTS_SUPPORT_FILES_HPP
