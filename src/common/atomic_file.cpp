#include "common/atomic_file.h"

#include <fcntl.h>
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
  // One writer at a time: the temporary file is locked for as long as it is written and
  // renamed, so that a second process writing the same path is refused instead of writing
  // into the first one's file. An open file description's lock (F_OFD_SETLK): it holds
  // while the writer opens and closes the file by name, does not meet the flock() that
  // HDF5 takes on the files it writes, and ends with the process, so a writer that died
  // leaves the file unlocked for the next. Where the file cannot be opened here (a folder
  // in the way), `write` says why.
  const int lock = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  struct flock whole = {};
  whole.l_type = F_WRLCK;
  whole.l_whence = SEEK_SET;
  if (lock >= 0 && ::fcntl(lock, F_OFD_SETLK, &whole) != 0) {
    const int err = errno;
    ::close(lock);
    DSLIDE_CHECK(err != EAGAIN && err != EACCES, "cannot write ", given,
                 ": another process is writing it (", tmp,
                 " is locked); wait for it to end, or write elsewhere");
    throw Error(detail::Concat("cannot lock ", tmp, ": ", std::strerror(err)));
  }
  auto unlock = [lock] {
    if (lock >= 0) ::close(lock);
  };
  try {
    write(tmp);
  } catch (...) {
    ::unlink(tmp.c_str());  // a file it wrote (never a folder of that name)
    unlock();
    throw;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    unlock();
    throw Error(detail::Concat("cannot rename ", tmp, " to ", path, ": ", std::strerror(err)));
  }
  unlock();
}

void CloseWritten(std::unique_ptr<FILE, int (*)(FILE*)>* f, const std::string& path) {
  const bool ok = std::fflush(f->get()) == 0 && !std::ferror(f->get());
  const int err = errno;
  const bool closed = std::fclose(f->release()) == 0;
  DSLIDE_CHECK(ok && closed, path, ": write failed: ", std::strerror(ok ? errno : err));
}

}  // namespace dslide
