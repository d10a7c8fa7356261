// nanscope tests — support/json_files.hpp: reads a JSON file with nlohmann::json, strictly (invalid JSON or
// invalid UTF-8 fail the test).
#ifndef NANSCOPE_TESTS_SUPPORT_JSON_FILES_HPP
#define NANSCOPE_TESTS_SUPPORT_JSON_FILES_HPP

#include "files.hpp"

#include <nlohmann/json.hpp>

#include <string>

namespace nstest {

inline nlohmann::json load_json(const std::string& path) {
  REQUIRE_MESSAGE(exists(path), path);
  return nlohmann::json::parse(read_text(path));
}

}  // namespace nstest

#endif  // NANSCOPE_TESTS_SUPPORT_JSON_FILES_HPP
