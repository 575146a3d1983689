#include "common/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>
#include <new>

#include "common/parallel.h"

namespace dslide {

namespace {
/// `bytes` (or an address) rounded up to a multiple of kHugePageBytes.
uintptr_t RoundUp(uintptr_t bytes) {
  return (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
}
}  // namespace

void* AllocateLarge(size_t bytes) {
  if (bytes < kHugePageBytes) return ::operator new(bytes);
  const size_t size = RoundUp(bytes);
  // Map one huge page more than needed, then unmap the unaligned head and the tail.
  const size_t span = size + kHugePageBytes;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  // Offsets from the mapping's start (pointer arithmetic, not integers cast to pointers).
  const uintptr_t begin = reinterpret_cast<uintptr_t>(raw);
  const size_t head = RoundUp(begin) - begin;
  char* p = static_cast<char*>(raw) + head;
  if (head > 0) munmap(raw, head);
  if (span > head + size) munmap(p + size, span - head - size);
#ifdef MADV_HUGEPAGE
  madvise(p, size, MADV_HUGEPAGE);  // advice only: without THP the pages stay small
#endif
  // The first touch of each huge page makes the kernel clear it (2 MiB at a time, slow where
  // a hypervisor backs the memory on first use): touched on all threads, not on the one that
  // fills the vector.
  ParallelFor(static_cast<int64_t>(size / kHugePageBytes), 1, [p](int64_t page) {
    static_cast<volatile char*>(p)[page * static_cast<int64_t>(kHugePageBytes)] = 0;
  });
  return p;
}

void FreeLarge(void* p, size_t bytes) noexcept {
  if (p == nullptr) return;
  if (bytes < kHugePageBytes) {
    ::operator delete(p);
    return;
  }
  munmap(p, RoundUp(bytes));
}

}  // namespace dslide
