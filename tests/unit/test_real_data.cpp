// Real XC data (../shared/data): a sparse output layer reaches the stated P@1 within 15
// epochs; the dense run is printed beside it. Skips when the data folder is absent.
#include <gtest/gtest.h>

#include <cstdio>

#include "../test_presets.h"
#include "communicator.h"
#include "parallel.h"
#include "test_util.h"
#include "trainer.h"

namespace dslide {
namespace {

struct Run {
  double best = 0, last = 0;
};

Run Train(const std::string& dir, double sparsity) {
  SetNumThreads(2);
  const Dataset train = ReadXc(dir + "/train.txt");
  const Dataset test = ReadXc(dir + "/test.txt");
  TrainConfig cfg;
  cfg.hidden = {128};
  cfg.sparsity = {sparsity};
  cfg.batch = 128;
  cfg.lr = 1e-3;
  testing::UseSimHashTopK(&cfg.lsh);
  LocalCommunicator comm;
  Trainer tr(cfg, &comm, MakeBackend(Device::kCpu, 0), train.num_features, train.num_labels);
  const int64_t per_epoch = (train.size() + cfg.batch - 1) / cfg.batch;
  std::vector<int64_t> order(train.size()), pts;
  Run r;
  for (int64_t it = 0; it < 15 * per_epoch; ++it) {
    const int64_t b0 = (it % per_epoch) * cfg.batch;
    pts.clear();
    for (int64_t i = b0; i < std::min<int64_t>(b0 + cfg.batch, train.size()); ++i) pts.push_back(i);
    tr.Step(train, pts);
    if ((it + 1) % 100 == 0 || it + 1 == 15 * per_epoch) {
      r.last = tr.Evaluate(test, 0, false).At(1);
      r.best = std::max(r.best, r.last);
    }
  }
  return r;
}

void Check(const std::string& name, double sparsity, double target) {
  const std::string dir = testing::DataDir(name);
  if (dir.empty()) GTEST_SKIP() << "dataset '" << name << "' not found (set DSLIDE_DATA_DIR)";
  const Run sparse = Train(dir, sparsity);
  const Run dense = Train(dir, 1.0);
  std::printf("%s: sparse (s=%.2f) best P@1 %.4f final %.4f | dense best %.4f final %.4f\n",
              name.c_str(), sparsity, sparse.best, sparse.last, dense.best, dense.last);
  EXPECT_GE(sparse.best, target);
}

TEST(RealData, DeliciousSparseReaches063) { Check("delicious", 0.1, 0.63); }
TEST(RealData, BibtexSparseReaches058) { Check("bibtex", 0.2, 0.58); }

}  // namespace
}  // namespace dslide
