// libFuzzer target for the checkpoint loader: input = one selector byte (meta or shard
// file), a checksum-sidecar line, then the file's bytes. Whatever they are, loading either
// succeeds or raises dslide::Error: a damaged file is refused by its sidecar before the
// HDF5 library parses it, and the sidecar parser itself takes any text.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "common/error.h"
#include "io/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const std::string folder = "/tmp/dslide-fuzz-ckpt-" + std::to_string(getpid());
  std::filesystem::create_directories(folder);
  const bool shard = data[0] & 1;
  const uint8_t* end = data + size;
  const uint8_t* nl = std::find(data + 1, std::min(end, data + 80), '\n');
  const std::string sidecar(data + 1, nl);
  const uint8_t* body = nl < end ? nl + 1 : end;
  const std::string file = folder + (shard ? "/rank-00000.h5" : "/meta.h5");
  for (const char* name : {"/meta.h5", "/meta.h5.sum", "/rank-00000.h5", "/rank-00000.h5.sum"})
    std::filesystem::remove(folder + name);
  FILE* f = std::fopen(file.c_str(), "wb");
  if (f == nullptr) return 0;
  std::fwrite(body, 1, end - body, f);
  std::fclose(f);
  f = std::fopen((file + ".sum").c_str(), "wb");
  if (f == nullptr) return 0;
  std::fwrite(sidecar.data(), 1, sidecar.size(), f);
  std::fclose(f);
  try {
    if (!shard) {
      dslide::ReadMeta(folder);
    } else {
      // A 1-rank checkpoint of a network with 8 inputs, 4 hidden and 6 outputs.
      dslide::CheckpointMeta meta;
      meta.ranks = 1;
      meta.input_dim = 8;
      meta.out_dims = {4, 6};
      std::vector<dslide::LayerSpec> specs(2);
      specs[0].in_dim = 8;
      specs[0].out_dim = 4;
      specs[1].in_dim = 4;
      specs[1].out_dim = 6;
      for (auto& s : specs) s.end = s.out_dim;
      dslide::ReadLayers(folder, meta, specs);
    }
  } catch (const dslide::Error&) {
  }
  return 0;
}
