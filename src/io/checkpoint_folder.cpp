// Checkpoint folders: their names, the newest complete one, the candidates of --resume, the
// writability check, pruning, and the lock by which a run owns its --checkpoint-dir.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "common/error.h"
#include "io/checkpoint.h"

namespace dslide {

namespace fs = std::filesystem;

namespace {

constexpr const char* kPrefix = "ckpt-";
constexpr const char* kTmp = ".tmp";

std::vector<std::string> Complete(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && name.rfind(kPrefix, 0) == 0 && name.find(kTmp) == std::string::npos &&
        fs::exists(e.path() / "meta.h5"))
      out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::string CheckpointFolder(const std::string& dir, int64_t iter) {
  char name[40];
  std::snprintf(name, sizeof name, "%s%012lld", kPrefix, static_cast<long long>(iter));
  return dir + "/" + name;
}

std::string LatestCheckpoint(const std::string& dir) {
  const auto all = Complete(dir);
  return all.empty() ? "" : all.back();
}

std::vector<std::string> ResumeCandidates(const std::string& path, const char* option) {
  if (fs::exists(path + "/meta.h5")) return {path};
  std::vector<std::string> all = Complete(path);
  DSLIDE_CHECK(!all.empty(), "option ", option, ": no complete checkpoint in ", path);
  std::reverse(all.begin(), all.end());
  return all;
}

std::string ResolveCheckpoint(const std::string& path, const char* option) {
  return ResumeCandidates(path, option).front();
}

void CheckWritableDir(const std::string& dir, int64_t bytes, const char* option) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  DSLIDE_CHECK(!ec, "option ", option, ": cannot create ", dir, " (", ec.message(), ")");
  char host[256] = "host";
  gethostname(host, sizeof host - 1);
  const std::string probe = dir + "/.dslide-write-test-" + host + "-" + std::to_string(getpid());
  errno = 0;
  FILE* f = std::fopen(probe.c_str(), "w");
  DSLIDE_CHECK(f != nullptr, "option ", option, ": cannot write in ", dir, OsReason(errno));
  const bool ok = std::fputc('x', f) != EOF && std::fflush(f) == 0;
  const int err = errno;
  std::fclose(f);
  fs::remove(probe, ec);
  DSLIDE_CHECK(ok, "option ", option, ": cannot write in ", dir, OsReason(err));
  const fs::space_info sp = fs::space(dir, ec);
  if (!ec && bytes > 0)
    DSLIDE_CHECK(sp.available >= static_cast<uintmax_t>(bytes), "option ", option, ": ", dir,
                 " has ", sp.available >> 20, " MB free, one checkpoint needs about ",
                 (bytes >> 20) + 1, " MB");
}

void PruneCheckpoints(const std::string& dir, int keep) {
  const auto all = Complete(dir);
  for (size_t i = 0; i + keep < all.size(); ++i) fs::remove_all(all[i]);
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string p = e.path().string();
    if (p.size() > 4 && p.compare(p.size() - 4, 4, kTmp) == 0 && !all.empty() &&
        p.substr(0, p.size() - 4) < all.back())
      fs::remove_all(e.path());
  }
}

CheckpointDirLock& CheckpointDirLock::operator=(CheckpointDirLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

CheckpointDirLock::~CheckpointDirLock() {
  if (fd_ >= 0) close(fd_);
}

CheckpointDirLock CheckpointDirLock::Claim(const std::string& dir,
                                           const std::string& resumed_from) {
  const std::string path = dir + "/.dslide-lock";
  CheckpointDirLock lock;
  errno = 0;
  lock.fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  DSLIDE_CHECK(lock.fd_ >= 0, "option --checkpoint-dir: cannot create ", path, OsReason(errno));
  if (flock(lock.fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char holder[256] = {0};
    const ssize_t n = pread(lock.fd_, holder, sizeof holder - 1, 0);
    std::string who = n > 0 ? std::string(holder, static_cast<size_t>(n)) : std::string();
    while (!who.empty() && (who.back() == '\n' || who.back() == ' ')) who.pop_back();
    DSLIDE_CHECK(err != EWOULDBLOCK, "option --checkpoint-dir: ", dir,
                 " is in use by another run (",
                 who.empty() ? std::string("a process holds ") + path : who,
                 "); two runs in one folder would prune each other's checkpoints: wait for it "
                 "to end or choose another folder");
    DSLIDE_CHECK(false, "option --checkpoint-dir: cannot lock ", path, OsReason(err));
  }
  // Checkpoints of another run: this run's first checkpoint would sort below theirs and be
  // pruned at once, and eval or --resume of the folder would take theirs.
  const std::vector<std::string> theirs = Complete(dir);
  std::error_code ec;
  const bool ours =
      !resumed_from.empty() && fs::equivalent(fs::path(resumed_from).parent_path().empty()
                                                  ? fs::path(".")
                                                  : fs::path(resumed_from).parent_path(),
                                              dir, ec);
  DSLIDE_CHECK(theirs.empty() || ours, "option --checkpoint-dir: ", dir,
               " holds checkpoints of another run (newest: ", theirs.empty() ? "" : theirs.back(),
               "); continue that run with --resume ", dir,
               ", or move them away, or choose another folder");
  // Another run's best model alone (its checkpoints pruned or moved, or the run killed
  // before its first): this run's first evaluation would replace it.
  DSLIDE_CHECK(!fs::exists(fs::path(dir) / "best" / "meta.h5") || ours,
               "option --checkpoint-dir: ", dir, " holds the best model of another run (", dir,
               "/best); continue from it with --resume ", dir,
               "/best, or move it away, or choose another folder");
  char host[256] = "host";
  gethostname(host, sizeof host - 1);
  const std::string me = "process " + std::to_string(getpid()) + " on " + host + "\n";
  if (ftruncate(lock.fd_, 0) == 0) {
    const ssize_t w = pwrite(lock.fd_, me.data(), me.size(), 0);
    (void)w;  // the name is a courtesy for the message above; the lock is what counts
  }
  return lock;
}

}  // namespace dslide
