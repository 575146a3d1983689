// Large arrays on 2 MiB pages. The wide layers' weights and Adam moments are hundreds of MB
// read a row at a time in data-dependent order; with 4 KiB pages nearly every row visit is a
// TLB miss (a page walk, two-dimensional under a hypervisor). Arrays of at least 2 MiB are
// mapped 2 MiB-aligned and marked MADV_HUGEPAGE before their first touch, so the kernel backs
// them with transparent huge pages where it has them ("always" or "madvise" in
// /sys/kernel/mm/transparent_hugepage/enabled); elsewhere they are ordinary pages. Only where
// the memory lives changes, never a value.
#pragma once

#include <cstddef>
#include <vector>

namespace dslide {

/// Arrays from this many bytes up are mapped on their own, 2 MiB-aligned, with MADV_HUGEPAGE.
constexpr size_t kHugePageBytes = size_t{2} << 20;

/// `bytes` of memory (from kHugePageBytes up: an aligned mapping advised for huge pages; below:
/// operator new); throws std::bad_alloc when there is none.
void* AllocateLarge(size_t bytes);
/// Frees what AllocateLarge(bytes) returned (the same `bytes`).
void FreeLarge(void* p, size_t bytes) noexcept;

/// A std::allocator stand-in that takes its memory from AllocateLarge.
template <class T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>&) noexcept {}
  T* allocate(size_t n) { return static_cast<T*>(AllocateLarge(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { FreeLarge(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const HugePageAllocator<U>&) const noexcept {
    return true;
  }
  template <class U>
  bool operator!=(const HugePageAllocator<U>&) const noexcept {
    return false;
  }
};

/// A vector whose storage, from 2 MiB up, sits on huge pages where the kernel has them.
template <class T>
using BigVector = std::vector<T, HugePageAllocator<T>>;

}  // namespace dslide
