#include "common/atomic_file.h"

#include <unistd.h>
#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace dslide {

void WriteAtomically(const std::string& path,
                     const std::function<void(const std::string&)>& write) {
  const std::string tmp = path + ".tmp";
  try {
    write(tmp);
  } catch (...) {
    ::unlink(tmp.c_str());  // a file it wrote (never a folder of that name)
    throw;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw Error(detail::Concat("cannot rename ", tmp, " to ", path, ": ", std::strerror(err)));
  }
}

void CloseWritten(std::unique_ptr<FILE, int (*)(FILE*)>* f, const std::string& path) {
  const bool ok = std::fflush(f->get()) == 0 && !std::ferror(f->get());
  const int err = errno;
  const bool closed = std::fclose(f->release()) == 0;
  DSLIDE_CHECK(ok && closed, path, ": write failed: ", std::strerror(ok ? errno : err));
}

}  // namespace dslide
