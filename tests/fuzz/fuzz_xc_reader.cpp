// libFuzzer target: any bytes given to the dataset reader (XC text, gzip, binary) either
// load into a consistent dataset or raise dslide::Error; nothing crashes or hangs.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "common/error.h"
#include "data/dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/dslide-fuzz-xc-" + std::to_string(getpid());
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    const dslide::Dataset d = dslide::ReadXc(path);
    // A loaded dataset is consistent: every view stays inside its arrays and ranges.
    for (int64_t i = 0; i < d.size(); ++i) {
      const dslide::SparseView x = d.Features(i);
      for (int64_t j = 0; j < x.n; ++j)
        if (x.ids[j] < 0 || x.ids[j] >= d.num_features) __builtin_trap();
      for (int64_t j = 0; j < d.NumLabels(i); ++j)
        if (d.Labels(i)[j] < 0 || d.Labels(i)[j] >= d.num_labels) __builtin_trap();
    }
  } catch (const dslide::Error&) {
  }
  return 0;
}
