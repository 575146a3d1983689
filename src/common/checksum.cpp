#include "common/checksum.h"

#include <cerrno>
#include <cstdio>
#include <memory>
#include <vector>

#include "common/error.h"

namespace dslide {

FileSum SumFile(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  DSLIDE_CHECK(f != nullptr, path, ": cannot open: ", std::strerror(errno));
  Checksum c;
  FileSum r;
  std::vector<char> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f.get())) > 0) {
    c.Add(buf.data(), n);
    r.size += static_cast<int64_t>(n);
  }
  DSLIDE_CHECK(!std::ferror(f.get()), path, ": read failed");
  r.sum = c.Final();
  return r;
}

}  // namespace dslide
