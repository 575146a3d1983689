// Helpers shared by the unit tests: temporary files and the real-data folder.
#pragma once

#include <sys/stat.h>
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace dslide::testing {

/// A path in this process's own temporary folder: ctest runs every test case as its own
/// process, in parallel, so two cases that write the same name must not share a file.
inline std::string TmpPath(const std::string& name) {
  struct Dir {
    std::string path = std::string(DSLIDE_TEST_TMP) + "/p" + std::to_string(getpid());
    Dir() { std::filesystem::create_directories(path); }
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const Dir dir;
  return dir.path + "/" + name;
}

inline std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string p = TmpPath(name);
  std::ofstream(p) << text;
  return p;
}

/// The whole text of a file ("" when it cannot be read).
inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

/// The real datasets' folder (env DSLIDE_DATA_DIR overrides); "" when absent.
inline std::string DataDir(const std::string& dataset) {
  const char* env = std::getenv("DSLIDE_DATA_DIR");
  const std::string dir =
      (env ? std::string(env) : std::string(DSLIDE_TEST_DATA_DIR)) + "/" + dataset;
  struct stat st;
  return stat((dir + "/train.txt").c_str(), &st) == 0 ? dir : "";
}

}  // namespace dslide::testing
