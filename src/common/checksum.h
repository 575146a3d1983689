// A fast 64-bit checksum for files dslide writes (binary datasets, checkpoint sidecars).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace dslide {

/// A 64-bit checksum over a byte stream, four independent multiply-xor lanes over 32-byte
/// blocks (several GB/s: loading must stay far faster than parsing text). Detects
/// corruption, not tampering.
class Checksum {
 public:
  void Add(const void* data, size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    while (bytes > 0) {
      if (fill_ == 0 && bytes >= 32) {
        const size_t blocks = bytes / 32;
        for (size_t b = 0; b < blocks; ++b) Block(p + 32 * b);
        p += 32 * blocks;
        bytes -= 32 * blocks;
        continue;
      }
      buf_[fill_++] = *p++;
      --bytes;
      if (fill_ == 32) {
        Block(buf_);
        fill_ = 0;
      }
    }
  }
  uint64_t Final() const {
    uint64_t h = lanes_[0] ^ (lanes_[1] << 17 | lanes_[1] >> 47) ^
                 (lanes_[2] << 31 | lanes_[2] >> 33) ^ (lanes_[3] << 47 | lanes_[3] >> 17);
    for (size_t i = 0; i < fill_; ++i) h = (h ^ buf_[i]) * kMul;
    return (h ^ (h >> 29)) * kMul;
  }

 private:
  static constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;
  void Block(const unsigned char* p) {
    uint64_t w[4];
    std::memcpy(w, p, 32);
    for (int k = 0; k < 4; ++k) lanes_[k] = (lanes_[k] ^ w[k]) * kMul;
  }
  uint64_t lanes_[4] = {1, 2, 3, 4};
  unsigned char buf_[32] = {};
  size_t fill_ = 0;
};

/// The checksum and size of a whole file; throws dslide::Error naming it when unreadable.
struct FileSum {
  uint64_t sum = 0;
  int64_t size = 0;
};
FileSum SumFile(const std::string& path);

}  // namespace dslide
