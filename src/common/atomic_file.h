// Files written whole or not at all: under a temporary name, renamed when complete.
#pragma once

#include <cstdio>
#include <functional>
#include <memory>
#include <string>

namespace dslide {

/// write(TMP) into PATH.tmp, renamed to PATH when it returns: a failed write never leaves a
/// partial PATH (nor replaces an existing one), and its temporary file is removed. A PATH
/// that is a symbolic link replaces its target (the link stays); one that is a device, FIFO
/// or socket is written in place, and a folder is refused.
void WriteAtomically(const std::string& path,
                     const std::function<void(const std::string& tmp)>& write);

/// Flushes and closes f, throwing dslide::Error (naming `path` and the system's reason)
/// when the last writes did not reach the file.
void CloseWritten(std::unique_ptr<FILE, int (*)(FILE*)>* f, const std::string& path);

}  // namespace dslide
