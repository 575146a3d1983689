// RunTraining, the entry point of `dslide train`: reads the training, validation and test
// data (or holds back part of the training data for validation), checks and warns of what
// they hold, adopts a resumed checkpoint's settings, builds the trainer and runs it. The same
// on data held in memory (run_training.h), keeping the trainer.
#include "train/run_training.h"

#include <algorithm>
#include <filesystem>
#include <memory>
#include <new>
#include <string>

#include "common/error.h"
#include "common/memory_limit.h"
#include "common/parallel.h"
#include "devices/backend_factory.h"
#include "train/ensemble.h"

namespace dslide {

namespace {

/// Warnings about data that loads but may not be what was meant: points without features
/// (the network sees only its biases for them) and feature values far beyond float's
/// comfortable range.
/// `in_memory`: `file` names a set given in memory, whose points are rows counted from 0.
void WarnOfData(const Dataset& d, const std::string& file, bool in_memory, RunEvents* events) {
  int64_t empty = 0, first = -1;
  for (int64_t i = 0; i < d.size(); ++i)
    if (d.feat_off[i + 1] == d.feat_off[i] && empty++ == 0) first = i;
  const bool binary = !in_memory && IsBinaryDataset(file);
  std::string text;  // one block, written at once
  if (empty > 0)
    text += Format(
        "warning: %s: %lld of %lld points have no features (the first at %s %lld); the network "
        "sees only its biases for them\n",
        file.c_str(), (long long)empty, (long long)d.size(),
        in_memory ? "row"
        : binary  ? "point"
                  : "line",
        (long long)(in_memory ? first
                    : binary  ? first + 1
                              : first + 2));
  if (d.max_abs_value > kLargeFeatureValue)
    text += Format(
        "warning: %s: a feature value of %g, far beyond %g: scale or clip the features, or "
        "training may overflow and diverge\n",
        d.max_abs_at.c_str(), d.max_abs_value, kLargeFeatureValue);
  if (!text.empty()) events->Line(text);
}

}  // namespace

int64_t NetworkParameters(const std::vector<int64_t>& hidden, int64_t features, int64_t labels,
                          std::string* hidden_text) {
  int64_t params = 0, in = features;
  for (int64_t h : hidden) {
    params += (in + 1) * h;
    in = h;
    if (hidden_text != nullptr)
      *hidden_text += (hidden_text->empty() ? "" : ",") + std::to_string(h);
  }
  return params + (in + 1) * labels;
}

std::unique_ptr<Trainer> BuildTrainer(const TrainConfig& cfg, Communicator* comm, int64_t features,
                                      int64_t labels, const std::string& data_name,
                                      const Dataset* train) {
  // What the model is, for the messages: its parameters and the options that set them.
  std::string hidden;
  const int64_t params = NetworkParameters(cfg.hidden, features, labels, &hidden);
  const std::string model =
      detail::Concat(hidden.empty() ? std::string("no hidden layer") : "--hidden " + hidden,
                     " and ", data_name, "'s ", features, " features and ", labels, " labels");
  try {
    return std::make_unique<Trainer>(cfg, comm,
                                     MakeBackend(cfg.device, comm->rank(), cfg.gpus_per_node),
                                     features, labels, train);
  } catch (const OutOfMemory& e) {
    throw Error(detail::Concat("cannot allocate the model of ", model, ": ", e.what()));
  } catch (const std::bad_alloc&) {
    // Weights, biases and both Adam moments of this rank's shard.
    throw Error(detail::Concat("cannot allocate the model: ", params, " parameters (about ",
                               params * 12 / comm->size() / (1 << 20),
                               " MB of weights and Adam moments per rank over ", comm->size(),
                               " rank(s)) for ", model));
  }
}

EvalResult RunTraining(const TrainConfig& cfg, Communicator* comm, RunEvents* events) {
  TrainingRun run;
  return RunTraining(cfg, comm, RunData{}, &run, events);
}

void DataPosition(int64_t iteration, int64_t points, int64_t batch, int64_t* epoch, int64_t* pos) {
  // Trainer::Run: an epoch is ceil(points / batch) iterations, its last batch the rest.
  const int64_t per_epoch = (points + batch - 1) / batch;
  if (iteration <= 0) {
    *epoch = -1;
    *pos = points;
    return;
  }
  *epoch = (iteration - 1) / per_epoch;
  *pos = std::min(points, (iteration - *epoch * per_epoch) * batch);
}

EvalResult RunTraining(const TrainConfig& asked, Communicator* comm, RunData data, TrainingRun* run,
                       RunEvents* events) {
  if (events == nullptr) events = NoEvents();
  TrainConfig cfg = asked;
  SetNumThreads(cfg.threads);
  // Folders of an ensemble, refused before the data is read: --resume continues one model,
  // and eval and predict of a folder holding members would read them, not this run's model.
  if (!cfg.resume_dir.empty()) {
    const size_t members = EnsembleMembers(cfg.resume_dir).size();
    DSLIDE_CHECK(members == 0, "option --resume: ", cfg.resume_dir, " holds ",
                 EnsembleFolderWhat(cfg.resume_dir, members),
                 "; --resume continues one model (--resume ", cfg.resume_dir,
                 "/member-K with that member's --seed)");
  }
  // A member trained again inside a folder whose linear member or reranker was solved beside
  // the networks before: eval and predict of the folder would mix it with this run's model.
  if (comm->rank() == 0) {
    namespace fs = std::filesystem;
    std::error_code ec;
    for (const std::string& dir : {cfg.checkpoint_dir, cfg.save_dir}) {
      const fs::path p = fs::path(dir).lexically_normal();
      const fs::path member = p.has_filename() ? p : p.parent_path();
      if (dir.empty() || member.filename().string().rfind("member-", 0) != 0) continue;
      const fs::path folder = member.parent_path().empty() ? fs::path(".") : member.parent_path();
      if (fs::exists(folder / "linear", ec))
        events->Warning(Format(
            "warning: %s holds a linear model solved beside the networks before this run (train "
            "--linear or --rerank); eval and predict of %s still mix it with this run's model: "
            "train the folder anew, or use %s alone\n",
            (folder / "linear").string().c_str(), folder.string().c_str(), dir.c_str()));
    }
  }
  CheckEnsembleFolder(cfg.checkpoint_dir, 1, "--checkpoint-dir");
  CheckEnsembleFolder(cfg.save_dir, 1, "--save");
  // A set in memory, else the file.
  auto load = [](Dataset* memory, const std::string& file) {
    return memory != nullptr ? std::move(*memory) : ReadXc(file);
  };
  Dataset train = load(data.train, cfg.train_file);
  const bool train_rows = data.train != nullptr && !data.read_from_files;  // rows, not lines
  if (train_rows)
    DSLIDE_CHECK(train.size() > 0, cfg.train_file, ": no points to train on (0 rows)");
  DSLIDE_CHECK(train.size() > 0, cfg.train_file, ":1: no points to train on (the header says 0)");
  if (comm->rank() == 0 && data.warn) WarnOfData(train, cfg.train_file, train_rows, events);
  auto check_header = [&](const Dataset& d, const std::string& file) {
    DSLIDE_CHECK(d.num_features == train.num_features && d.num_labels == train.num_labels, file,
                 ":1: header says ", d.num_features, " features and ", d.num_labels,
                 " labels, the training file ", train.num_features, " and ", train.num_labels);
  };
  Dataset valid, test;
  DSLIDE_CHECK(data.valid == nullptr || !cfg.valid_file.empty(),
               "validation data in memory needs a name in --valid");
  DSLIDE_CHECK(data.test == nullptr || !cfg.test_file.empty(),
               "test data in memory needs a name in --test");
  if (!cfg.valid_file.empty()) {
    valid = load(data.valid, cfg.valid_file);
    check_header(valid, cfg.valid_file);
  } else if (cfg.valid_fraction > 0) {
    Dataset all = std::move(train);
    SplitHoldout(all, cfg.valid_fraction, cfg.seed, &train, &valid);
    DSLIDE_CHECK(valid.size() > 0 && train.size() > 0, "option --valid-fraction ",
                 cfg.valid_fraction, " leaves ", train.size(), " training and ", valid.size(),
                 " validation points of ", all.size());
  }
  if (cfg.validating()) {
    int64_t labelled = 0;
    for (int64_t i = 0; i < valid.size(); ++i) labelled += valid.NumLabels(i) > 0 ? 1 : 0;
    const std::string what =
        cfg.valid_file.empty() ? "the held-back validation points" : cfg.valid_file;
    DSLIDE_CHECK(labelled > 0, what,
                 ": no validation point has a label; nothing could be selected on it");
    if (labelled < 200 && comm->rank() == 0)
      events->Line(
          Format("warning: %s: only %lld labelled validation points; one point moves P@1 by %.4f\n",
                 what.c_str(), (long long)labelled, 1.0 / static_cast<double>(labelled)));
  }
  if (!cfg.test_file.empty()) {
    test = load(data.test, cfg.test_file);
    check_header(test, cfg.test_file);
    DSLIDE_CHECK(test.size() > 0, cfg.test_file, ": no points to score (the header says 0)");
  }
  if (!cfg.resume_dir.empty()) {
    // Settings left to auto continue with the checkpoint's (explicit ones are checked).
    const CheckpointMeta m = ReadResumeMeta(cfg.resume_dir);
    cfg.settings_from_checkpoint = AdoptCheckpointSettings(m, &cfg);
    if (m.min_negatives == 0 && comm->rank() == 0)
      events->Line(Format(
          "note: %s predates the floor of negatives; --min-negatives %lld applies from here\n",
          cfg.resume_dir.c_str(), (long long)cfg.min_negatives));
  }
  std::unique_ptr<Trainer>& trainer = run->trainer;
  run->train_points = train.size();
  run->collective = true;
  trainer = BuildTrainer(cfg, comm, train.num_features, train.num_labels, cfg.train_file, &train);
  return trainer->Run(train, cfg.validating() ? &valid : nullptr,
                      cfg.test_file.empty() ? nullptr : &test, events);
}

}  // namespace dslide
