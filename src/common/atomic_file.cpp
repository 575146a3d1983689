#include "common/atomic_file.h"

#include <unistd.h>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/error.h"

namespace dslide {

void WriteAtomically(const std::string& given,
                     const std::function<void(const std::string&)>& write) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(given, ec);  // through symbolic links
  DSLIDE_CHECK(!fs::is_directory(st), "cannot write ", given, ": it is a folder");
  if (fs::exists(st) && !fs::is_regular_file(st)) {
    // A device, FIFO or socket (/dev/stdout, a named pipe): written in place; a rename
    // would put a file where it was.
    write(given);
    return;
  }
  // Through a symbolic link: its target is replaced, the link kept.
  std::string path = given;
  if (fs::exists(st) && fs::is_symlink(fs::symlink_status(given, ec))) {
    const fs::path target = fs::canonical(given, ec);
    if (!ec) path = target.string();
  }
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
