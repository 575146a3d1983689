// Helpers shared by the unit tests: temporary files and the real-data folder.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <sys/stat.h>

namespace dslide::testing {

inline std::string TmpPath(const std::string& name) {
  return std::string(DSLIDE_TEST_TMP) + "/" + name;
}

inline std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string p = TmpPath(name);
  std::ofstream(p) << text;
  return p;
}

/// The real datasets' folder (env DSLIDE_DATA_DIR overrides); "" when absent.
inline std::string DataDir(const std::string& dataset) {
  const char* env = std::getenv("DSLIDE_DATA_DIR");
  const std::string dir = (env ? std::string(env) : std::string(DSLIDE_TEST_DATA_DIR)) + "/" + dataset;
  struct stat st;
  return stat((dir + "/train.txt").c_str(), &st) == 0 ? dir : "";
}

}  // namespace dslide::testing
