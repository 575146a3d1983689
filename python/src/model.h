// Model, a trained or loaded network of the Python package and the ranks it is spread over
// (predict, evaluate, save, weights), and Load, the model of a checkpoint or serving model.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "arrays.h"
#include "collective.h"
#include "common/parallel.h"
#include "io/checkpoint.h"
#include "io/output_path.h"
#include "train/evaluator.h"
#include "train/predict.h"
#include "train/run_training.h"
#include "train/trainer.h"

namespace dslide::py {

namespace nb = nanobind;

inline nb::dict EvalDict(const EvalResult& r) {
  nb::dict d;
  for (size_t i = 0; i < r.k.size(); ++i)
    d[("p_at_" + std::to_string(r.k[i])).c_str()] = r.p_at_k[i];
  d["loss"] = r.loss;
  d["points"] = r.points;
  d["seconds"] = r.seconds;
  return d;
}

/// A NumPy array of `shape` that owns `v` (moved in; freed with the array).
template <size_t N, class T>
nb::ndarray<nb::numpy, T, nb::ndim<N>> Owned(std::vector<T> v,
                                             std::initializer_list<size_t> shape) {
  auto* owned = new std::vector<T>(std::move(v));
  owned->reserve(1);  // a data pointer also for 0 elements
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T, nb::ndim<N>>(owned->data(), shape, owner);
}

template <class T>
nb::ndarray<nb::numpy, T, nb::ndim<2>> Matrix(std::vector<T> v, size_t rows, size_t cols) {
  return Owned<2>(std::move(v), {rows, cols});
}

template <class T>
nb::ndarray<nb::numpy, T, nb::ndim<1>> Vector(std::vector<T> v) {
  const size_t n = v.size();
  return Owned<1>(std::move(v), {n});
}

/// OpenMP threads for one call (0: as they are), restored after it, also when it throws.
struct ThreadScope {
  explicit ThreadScope(int threads) : before(NumThreads()) { SetNumThreads(threads); }
  ~ThreadScope() { SetNumThreads(before); }
  ThreadScope(const ThreadScope&) = delete;
  ThreadScope& operator=(const ThreadScope&) = delete;
  int before;
};

/// A trained or loaded network and the ranks it is spread over.
class Model {
 public:
  Model(const Comm& comm, std::unique_ptr<Trainer> trainer)
      : comm_(comm.comm), guard_(comm.guard), trainer_(std::move(trainer)) {}

  /// Trained here on `points` training points: its data position follows from the iteration.
  void SetTrainingPoints(int64_t points) { points_ = points; }
  /// Loaded: the data position its checkpoint recorded.
  void SetPosition(int64_t epoch, int64_t pos) {
    epoch_ = epoch;
    pos_ = pos;
  }

  int64_t features() const { return trainer_->spec().layers.front().in_dim; }
  int64_t labels() const { return trainer_->spec().layers.back().out_dim; }
  int64_t iteration() const { return trainer_->iteration(); }
  int ranks() const { return comm_->size(); }
  int rank() const { return comm_->rank(); }
  std::vector<int64_t> layer_sizes() const {
    std::vector<int64_t> out;
    for (const LayerSpec& l : trainer_->spec().layers) out.push_back(l.out_dim);
    return out;
  }
  std::string settings() const { return SettingsJson(trainer_->config()); }
  /// A loaded model's settings as its checkpoint recorded them (as given, "auto" where left
  /// to it; "" for a trained model or a checkpoint of an earlier version).
  const std::string& recorded_settings() const { return recorded_settings_; }
  void SetRecordedSettings(std::string json) { recorded_settings_ = std::move(json); }
  nb::list evals() const {
    nb::list out;
    for (const auto& [iter, r] : trainer_->evals()) out.append(nb::make_tuple(iter, EvalDict(r)));
    return out;
  }

  /// Collective: the output index of approximate top-k (Trainer::BuildOutputIndex) with
  /// `ann`'s settings (its `approximate` ignored); the slowest rank's seconds.
  double BuildIndex(const AnnConfig& ann, int threads) {
    return Collective(comm_.get(), [&] {
      ThreadScope scope(threads);
      return BuildOutputIndex(*trainer_, ann);
    });
  }
  /// Whether the output index is built (for these weights).
  bool has_index() const { return trainer_->output_index() != nullptr; }
  /// The output index's candidates per point and rank as asked for (its ef, the same on
  /// every rank; 0: none built).
  int64_t index_ef() const { return has_index() ? trainer_->output_index()->options().ef : 0; }

  nb::tuple Predict(Data& in, int k, int threads, bool approximate) {
    CheckInput(in);
    if (k < 1 || k > labels())
      throw nb::value_error(detail::Concat("top-k: ", k, " labels asked for, the model has ",
                                           labels(), " (k must be in [1, ", labels(), "])")
                                .c_str());
    if (approximate && !has_index())
      throw nb::value_error("approximate: the output index is not built (build_index first)");
    std::vector<int32_t> ids;
    std::vector<float> scores;
    Collective(comm_.get(), [&] {
      ThreadScope scope(threads);
      std::vector<double> probs;
      PredictTopK(*trainer_, in.data, 0, k, &ids, &probs,
                  approximate ? ScoreMode::kIndex : ScoreMode::kExact);
      scores.assign(probs.begin(), probs.end());
      return 0;
    });
    const size_t n = static_cast<size_t>(in.rows());
    return nb::make_tuple(Matrix(std::move(ids), n, k), Matrix(std::move(scores), n, k));
  }

  nb::dict Evaluate(Data& in, const std::vector<int>& ks, int threads) {
    CheckInput(in);
    for (int k : ks)
      if (k < 1 || k > labels())
        throw nb::value_error(
            detail::Concat("P@", k, " needs at least ", k, " labels, the model has ", labels())
                .c_str());
    const EvalResult r = Collective(comm_.get(), [&] {
      ThreadScope scope(threads);
      return trainer_->Evaluate(in.data, 0, /*sampled=*/false, ks);
    });
    return EvalDict(r);
  }

  /// Collective: the approximate top-k's P@k (the output index's) with 'recall' (of the exact
  /// top max(ks)) and its 'seconds', and the exact evaluation under 'exact'.
  nb::dict EvaluateApproximately(Data& in, const std::vector<int>& ks, int threads) {
    CheckInput(in);
    if (!has_index())
      throw nb::value_error("approximate: the output index is not built (build_index first)");
    const ApproximateEval a = Collective(comm_.get(), [&] {
      ThreadScope scope(threads);
      return EvaluateApproximate(*trainer_, in.data, 0, ks, ScoreMode::kIndex);
    });
    nb::dict d = EvalDict(a.approx);
    d["seconds"] = a.approx_seconds;
    d["recall"] = a.recall;
    d["exact"] = EvalDict(a.exact);
    return d;
  }

  /// Collective: every layer's weights (out x in, a row per neuron) and biases, whole on every
  /// rank (the ranks' blocks gathered); the output layer's row i is label i's, whatever order
  /// its neurons were trained in (as ExportModel writes them).
  nb::list Weights() {
    const ModelSpec& spec = trainer_->spec();
    const size_t n = spec.layers.size();
    std::vector<std::vector<float>> w(n), b(n);
    Collective(comm_.get(), [&] {
      if (guard_ != nullptr && comm_->size() > 1) guard_->Enter("weights");
      for (size_t l = 0; l < n; ++l) {
        const LayerSpec& s = spec.layers[l];
        LayerState st;
        trainer_->backend().SaveLayer(static_cast<int>(l), kWeights, &st);
        if (s.begin == 0 && s.end == s.out_dim) {  // one rank, or a replica of the model
          w[l] = std::move(st.w);
          b[l] = std::move(st.b);
        } else {  // blocks of neurons in rank order
          const std::vector<int64_t> rows = comm_->AllgatherOne(s.local(), Traffic::kControl);
          std::vector<int64_t> cells(rows.size());
          for (size_t r = 0; r < rows.size(); ++r) cells[r] = rows[r] * s.in_dim;
          w[l].resize(static_cast<size_t>(s.out_dim * s.in_dim));
          b[l].resize(static_cast<size_t>(s.out_dim));
          comm_->Allgatherv(st.w.data(), cells, w[l].data(), Traffic::kControl);
          comm_->Allgatherv(st.b.data(), rows, b[l].data(), Traffic::kControl);
        }
        if (s.is_output && !spec.labels.identity()) {  // rows in label order
          const int64_t d = s.in_dim;
          std::vector<float> wl(w[l].size()), bl(b[l].size());
          for (int64_t label = 0; label < s.out_dim; ++label) {
            const int64_t neuron = spec.labels.Neuron(static_cast<int32_t>(label));
            std::copy(w[l].begin() + neuron * d, w[l].begin() + (neuron + 1) * d,
                      wl.begin() + label * d);
            bl[label] = b[l][neuron];
          }
          w[l].swap(wl);
          b[l].swap(bl);
        }
      }
      return 0;
    });
    nb::list out;
    for (size_t l = 0; l < n; ++l) {
      const LayerSpec& s = spec.layers[l];
      out.append(nb::make_tuple(
          Matrix(std::move(w[l]), static_cast<size_t>(s.out_dim), static_cast<size_t>(s.in_dim)),
          Vector(std::move(b[l]))));
    }
    return out;
  }

  void Save(const std::string& folder) {
    int64_t epoch = epoch_, pos = pos_;
    if (points_ > 0) DataPosition(iteration(), points_, trainer_->config().batch, &epoch, &pos);
    Collective(comm_.get(), [&] {
      trainer_->WriteCheckpoint(folder, epoch, pos);
      return 0;
    });
  }

 private:
  void CheckInput(const Data& in) const {
    if (in.data.num_features != features())
      throw nb::value_error(detail::Concat(in.name, ": ", in.data.num_features,
                                           " features (columns), the model has ", features(),
                                           " inputs")
                                .c_str());
  }

  std::shared_ptr<Communicator> comm_;
  JobGuard* guard_ = nullptr;
  std::unique_ptr<Trainer> trainer_;
  int64_t points_ = 0;
  int64_t epoch_ = -1, pos_ = 0;
  std::string recorded_settings_;  // a loaded model's, from its checkpoint
};

/// Collective: the model of a checkpoint folder, a --checkpoint-dir (its newest) or a serving
/// model file, over the ranks of `comm`.
std::unique_ptr<Model> Load(const std::string& path, Comm& comm);

}  // namespace dslide::py
