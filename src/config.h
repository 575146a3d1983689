// The single source of dslide's options: names, defaults, help text and cross-option rules.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dslide {

enum class HashFamily { kSrp, kWta, kDwta };
enum class InsertPolicy { kReservoir, kFifo };
enum class QueryStrategy { kVanilla, kTopK, kThreshold };
enum class FillPolicy { kRandom, kBatch, kStop };
enum class Strategy { kSparse, kDenseModelParallel, kDataParallel };
enum class Device { kCpu, kGpu };

const char* ToString(HashFamily v);
/// "dwta" | "srp" | "wta"; throws dslide::Error naming option --hash otherwise.
HashFamily ParseHashFamily(const std::string& name);
const char* ToString(InsertPolicy v);
const char* ToString(QueryStrategy v);
const char* ToString(FillPolicy v);
const char* ToString(Strategy v);
const char* ToString(Device v);

/// LSH settings of a sparse layer (DESIGN.md section 2).
struct LshConfig {
  HashFamily family = HashFamily::kDwta;
  int k = 6;                 ///< hash functions concatenated per table
  int l = 50;                ///< tables
  int bucket_capacity = 128;
  int bin_size = 8;          ///< WTA/DWTA bin size m
  InsertPolicy insert = InsertPolicy::kReservoir;
  QueryStrategy query = QueryStrategy::kVanilla;
  int threshold = 2;         ///< minimum collisions for the threshold strategy
  FillPolicy fill = FillPolicy::kBatch;
  int64_t rebuild_n0 = 50;   ///< first table rebuild after this many iterations
  double rebuild_lambda = 0.05;  ///< interval growth: t-th interval is n0 * e^(lambda t)
  int64_t rehash_every = 1000;   ///< draw new hash functions every this many iterations (0: never)
  bool mips = false;  ///< index rows with the MIPS (norm-completing) transform
};

/// Options of `dslide train` (and the training part of `dslide bench`).
struct TrainConfig {
  std::string train_file;
  std::string test_file;
  std::vector<int64_t> hidden{128};       ///< hidden layer sizes
  std::vector<double> sparsity{0.005};    ///< per layer, or one value for the output layer
  LshConfig lsh;
  int batch = 256;
  double lr = 1e-4;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  bool dense_adam = false;
  int64_t iterations = 0;   ///< 0: use epochs
  double epochs = 1.0;
  int64_t eval_every = 0;   ///< 0: only at the end
  int64_t eval_points = 0;  ///< 0: the whole test file
  bool eval_sampled = false;
  int64_t log_every = 50;
  int threads = 0;          ///< 0: OpenMP default
  uint64_t seed = 1;
  Device device = Device::kCpu;
  int gpus_per_node = 0;    ///< --device gpu: GPUs shared by a node's ranks (0: one rank per GPU)
  Strategy strategy = Strategy::kSparse;
  std::string metrics_file;
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  std::string resume_dir;
  int keep_checkpoints = 3;

  /// Per-layer sparsity for `num_layers` layers (hidden..., output), expanded from `sparsity`.
  std::vector<double> LayerSparsity(size_t num_layers) const;
  /// Cross-option rules; throws dslide::Error naming the option.
  void Validate() const;
};

/// Options of `dslide gen`.
struct GenConfig {
  std::string shape;  ///< "" or a named paper shape
  int64_t points = 0, test_points = 0, features = 0, labels = 0;
  int nnz = 0, labels_per_point = 0;
  double noise = 0.2;
  double zipf = 1.0;
  uint64_t seed = 1;
  std::string out;
  /// Applies the named shape's sizes to the fields still 0, then the generic defaults.
  void ResolveShape();
  void Validate() const;
};

/// Options of `dslide eval`.
struct EvalConfig {
  std::string model_dir, test_file;
  std::vector<int> k{1, 3, 5};
  int64_t points = 0;  ///< 0: every test point
  int threads = 0;
};

/// Options of `dslide export` and `dslide convert`.
struct ExportConfig {
  std::string model_dir, out;
};
struct ConvertConfig {
  std::string in, out;
};

/// Options of `dslide bench`.
struct BenchConfig {
  std::string shape = "amazon-670k";
  int64_t points = 0;
  TrainConfig train;
  int64_t features = 0;  ///< 0: the shape's
  int64_t labels = 0;    ///< 0: the shape's
};

/// Parses argv of one subcommand (argv[0] is the subcommand name). Returns false and fills
/// `help` when --help was given. Throws dslide::Error on unknown options and bad values.
bool ParseTrain(int argc, const char* const* argv, TrainConfig* cfg, std::string* help);
bool ParseGen(int argc, const char* const* argv, GenConfig* cfg, std::string* help);
bool ParseEval(int argc, const char* const* argv, EvalConfig* cfg, std::string* help);
bool ParseExport(int argc, const char* const* argv, ExportConfig* cfg, std::string* help);
bool ParseConvert(int argc, const char* const* argv, ConvertConfig* cfg, std::string* help);
bool ParseBench(int argc, const char* const* argv, BenchConfig* cfg, std::string* help);

}  // namespace dslide
