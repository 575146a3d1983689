// Options: defaults work, unknown options and bad values are errors naming the option, INI
// files are read and the command line wins over them.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "config.h"
#include "error.h"
#include "gpu/device_choice.h"
#include "test_util.h"

namespace dslide {
namespace {

std::string TrainError(std::vector<const char*> argv) {
  argv.insert(argv.begin(), "train");
  TrainConfig c;
  std::string help;
  try {
    ParseTrain(static_cast<int>(argv.size()), argv.data(), &c, &help);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Config, DefaultsNeedOnlyTrain) {
  const char* argv[] = {"train", "--train", "a.txt", "--test", "b.txt"};
  TrainConfig c;
  std::string help;
  ASSERT_TRUE(ParseTrain(5, argv, &c, &help));
  EXPECT_EQ(c.batch, 256);
  EXPECT_EQ(c.hidden, std::vector<int64_t>{128});
  EXPECT_EQ(c.lr, 1e-3);
  // Left to auto: resolved from the layers' sizes (test_auto_settings.cpp).
  EXPECT_TRUE(c.sparsity_auto());
  EXPECT_EQ(c.lsh.family, HashFamily::kAuto);
  EXPECT_EQ(c.lsh.k, 0);
  EXPECT_EQ(c.lsh.l, 0);
  EXPECT_EQ(c.lsh.query, QueryStrategy::kAuto);
  EXPECT_FALSE(c.validating());
  EXPECT_EQ(c.keep_best, -1);
}

TEST(Config, AutoAndExplicitLshSettings) {
  const char* argv[] = {"train", "--train", "a.txt", "--sparsity", "0.1", "--hash", "srp", "--K", "9",
                        "--L", "auto", "--query", "topk"};
  TrainConfig c;
  std::string help;
  ASSERT_TRUE(ParseTrain(13, argv, &c, &help));
  EXPECT_EQ(c.LayerSparsity(2), (std::vector<double>{1.0, 0.1}));
  EXPECT_EQ(c.lsh.family, HashFamily::kSrp);
  EXPECT_EQ(c.lsh.k, 9);
  EXPECT_EQ(c.lsh.l, 0);
  EXPECT_EQ(c.lsh.query, QueryStrategy::kTopK);
  EXPECT_NE(TrainError({"--train", "a", "--K", "0"}).find("--K"), std::string::npos);
  EXPECT_NE(TrainError({"--train", "a", "--L", "many"}).find("--L"), std::string::npos);
}

TEST(Config, ValidationOptions) {
  EXPECT_NE(TrainError({"--train", "a", "--valid", "v", "--valid-fraction", "0.1"}).find("exclude"),
            std::string::npos);
  EXPECT_NE(TrainError({"--train", "a", "--valid-fraction", "1"}).find("--valid-fraction"),
            std::string::npos);
  EXPECT_NE(TrainError({"--train", "a", "--keep-best"}).find("--keep-best"), std::string::npos);
  EXPECT_NE(TrainError({"--train", "a", "--valid", "v", "--keep-best", "maybe"}).find("--keep-best"),
            std::string::npos);
  EXPECT_EQ(TrainError({"--train", "a", "--valid-fraction", "0.1", "--keep-best", "false"}), "");
  EXPECT_NE(TrainError({"--train", "a", "--min-negatives", "0"}).find("--min-negatives"),
            std::string::npos);
  EXPECT_NE(TrainError({"--train", "a", "--fill", "stop", "--lsh-share", "0.5"}).find("--lsh-share"),
            std::string::npos);
  EXPECT_NE(TrainError({"--train", "a", "--lsh-share", "1.5"}).find("--lsh-share"), std::string::npos);
}

TEST(Config, UnknownOptionIsError) {
  EXPECT_NE(TrainError({"--train", "a", "--bogus", "1"}).find("bogus"), std::string::npos);
}

TEST(Config, BadValuesNameTheOption) {
  EXPECT_NE(TrainError({"--train", "a", "--batch", "x"}).find("batch"), std::string::npos);
  EXPECT_NE(TrainError({"--train", "a", "--batch", "0"}).find("--batch"), std::string::npos);
  EXPECT_NE(TrainError({"--train", "a", "--hash", "md5"}).find("--hash"), std::string::npos);
  EXPECT_NE(TrainError({"--train", "a", "--sparsity", "1.5"}).find("--sparsity"), std::string::npos);
  EXPECT_NE(TrainError({"--train", "a", "--hidden", "12,x"}).find("--hidden"), std::string::npos);
  EXPECT_NE(TrainError({"--train", "a", "--bin-size", "6"}).find("--bin-size"), std::string::npos);
  EXPECT_NE(TrainError({"--test", "b"}).find("--train"), std::string::npos);
}

TEST(Config, IniFileAndCommandLinePrecedence) {
  const auto ini = testing::WriteFile("cfg.ini", "train = from_ini.txt\nbatch = 64\nK = 4\n");
  const char* argv[] = {"train", "--config", ini.c_str(), "--batch", "32"};
  TrainConfig c;
  std::string help;
  ASSERT_TRUE(ParseTrain(5, argv, &c, &help));
  EXPECT_EQ(c.train_file, "from_ini.txt");
  EXPECT_EQ(c.batch, 32);
  EXPECT_EQ(c.lsh.k, 4);
}

TEST(Config, IniUnknownKeyIsError) {
  const auto ini = testing::WriteFile("cfg_bad.ini", "train = a\nbatchsize = 64\n");
  const std::string msg = TrainError({"--config", ini.c_str()});
  EXPECT_NE(msg.find("batchsize"), std::string::npos) << msg;
  EXPECT_NE(msg.find(ini), std::string::npos) << msg;
}

TEST(Config, HelpIsReturned) {
  const char* argv[] = {"train", "--help"};
  TrainConfig c;
  std::string help;
  EXPECT_FALSE(ParseTrain(2, argv, &c, &help));
  EXPECT_NE(help.find("--sparsity"), std::string::npos);
}

TEST(Config, GenShapes) {
  const char* argv[] = {"gen", "--shape", "amazon-670k", "--points", "10", "--out", "x"};
  GenConfig g;
  std::string help;
  ASSERT_TRUE(ParseGen(7, argv, &g, &help));
  EXPECT_EQ(g.features, 135909);
  EXPECT_EQ(g.labels, 670091);
  EXPECT_EQ(g.points, 10);
  const char* bad[] = {"gen", "--shape", "imagenet", "--out", "x"};
  EXPECT_THROW(ParseGen(5, bad, &g, &help), Error);
}

}  // namespace
}  // namespace dslide

namespace dslide {
namespace {

TEST(DeviceChoice, OneRankPerGpuByLocalRank) {
  EXPECT_EQ(gpu::ChooseDevice(0, 4, 0, 4, "ok"), 0);
  EXPECT_EQ(gpu::ChooseDevice(3, 4, 0, 4, "ok"), 3);
  // --gpus-per-node shares on purpose: local rank r -> r % N.
  EXPECT_EQ(gpu::ChooseDevice(3, 4, 2, 4, "ok"), 1);
  EXPECT_EQ(gpu::ChooseDevice(1, 2, 1, 1, "ok"), 0);
}

TEST(DeviceChoice, ClearErrors) {
  try {
    gpu::ChooseDevice(0, 1, 0, 0, "no CUDA-capable device is detected");
    FAIL() << "no device accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA-capable device is detected"), std::string::npos);
  }
  try {
    gpu::ChooseDevice(2, 3, 0, 2, "ok");
    FAIL() << "3 ranks on 2 GPUs accepted without --gpus-per-node";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--gpus-per-node 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(gpu::ChooseDevice(0, 1, 4, 2, "ok"), Error);
}

TEST(DeviceChoice, LocalRankFromLauncher) {
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  unsetenv("MPI_LOCALRANKID");
  unsetenv("SLURM_LOCALID");
  EXPECT_EQ(gpu::LocalRankFromEnv(5), 5);
  setenv("SLURM_LOCALID", "2", 1);
  EXPECT_EQ(gpu::LocalRankFromEnv(5), 2);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
  EXPECT_EQ(gpu::LocalRankFromEnv(5), 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "x", 1);
  EXPECT_EQ(gpu::LocalRankFromEnv(5), 2);
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  unsetenv("SLURM_LOCALID");
}

TEST(DeviceChoice, CudaAwareMpiOverride) {
  // This test binary links no MPI: without the override nothing reports CUDA support.
  unsetenv("DSLIDE_CUDA_AWARE_MPI");
  EXPECT_FALSE(gpu::MpiReadsDeviceMemory());
  setenv("DSLIDE_CUDA_AWARE_MPI", "1", 1);
  EXPECT_TRUE(gpu::MpiReadsDeviceMemory());
  setenv("DSLIDE_CUDA_AWARE_MPI", "0", 1);
  EXPECT_FALSE(gpu::MpiReadsDeviceMemory());
  setenv("DSLIDE_CUDA_AWARE_MPI", "yes", 1);
  try {
    gpu::MpiReadsDeviceMemory();
    FAIL() << "DSLIDE_CUDA_AWARE_MPI=yes accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must be 0 or 1"), std::string::npos) << e.what();
  }
  unsetenv("DSLIDE_CUDA_AWARE_MPI");
}

TEST(DeviceChoice, GpusPerNodeOption) {
  TrainConfig c;
  std::string help;
  const char* argv[] = {"train", "--train", "x.txt", "--gpus-per-node", "-1"};
  EXPECT_THROW(ParseTrain(5, argv, &c, &help), Error);
}

}  // namespace
}  // namespace dslide
