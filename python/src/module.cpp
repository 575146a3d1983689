// dslide._core: the Python package's extension, a thin layer over dslide's libraries (the
// trainer, checkpoints, predict and the communicators of the executable). What it adds is the
// passage between Python and C++: data sets from NumPy arrays (arrays.cpp), options as
// (name, value) pairs through the option table, the GIL released while C++ runs, stop
// signals during training, and errors as Python exceptions. The API is python/dslide.
#include <dlfcn.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "arrays.h"
#include "backend/layer_backend.h"
#include "common/checksum.h"
#include "common/error.h"
#include "common/parallel.h"
#include "common/stop_signal.h"
#include "config/config.h"
#include "devices/backend_factory.h"
#include "dist/mpi_communicator.h"
#include "io/checkpoint.h"
#include "io/output_path.h"
#include "job_guard.h"
#include "train/predict.h"
#include "train/run_events.h"
#include "train/run_training.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace dslide::py {

namespace {

/// The ranks a model is spread over: in-process (one rank) or MPI.
struct Comm {
  std::shared_ptr<Communicator> comm;
  /// The job guard where the communicator spans MPI's world (job_guard.h), else null.
  JobGuard* guard = nullptr;
  int rank() const { return comm->rank(); }
  int size() const { return comm->size(); }
  /// Collective: whether every rank is `ok`, and whether every rank has the same `digest`
  /// (of the arguments of the collective call `what`, which must be alike on every rank).
  std::pair<bool, bool> Agree(bool ok, uint64_t digest, const std::string& what);
};

/// One data set of a call, built from arrays or read from a file; training moves it out.
struct Data {
  Dataset data;
  std::string name;
  int64_t rows() const { return data.size(); }
  /// A checksum of the set's sizes and arrays.
  uint64_t Digest() const;
};

/// Runs `f` with the GIL released. A failure inside a collective on one of P > 1 ranks would
/// leave the others waiting in it for ever: as the executable does, the failing rank then
/// prints its error and ends the job (MPI_Abort). With one rank, or for a Stop (which every
/// rank throws alike), the exception goes on to Python.
template <class F>
auto Collective(Communicator* comm, F&& f) {
  try {
    nb::gil_scoped_release release;
    return f();
  } catch (const Stop&) {
    throw;
  } catch (const nb::builtin_exception&) {
    throw;  // raised on purpose, alike on every rank
  } catch (const std::exception& e) {
    if (comm->size() > 1) {
      const bool oom = dynamic_cast<const std::bad_alloc*>(&e) != nullptr;
      std::fprintf(stderr, "[rank %d] dslide error: %s\n", comm->rank(),
                   oom ? "out of memory (an allocation failed)" : e.what());
      std::fflush(stderr);
      dist::MpiSession::Abort(1);
    }
    throw;
  }
}

/// Runs `f` (checks that every rank makes alike, before any collective) with the GIL
/// released; dslide's errors become ValueError.
template <class F>
auto Checked(F&& f) {
  try {
    nb::gil_scoped_release release;
    return f();
  } catch (const Error& e) {
    throw nb::value_error(e.what());
  }
}

/// Runs `f` inside a collective call (Collective) where dslide's errors are about the call's
/// inputs (files, checkpoints) up to where `inputs_checked()` says so: with one rank they
/// become ValueError, as Checked's do. With P > 1 ranks such an error may be one rank's alone
/// (each rank reads its part of a checkpoint), so it goes on to Collective, which ends the
/// job.
template <class F, class G>
auto InputsChecked(const Communicator& comm, G&& inputs_checked, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    if (comm.size() > 1 || inputs_checked()) throw;
    throw nb::value_error(e.what());
  }
}

std::pair<bool, bool> Comm::Agree(bool ok, uint64_t digest, const std::string& what) {
  if (size() == 1) return {ok, true};
  return Collective(comm.get(), [&] {
    if (guard != nullptr) guard->Enter(what);  // every rank is here, or one has left
    int64_t low[2] = {ok ? 1 : 0, static_cast<int64_t>(digest)};
    int64_t high = low[1];
    comm->Allreduce(low, 2, ReduceOp::kMin, Traffic::kControl);
    comm->Allreduce(&high, 1, ReduceOp::kMax, Traffic::kControl);
    return std::make_pair(low[0] == 1, low[1] == high);
  });
}

uint64_t Data::Digest() const { return data.Digest(); }

/// The stop signals of the executable (SIGTERM, SIGINT, SIGUSR1: the run ends after its
/// current step) while training runs, and the process's own handlers (Python's) again after.
class StopSignals {
 public:
  explicit StopSignals(int ranks) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int i = 0; i < 3; ++i) sigaction(kSignals[i], nullptr, &saved_[i]);
    ClearStopSignal();
    SetStopNotice(ranks > 1 ? std::string()
                            : "dslide: stop requested: the run stops after its current step (a "
                              "second signal exits at once)\n");
    InstallStopHandlers();
    active_ = true;
  }
  ~StopSignals() {
    std::lock_guard<std::mutex> lock(mutex_);
    active_ = false;
    for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &saved_[i], nullptr);
    ClearStopSignal();
  }
  /// Asks the run to stop after its current step, as a signal does (false: no run). Never
  /// while the handlers are being put back (SIGUSR1 would then end the process).
  static bool Request() {
    std::lock_guard<std::mutex> lock(mutex_);
    return active_ && std::raise(SIGUSR1) == 0;
  }

 private:
  static constexpr int kSignals[3] = {SIGTERM, SIGINT, SIGUSR1};
  static inline std::mutex mutex_;
  static inline bool active_ = false;
  struct sigaction saved_[3];
};

nb::dict EvalDict(const EvalResult& r) {
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

  nb::tuple Predict(Data& in, int k, int threads) {
    CheckInput(in);
    if (k < 1 || k > labels())
      throw nb::value_error(detail::Concat("top-k: ", k, " labels asked for, the model has ",
                                           labels(), " (k must be in [1, ", labels(), "])")
                                .c_str());
    std::vector<int32_t> ids;
    std::vector<float> scores;
    Collective(comm_.get(), [&] {
      ThreadScope scope(threads);
      std::vector<double> probs;
      PredictTopK(*trainer_, in.data, 0, k, &ids, &probs);
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
  /// OpenMP threads for one call (0: as they are), restored after it.
  struct ThreadScope {
    explicit ThreadScope(int threads) : before(NumThreads()) { SetNumThreads(threads); }
    ~ThreadScope() { SetNumThreads(before); }
    int before;
  };

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

/// A run's events handed to Python callables, each called with the GIL held: lines to
/// `on_line(text)`, records to `on_record(json)`, warnings to `on_warning(text)` (None: lines
/// and records dropped, warnings on standard error). An exception a callable raises is
/// reported as unraisable and the run goes on: the package's callables catch their own.
class PyEvents final : public RunEvents {
 public:
  PyEvents(nb::object on_line, nb::object on_record, nb::object on_warning)
      : line_(std::move(on_line)), record_(std::move(on_record)), warning_(std::move(on_warning)) {}
  void Line(const std::string& text) override { Call(line_, text); }
  void Record(const std::string& json) override { Call(record_, json); }
  void Warning(const std::string& text) override {
    if (warning_.is_none())
      WarnOnStderr(text);
    else
      Call(warning_, text);
  }

 private:
  static void Call(const nb::object& f, const std::string& text) {
    if (f.is_none()) return;
    nb::gil_scoped_acquire gil;
    try {
      f(text);
    } catch (nb::python_error& e) {
      e.discard_as_unraisable("dslide's run events");
    }
  }
  nb::object line_, record_, warning_;
};

std::vector<std::pair<std::string, std::string>> Pairs(const nb::list& options) {
  std::vector<std::pair<std::string, std::string>> out;
  for (nb::handle h : options) out.push_back(nb::cast<std::pair<std::string, std::string>>(h));
  return out;
}

/// Training: options as (name, value) pairs; `train`, `valid`, `test`: sets in memory (None:
/// the file its option names); the run's events to `on_line`, `on_record` and `on_warning`
/// (PyEvents). Returns {"model", "result", "stopped", "message", "signal"}: a run stopped by
/// a signal or by divergence returns its model with the exit code the executable would give
/// (75, 3) and its message.
nb::dict Train(const nb::list& options, Comm& comm, Data* train, Data* valid, Data* test,
               nb::object on_line, nb::object on_record, nb::object on_warning) {
  PyEvents events(std::move(on_line), std::move(on_record), std::move(on_warning));
  TrainConfig cfg;
  const auto pairs = Pairs(options);
  Checked([&] {
    ParseTrainOptions(pairs, &cfg);
    // As `dslide train` does: the metrics lines must not go into an input file (a set in
    // memory has no file).
    CheckOutputPath("--metrics", cfg.metrics_file,
                    {{"--train", train ? std::string() : cfg.train_file},
                     {"--test", test ? std::string() : cfg.test_file},
                     {"--valid", valid ? std::string() : cfg.valid_file}});
    return 0;
  });
  RunData data{train ? &train->data : nullptr, valid ? &valid->data : nullptr,
               test ? &test->data : nullptr};
  TrainingRun run;
  EvalResult result;
  int stopped = 0;
  std::string message;
  int signal = 0;
  const int threads_before = NumThreads();
  {
    StopSignals signals(comm.size());
    try {
      result = Collective(comm.comm.get(), [&] {
        try {
          // With one rank, the run's checks after the start of its collectives (the
          // --resume checkpoint, the folders, --device) are ValueError too; from the first
          // step on an error is a failure of training.
          return InputsChecked(
              *comm.comm, [&] { return run.trainer && run.trainer->training(); },
              [&] { return RunTraining(cfg, comm.comm.get(), data, &run, &events); });
        } catch (const Error& e) {
          if (run.collective) throw;
          throw nb::value_error(e.what());  // before any collective: alike on every rank
        }
      });
    } catch (const Stop& e) {
      stopped = e.code();
      message = e.what();
    } catch (...) {
      SetNumThreads(threads_before);
      throw;
    }
    signal = StopSignal();
  }
  SetNumThreads(threads_before);
  nb::dict out;
  out["stopped"] = stopped;
  out["message"] = message;
  out["signal"] = signal == 0 ? std::string() : std::string(SignalName(signal));
  out["result"] = stopped == 0 ? nb::object(EvalDict(result)) : nb::none();
  if (run.trainer) {
    auto model = std::make_unique<Model>(comm, std::move(run.trainer));
    model->SetTrainingPoints(run.train_points);
    out["model"] = nb::cast(std::move(model));
  } else {
    out["model"] = nb::none();
  }
  return out;
}

std::unique_ptr<Model> Load(const std::string& path, Comm& comm) {
  std::string folder;
  CheckpointMeta meta;
  Checked([&] {
    folder = ResolveModel(path, "--model");
    meta = ReadModelMeta(folder);
    return 0;
  });
  std::unique_ptr<Trainer> trainer = Collective(comm.comm.get(), [&] {
    CheckpointMeta m;
    // A damaged shard, or a checkpoint that does not fit: with one rank, a ValueError.
    return InputsChecked(
        *comm.comm, [] { return false; }, [&] { return LoadModel(folder, comm.comm.get(), &m); });
  });
  auto model = std::make_unique<Model>(comm, std::move(trainer));
  model->SetPosition(meta.epoch, meta.pos);
  model->SetRecordedSettings(meta.settings);  // "" in checkpoints of earlier versions
  return model;
}

}  // namespace

}  // namespace dslide::py

NB_MODULE(_core, m) {
  using namespace dslide;
  using namespace dslide::py;
  m.doc() = "dslide's C++ core (use the dslide package, not this module)";
  m.attr("version") = DSLIDE_VERSION;
  m.attr("backends") = BuiltBackends();

  nb::class_<Comm>(m, "Comm")
      .def_prop_ro("rank", &Comm::rank)
      .def_prop_ro("size", &Comm::size)
      .def("agree", &Comm::Agree, "ok"_a, "digest"_a, "what"_a);
  m.def("local_comm", [] { return Comm{std::make_shared<LocalCommunicator>()}; });
  m.def(
      "mpi_comm",
      [](int64_t fortran_handle, const std::string& what) {
        // Making it is collective (MPI_Comm_dup): first every rank enters the guard.
        JobGuard* guard = JobGuard::For(fortran_handle);
        if (guard != nullptr) {
          nb::gil_scoped_release release;
          guard->Enter(what);
        }
        Comm c = Checked([&] {
          if (fortran_handle < 0) return Comm{std::make_shared<dist::MpiCommunicator>()};
          return Comm{std::make_shared<dist::MpiCommunicator>(fortran_handle)};
        });
        c.guard = guard;
        return c;
      },
      "fortran_handle"_a, "what"_a);
  // The job guard (job_guard.h): made with the first communicator that spans the world
  // (collective), left when Python exits.
  m.def("guard_start", &JobGuard::Start, "fortran_handle"_a);
  m.def(
      "guard_leave",
      [](int code) {
        int finalized = 0;
        MPI_Finalized(&finalized);  // by the script itself (mpi4py's MPI.Finalize())
        if (JobGuard* guard = JobGuard::Get(); guard != nullptr && !finalized) {
          nb::gil_scoped_release release;
          guard->Leave(code);
        }
      },
      "code"_a);
  m.def("launched_by_mpi", &dist::LaunchedByMpi);
  m.def("mpi_initialize", [] {
    // Open MPI's components expect its library to be global; a Python extension is loaded
    // with its own symbols local (mpi4py does the same).
    for (const char* lib : {"libmpi.so.40", "libmpi.so"})
      if (dlopen(lib, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD) != nullptr) break;
    return Checked([] { return dist::EnsureMpiInitialized(); });
  });
  m.def(
      "mpi_finalize",
      [](double seconds, int exit_code) {
        int rank = 0, initialized = 0, finalized = 0;
        MPI_Initialized(&initialized);
        MPI_Finalized(&finalized);
        if (!initialized || finalized) return;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        nb::gil_scoped_release release;
        FinalizeWithin(seconds, rank, exit_code, [] { dist::FinalizeMpi(); });
      },
      "seconds"_a, "exit_code"_a);
  m.def(
      "mpi_abort", [](int code) { dist::MpiSession::Abort(code); }, "code"_a);

  nb::class_<Data>(m, "Data")
      .def_prop_ro("rows", &Data::rows)
      .def_prop_ro("features", [](const Data& d) { return d.data.num_features; })
      .def_prop_ro("labels", [](const Data& d) { return d.data.num_labels; })
      .def_ro("name", &Data::name)
      .def("digest", &Data::Digest)
      .def("arrays", [](const Data& d) {
        // CSR of the features and of the labels: (indptr, indices, values, label_ptr, labels).
        return nb::make_tuple(Vector(d.data.feat_off), Vector(d.data.feat_ids),
                              Vector(d.data.feat_vals), Vector(d.data.label_off),
                              Vector(d.data.labels));
      });
  m.def(
      "data_from_csr",
      [](const std::string& name, int64_t rows, int64_t features, int64_t labels,
         const Array& indptr, const Array& indices, const Array& values, bool has_labels,
         const Array& label_ptr, const Array& label_ids) {
        CsrArrays a;
        a.rows = rows;
        a.features = features;
        a.labels = labels;
        a.indptr = &indptr;
        a.indices = &indices;
        a.values = &values;
        if (has_labels) {
          a.label_ptr = &label_ptr;
          a.label_ids = &label_ids;
        }
        auto d = std::make_unique<Data>();
        d->name = name;
        d->data = Checked([&] { return DatasetFromCsr(name, a); });
        return d;
      },
      "name"_a, "rows"_a, "features"_a, "labels"_a, "indptr"_a, "indices"_a, "values"_a,
      "has_labels"_a, "label_ptr"_a, "label_ids"_a);
  m.def("read_data", [](const std::string& path) {
    auto d = std::make_unique<Data>();
    d->name = path;
    d->data = Checked([&] { return ReadXc(path); });
    return d;
  });
  m.def("data_header", [](const std::string& path) {
    return Checked([&] {
      DatasetStream s(path);
      return std::make_tuple(s.num_points(), s.num_features(), s.num_labels());
    });
  });

  nb::class_<Model>(m, "Model")
      .def_prop_ro("features", &Model::features)
      .def_prop_ro("labels", &Model::labels)
      .def_prop_ro("iteration", &Model::iteration)
      .def_prop_ro("ranks", &Model::ranks)
      .def_prop_ro("rank", &Model::rank)
      .def_prop_ro("layer_sizes", &Model::layer_sizes)
      .def_prop_ro("settings", &Model::settings)
      .def_prop_ro("recorded_settings", &Model::recorded_settings)
      .def_prop_ro("evals", &Model::evals)
      .def("predict", &Model::Predict, "data"_a, "k"_a, "threads"_a)
      .def("evaluate", &Model::Evaluate, "data"_a, "ks"_a, "threads"_a)
      .def("save", &Model::Save, "folder"_a)
      .def("weights", &Model::Weights);

  m.def("train", &Train, "options"_a, "comm"_a, "train"_a.none(), "valid"_a.none(), "test"_a.none(),
        "on_line"_a.none(), "on_record"_a.none(), "on_warning"_a.none());
  m.def("load", &Load, "path"_a, "comm"_a);
  m.def("parse_train_options", [](const nb::list& options) {
    TrainConfig cfg;
    const auto pairs = Pairs(options);
    return Checked([&] {
      ParseTrainOptions(pairs, &cfg);
      return SettingsJson(cfg);
    });
  });
  m.def("train_help", &TrainHelp);
  m.def("request_stop", &StopSignals::Request);
}
