// RunTraining on data held in memory (the Python package): the same checks, warnings and run
// as `dslide train`, with the trainer kept afterwards as the model.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "config/config.h"
#include "data/dataset.h"
#include "dist/communicator.h"
#include "train/evaluator.h"
#include "train/trainer.h"

namespace dslide {

/// Data sets in memory that replace the files of a run: each non-null set is used (and
/// moved from) instead of reading the file its option names; the option's value then only
/// names the set in messages. `valid` needs cfg.valid_file set, `test` cfg.test_file.
struct RunData {
  Dataset* train = nullptr;
  Dataset* valid = nullptr;
  Dataset* test = nullptr;
  /// The sets are what the files their options name held, read by the caller (an ensemble
  /// reads them once for all its members): messages count the files' lines, as a read would.
  bool read_from_files = false;
  /// Whether the run gives the warnings about the training set's points (an ensemble's later
  /// members do not repeat the first one's).
  bool warn = true;
};

/// What a run leaves behind.
struct TrainingRun {
  /// The model: built once the data and the options have passed their checks, and kept when
  /// Trainer::Run throws (a Stop: after a signal it holds the weights of the last step).
  std::unique_ptr<Trainer> trainer;
  /// Training points after --valid-fraction's holdout (with --batch, an iteration's data
  /// position: DataPosition).
  int64_t train_points = 0;
  /// True from the construction of the trainer on: collectives have begun, so an error from
  /// here on may be one rank's alone. Before it, every rank throws the same error.
  bool collective = false;
};

/// RunTraining with the sets of `data` in memory (the others read from cfg's files); fills
/// `run` as it goes; the run's lines, records and warnings go to `events` (null: none).
/// Returns the final evaluation.
EvalResult RunTraining(const TrainConfig& cfg, Communicator* comm, RunData data, TrainingRun* run,
                       RunEvents* events);

/// The trainer of `cfg` for data of `features` and `labels` (named `data_name` in messages),
/// its backend made as cfg says. A model that cannot fit in memory (refused before it is
/// allocated, or an allocation that failed) throws dslide::Error naming --hidden, the data
/// and the sizes. A new model's output biases come from the labels of `train` (Trainer).
/// The weights and biases of a network of `hidden` layers from `features` inputs to `labels`
/// outputs; `hidden_text` (may be null) gets the --hidden value that names it ("" for none).
int64_t NetworkParameters(const std::vector<int64_t>& hidden, int64_t features, int64_t labels,
                          std::string* hidden_text);

std::unique_ptr<Trainer> BuildTrainer(const TrainConfig& cfg, Communicator* comm, int64_t features,
                                      int64_t labels, const std::string& data_name,
                                      const Dataset* train = nullptr);

/// The data position (epoch, next point) of a run of `points` training points in batches of
/// `batch` after `iteration` iterations from the start (epoch -1, position `points`, before
/// the first), as a checkpoint records it.
void DataPosition(int64_t iteration, int64_t points, int64_t batch, int64_t* epoch, int64_t* pos);

}  // namespace dslide
