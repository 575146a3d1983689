// Runs that survive faults: a stop signal mid-run writes a checkpoint and the resumed run
// ends with the same weights as an uninterrupted one; a second signal exits at once; a
// checkpoint write that fails (a full disk) keeps the earlier checkpoints and leaves no
// partial folder; a diverging loss stops the run before it is checkpointed; --resume skips
// damaged checkpoints; LSH tables are optional in checkpoints and stored compactly; export
// never replaces a good file with a partial one; the checkpoint folder is checked at start.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "../common/test_presets.h"
#include "common/atomic_file.h"
#include "common/error.h"
#include "common/parallel.h"
#include "common/stop_signal.h"
#include "data/synthetic.h"
#include "devices/backend_factory.h"
#include "dist/communicator.h"
#include "io/checkpoint.h"
#include "test_util.h"
#include "train/trainer.h"

namespace dslide {
namespace {

namespace fs = std::filesystem;

struct Small {
  Dataset data;
  TrainConfig cfg;
  Small() {
    data = GenerateSynthetic(testing::SyntheticShape(400, 300, 12, 3, 1200), 0, 1200);
    cfg.hidden = {24};
    cfg.sparsity = {0.1};
    cfg.batch = 64;
    cfg.lsh.family = HashFamily::kSrp;
    cfg.lsh.k = 3;
    cfg.lsh.l = 8;
    cfg.lsh.query = QueryStrategy::kTopK;
    cfg.lsh.lsh_share = 1;
    cfg.lsh.rebuild_n0 = 4;
    cfg.lsh.rehash_every = 6;
    cfg.iterations = 30;
    cfg.log_every = 1000;
  }
  std::unique_ptr<Trainer> Make(Communicator* comm, const TrainConfig& c) const {
    return std::make_unique<Trainer>(c, comm, MakeBackend(Device::kCpu, 0), data.num_features,
                                     data.num_labels);
  }
  std::unique_ptr<Trainer> Make(Communicator* comm) const { return Make(comm, cfg); }
  /// cfg with checkpoints every `every` iterations into a fresh folder TMP/name.
  TrainConfig Checkpointing(const std::string& name, int64_t every) const;
};

std::string Dir(const std::string& name) {
  const std::string d = testing::TmpPath(name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

TrainConfig Small::Checkpointing(const std::string& name, int64_t every) const {
  TrainConfig c = cfg;
  c.checkpoint_dir = Dir(name);
  c.checkpoint_every = every;
  return c;
}

/// DSLIDE_FAULT for the lifetime of the object (trainers read it when constructed).
struct FaultEnv {
  explicit FaultEnv(const std::string& v) { setenv("DSLIDE_FAULT", v.c_str(), 1); }
  ~FaultEnv() { unsetenv("DSLIDE_FAULT"); }
};

/// Runs `t` and returns the Stop it ended with (code -1: it ran to the end).
Stop RunUntilStop(Trainer& t, const Dataset& data) {
  try {
    t.Run(data, nullptr, nullptr);
  } catch (const Stop& e) {
    return e;
  }
  return Stop(-1, "");
}

bool Has(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

TEST(Reliability, StopSignalCheckpointsAndTheResumedRunEndsWithTheSameWeights) {
  SetNumThreads(1);
  Small s;
  LocalCommunicator comm;
  auto whole = s.Make(&comm);
  whole->Run(s.data, nullptr, nullptr);
  const std::vector<float> expect = testing::AllWeights(*whole);

  TrainConfig c = s.Checkpointing("stop_signal", 100);  // none periodic: the stop writes the one
  InstallStopHandlers();
  Stop stop(-1, "");
  {
    FaultEnv fault("term:0:11");  // SIGTERM at the start of iteration 11
    auto first = s.Make(&comm, c);
    stop = RunUntilStop(*first, s.data);
    EXPECT_EQ(first->iteration(), 11);
  }
  ClearStopSignal();
  EXPECT_EQ(stop.code(), kExitStopped);
  EXPECT_TRUE(Has(stop.what(), "stopped by SIGTERM at iteration 11 of 30")) << stop.what();
  EXPECT_TRUE(Has(stop.what(), "--resume " + c.checkpoint_dir)) << stop.what();
  ASSERT_EQ(LatestCheckpoint(c.checkpoint_dir), CheckpointFolder(c.checkpoint_dir, 11));

  c.resume_dir = c.checkpoint_dir;
  auto resumed = s.Make(&comm, c);
  resumed->Run(s.data, nullptr, nullptr);
  EXPECT_EQ(resumed->iteration(), 30);
  EXPECT_TRUE(testing::AllWeights(*resumed) == expect) << "the resumed run's weights differ";
  // The run's end wrote the final state too.
  EXPECT_EQ(LatestCheckpoint(c.checkpoint_dir), CheckpointFolder(c.checkpoint_dir, 30));
}

TEST(Reliability, WithoutACheckpointDirTheStopSaysNothingWasSaved) {
  SetNumThreads(1);
  Small s;
  LocalCommunicator comm;
  InstallStopHandlers();
  FaultEnv fault("term:0:3");
  auto t = s.Make(&comm);
  const Stop stop = RunUntilStop(*t, s.data);
  ClearStopSignal();
  EXPECT_EQ(stop.code(), kExitStopped);
  EXPECT_TRUE(Has(stop.what(), "nothing was saved (no --checkpoint-dir or --save)")) << stop.what();
}

TEST(Reliability, SecondSignalExitsAtOnce) {
  EXPECT_EXIT(
      {
        InstallStopHandlers();
        std::raise(SIGTERM);
        std::raise(SIGTERM);
        std::exit(0);  // not reached
      },
      ::testing::ExitedWithCode(128 + SIGTERM), "second stop signal");
}

TEST(Reliability, FailedCheckpointWriteKeepsTheEarlierOnesAndNoPartialFolder) {
  SetNumThreads(1);
  Small s;
  LocalCommunicator comm;
  const std::string dir = Dir("enospc");
  FaultEnv fault("enospc:0:6");
  auto t = s.Make(&comm);
  for (int64_t it = 0; it < 3; ++it) t->Step(s.data, testing::Batch(it, 64, s.data.size()));
  t->SaveCheckpoint(dir, 0, 0, 3);
  for (int64_t it = 3; it < 6; ++it) t->Step(s.data, testing::Batch(it, 64, s.data.size()));
  try {
    t->SaveCheckpoint(dir, 0, 0, 3);
    ADD_FAILURE() << "the failed write was not reported";
  } catch (const Stop& e) {
    EXPECT_EQ(e.code(), 1);
    EXPECT_TRUE(Has(e.what(), "No space left on device")) << e.what();
    EXPECT_TRUE(Has(e.what(), "checkpoints written before are kept")) << e.what();
    EXPECT_TRUE(Has(e.what(), CheckpointFolder(dir, 3))) << e.what();
  }
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  ASSERT_EQ(names.size(), 1u) << "a partial folder was left behind";
  EXPECT_EQ(LatestCheckpoint(dir), CheckpointFolder(dir, 3));
  auto back = s.Make(&comm);
  EXPECT_EQ(back->LoadCheckpoint(LatestCheckpoint(dir)).iter, 3);
}

TEST(Reliability, DivergenceBetweenReadsIsFoundAndNotCheckpointed) {
  // With one rank the steps' losses are read at the logging cadence and before a checkpoint:
  // a divergence between reads is found at the next read, named by its own iteration, and
  // no checkpoint of it or of a later step is written.
  SetNumThreads(1);
  Small s;
  LocalCommunicator comm;
  TrainConfig c = s.Checkpointing("diverge-between-reads", 7);
  c.log_every = 5;
  c.lr = 1e6;
  auto t = s.Make(&comm, c);
  const Stop stop = RunUntilStop(*t, s.data);
  ASSERT_EQ(stop.code(), kExitDiverged) << stop.what();
  const std::string text = stop.what();
  const std::string key = "training diverged at iteration ";
  const size_t at = text.find(key);
  ASSERT_NE(at, std::string::npos) << text;
  const int64_t diverged = std::stoll(text.substr(at + key.size()));
  const int64_t read = t->iteration();
  EXPECT_LE(diverged, read);
  EXPECT_TRUE(read % 5 == 0 || read % 7 == 0) << "found at iteration " << read;
  const std::string newest = LatestCheckpoint(c.checkpoint_dir);
  if (!newest.empty()) EXPECT_LT(ReadMeta(newest).iter, diverged);
}

TEST(Reliability, DivergenceStopsBeforeItIsCheckpointed) {
  SetNumThreads(1);
  Small s;
  LocalCommunicator comm;
  TrainConfig c = s.Checkpointing("diverge", 1);
  c.lr = 1e6;
  auto t = s.Make(&comm, c);
  const Stop stop = RunUntilStop(*t, s.data);
  EXPECT_EQ(stop.code(), kExitDiverged);
  EXPECT_TRUE(Has(stop.what(), "training diverged at iteration " + std::to_string(t->iteration())))
      << stop.what();
  const std::string newest = LatestCheckpoint(c.checkpoint_dir);
  if (!newest.empty())
    EXPECT_LT(ReadMeta(newest).iter, t->iteration());  // never the diverged model
  // The same run at the default rate does not stop.
  auto healthy = s.Make(&comm);
  EXPECT_EQ(RunUntilStop(*healthy, s.data).code(), -1);
  // With the check off (--divergence-factor 0) the diverging run is not stopped for it (it
  // may still end on a non-finite loss, an error of its own).
  TrainConfig off = c;
  off.divergence_factor = 0;
  off.checkpoint_dir.clear();
  off.checkpoint_every = 0;
  auto unchecked = s.Make(&comm, off);
  int code = -1;
  try {
    code = RunUntilStop(*unchecked, s.data).code();
  } catch (const Error&) {
    code = -2;
  }
  EXPECT_NE(code, kExitDiverged);
  EXPECT_GT(unchecked->iteration(), t->iteration());
}

/// Flips one byte in the middle of `file`.
void Corrupt(const std::string& file) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  const auto size = fs::file_size(file);
  f.seekg(size / 2);
  char c = 0;
  f.read(&c, 1);
  f.seekp(size / 2);
  c ^= 0x5a;
  f.write(&c, 1);
}

TEST(Reliability, ResumeSkipsDamagedCheckpoints) {
  SetNumThreads(1);
  Small s;
  LocalCommunicator comm;
  TrainConfig c = s.Checkpointing("skip_damaged", 4);
  c.iterations = 8;
  s.Make(&comm, c)->Run(s.data, nullptr, nullptr);
  Corrupt(CheckpointFolder(c.checkpoint_dir, 8) + "/rank-00000.h5");
  c.resume_dir = c.checkpoint_dir;
  c.iterations = 10;
  ::testing::internal::CaptureStderr();
  auto t = s.Make(&comm, c);
  t->Run(s.data, nullptr, nullptr);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(Has(err, "skipping the damaged checkpoint " + CheckpointFolder(c.checkpoint_dir, 8)))
      << err;
  EXPECT_EQ(t->iteration(), 10);
  // Every checkpoint damaged: an error that says so.
  for (int64_t it : {4, 8, 10}) Corrupt(CheckpointFolder(c.checkpoint_dir, it) + "/rank-00000.h5");
  ::testing::internal::CaptureStderr();
  try {
    s.Make(&comm, c)->Run(s.data, nullptr, nullptr);
    ADD_FAILURE() << "resumed from damaged checkpoints";
  } catch (const Error& e) {
    EXPECT_TRUE(Has(e.what(), "none of the 3 checkpoint(s)")) << e.what();
  }
  ::testing::internal::GetCapturedStderr();
}

TEST(Reliability, TablesAreOptionalAndStoredByTheirNonEmptyBuckets) {
  SetNumThreads(1);
  Small s;
  s.cfg.lsh.family = HashFamily::kDwta;  // K=6 of bin 8: 2^18 buckets per table
  s.cfg.lsh.k = 6;
  LocalCommunicator comm;
  auto a = s.Make(&comm);
  std::vector<double> expect;
  for (int64_t it = 0; it < 16; ++it)
    expect.push_back(a->Step(s.data, testing::Batch(it, 64, s.data.size())));
  auto b = s.Make(&comm);
  for (int64_t it = 0; it < 7; ++it) b->Step(s.data, testing::Batch(it, 64, s.data.size()));
  const std::string with = Dir("tables_with"), without = Dir("tables_without");
  b->SaveCheckpoint(with, 0, 0, 1);
  TrainConfig c = s.cfg;
  c.checkpoint_tables = false;
  auto b2 = s.Make(&comm, c);
  b2->LoadCheckpoint(LatestCheckpoint(with));
  b2->SaveCheckpoint(without, 0, 0, 1);
  const auto size_with = fs::file_size(LatestCheckpoint(with) + "/rank-00000.h5");
  const auto size_without = fs::file_size(LatestCheckpoint(without) + "/rank-00000.h5");
  // Weights, biases and Adam moments of both layers; 8 tables of 2^18 offsets would add 8 MB.
  const uint64_t state = static_cast<uint64_t>(s.cfg.hidden[0] * (s.data.num_features + 1) +
                                               s.data.num_labels * (s.cfg.hidden[0] + 1)) *
                         12;
  EXPECT_LT(size_with, 2 * state + (1u << 18)) << "tables stored by every bucket";
  EXPECT_LT(size_without, size_with);
  // With tables: exactly the uninterrupted losses. Without: rebuilt from the weights, a
  // working model (finite losses, the same iteration).
  auto r = s.Make(&comm);
  r->LoadCheckpoint(LatestCheckpoint(with));
  for (int64_t it = 7; it < 16; ++it)
    EXPECT_EQ(r->Step(s.data, testing::Batch(it, 64, s.data.size())), expect[it])
        << "iteration " << it + 1;
  auto q = s.Make(&comm);
  EXPECT_EQ(q->LoadCheckpoint(LatestCheckpoint(without)).iter, 7);
  for (int64_t it = 7; it < 16; ++it)
    EXPECT_TRUE(std::isfinite(q->Step(s.data, testing::Batch(it, 64, s.data.size()))));
}

TEST(Reliability, FailedExportLeavesTheExistingFile) {
  SetNumThreads(1);
  Small s;
  LocalCommunicator comm;
  auto t = s.Make(&comm);
  t->Step(s.data, testing::Batch(0, 64, s.data.size()));
  const std::string dir = Dir("export_atomic");
  t->SaveCheckpoint(dir, 0, 0, 1);
  const std::string out = testing::TmpPath("atomic.h5");
  ExportModel(LatestCheckpoint(dir), out);
  const auto good = fs::file_size(out);
  Corrupt(LatestCheckpoint(dir) + "/rank-00000.h5");
  EXPECT_THROW(ExportModel(LatestCheckpoint(dir), out), Error);
  EXPECT_EQ(fs::file_size(out), good);
  EXPECT_FALSE(fs::exists(out + ".tmp"));
}

TEST(Reliability, FailedDataWriteLeavesTheExistingFile) {
  Small s;
  const std::string path = testing::WriteFile("kept.txt", "1 2 2\n0 1:1\n");
  fs::create_directories(path + ".tmp");  // the temporary file cannot be created
  EXPECT_THROW(WriteXc(s.data, path), Error);
  EXPECT_THROW(WriteBinary(s.data, path), Error);
  EXPECT_EQ(fs::file_size(path), 12u);
  fs::remove(path + ".tmp");
  WriteBinary(s.data, path);  // and when it can, the file is replaced whole
  EXPECT_TRUE(ReadXc(path) == s.data);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(Reliability, ASecondWriterOfOnePathIsRefused) {
  // Two processes writing one output (two `predict --out F` at once) wrote the same F.tmp,
  // and one reported rows the file did not hold. The writer's lock on F.tmp (an open file
  // description's, which another description meets even in this process) refuses the
  // second, naming the file, and leaves F as it was; once the lock is gone F is written.
  const std::string path = testing::WriteFile("locked.tsv", "first\n");
  const int held = ::open((path + ".tmp").c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(held, 0);
  struct flock whole = {};
  whole.l_type = F_WRLCK;
  whole.l_whence = SEEK_SET;
  ASSERT_EQ(::fcntl(held, F_OFD_SETLK, &whole), 0);
  bool wrote = false;
  auto write = [&](const std::string& tmp) {
    std::ofstream(tmp) << "second\n";
    wrote = true;
  };
  try {
    WriteAtomically(path, write);
    ADD_FAILURE() << "a second writer was not refused";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("cannot write " + path + ": another process is writing it (" +
                                   path + ".tmp is locked)"),
        std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(wrote);
  EXPECT_EQ(testing::ReadFile(path), "first\n");
  ::close(held);  // the first writer ends
  WriteAtomically(path, write);
  EXPECT_EQ(testing::ReadFile(path), "second\n");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(Reliability, CheckpointFolderIsCheckedAtStart) {
  const std::string file = testing::WriteFile("not_a_dir", "x");
  try {
    CheckWritableDir(file + "/ckpt", 0, "--checkpoint-dir");
    ADD_FAILURE() << "a folder under a file was accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(Has(e.what(), "option --checkpoint-dir: cannot create " + file + "/ckpt ("))
        << e.what();
    EXPECT_TRUE(Has(e.what(), "Not a directory")) << e.what();
  }
  try {
    CheckWritableDir(testing::TmpPath("roomy"), int64_t{1} << 60, "--checkpoint-dir");
    ADD_FAILURE() << "an exabyte was found free";
  } catch (const Error& e) {
    EXPECT_TRUE(Has(e.what(), "MB free, one checkpoint needs about")) << e.what();
  }
  // And through a run: the error comes before the first step.
  SetNumThreads(1);
  Small s;
  LocalCommunicator comm;
  TrainConfig c = s.cfg;
  c.checkpoint_dir = file + "/ckpt";
  c.checkpoint_every = 10;
  auto t = s.Make(&comm, c);
  EXPECT_THROW(t->Run(s.data, nullptr, nullptr), Error);
  EXPECT_EQ(t->iteration(), 0);
}

}  // namespace
}  // namespace dslide
