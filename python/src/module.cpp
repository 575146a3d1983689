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
#include "collective.h"
#include "common/checksum.h"
#include "common/error.h"
#include "common/parallel.h"
#include "common/stop_signal.h"
#include "config/config.h"
#include "devices/backend_factory.h"
#include "dist/mpi_communicator.h"
#include "io/checkpoint.h"
#include "io/linear_file.h"
#include "io/output_path.h"
#include "model/linear_ovr.h"
#include "job_guard.h"
#include "model.h"
#include "train/auto_settings.h"
#include "train/ensemble.h"
#include "train/predict.h"
#include "train/run_events.h"
#include "train/run_training.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace dslide::py {

namespace {

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
               nb::object on_line, nb::object on_record, nb::object on_warning, bool reranked) {
  PyEvents events(std::move(on_line), std::move(on_record), std::move(on_warning));
  TrainConfig cfg;
  const auto pairs = Pairs(options);
  Checked([&] {
    ParseTrainOptions(pairs, &cfg);
    DSLIDE_CHECK(cfg.ensemble <= 1, "option --ensemble ", cfg.ensemble,
                 ": train() returns one model; dslide.Classifier(ensemble=N) trains and "
                 "averages N, as `dslide train --ensemble N` does");
    DSLIDE_CHECK(cfg.linear != 1,
                 "option --linear true: the linear member joins the networks of an ensemble "
                 "that `dslide train` trains; train() returns one network, and "
                 "dslide.Classifier trains the networks alone");
    DSLIDE_CHECK(cfg.rerank != 1,
                 "option --rerank true: the reranker of a network's lists follows the network "
                 "that `dslide train` trains; train() returns the network alone, and "
                 "dslide.Classifier solves the reranker after it (rerank auto)");
    // A network a reranker follows (the Classifier's): --lr and --patience auto resolve as
    // `dslide train --rerank` resolves them.
    cfg.reranked = reranked;
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

/// Lists of label ids, points x len (a network's, -1 past a list's end), copied; an id
/// outside [-1, labels) is refused, naming `what`.
template <typename Rows>
std::vector<int32_t> LabelLists(const char* what, const Rows& ids, int64_t labels) {
  std::vector<int32_t> list(ids.data(), ids.data() + ids.shape(0) * ids.shape(1));
  for (const int32_t id : list)
    if (id < -1 || id >= labels)
      throw nb::value_error(
          detail::Concat(what, ": label id ", id, " outside [0, ", labels, ")").c_str());
  return list;
}

}  // namespace

}  // namespace dslide::py

NB_MODULE(_core, m) {
  using namespace dslide;
  using namespace dslide::py;
  m.doc() = "dslide's C++ core (use the dslide package, not this module)";
  m.attr("version") = DSLIDE_VERSION;
  m.attr("backends") = BuiltBackends();
  // The output index's defaults (config/ann_defaults.h), Model.build_index's keywords.
  m.attr("ann_defaults") = nb::make_tuple(kAnnM, kAnnEf, kAnnBuildEf, kAnnTail);
  m.def("ensemble_list_length", &EnsembleListLength, "k"_a, "outputs"_a);

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
      .def("predict", &Model::Predict, "data"_a, "k"_a, "threads"_a, "approximate"_a)
      .def("evaluate", &Model::Evaluate, "data"_a, "ks"_a, "threads"_a)
      .def("evaluate_approximately", &Model::EvaluateApproximately, "data"_a, "ks"_a, "threads"_a)
      .def(
          "build_index",
          [](Model& self, int m, int ef, int build_ef, int tail, const std::string& file,
             int threads) {
            AnnConfig ann;
            ann.m = m;
            ann.ef = ef;
            ann.build_ef = build_ef;
            ann.tail = tail;
            ann.file = file;
            return self.BuildIndex(ann, threads);
          },
          "m"_a, "ef"_a, "build_ef"_a, "tail"_a, "file"_a, "threads"_a)
      .def_prop_ro("index_ef", &Model::index_ef)
      .def("save", &Model::Save, "folder"_a)
      .def("weights", &Model::Weights);

  m.def("train", &Train, "options"_a, "comm"_a, "train"_a.none(), "valid"_a.none(), "test"_a.none(),
        "on_line"_a.none(), "on_record"_a.none(), "on_warning"_a.none(), "reranked"_a = false);
  m.def("load", &Load, "path"_a, "comm"_a);
  m.def("parse_train_options", [](const nb::list& options) {
    TrainConfig cfg;
    const auto pairs = Pairs(options);
    return Checked([&] {
      ParseTrainOptions(pairs, &cfg);
      return SettingsJson(cfg);
    });
  });
  // --ensemble's members for a training set of `points` (before any held back), as `dslide
  // train` resolves it (AutoEnsemble): the Classifier trains that many models.
  m.def("ensemble_members", [](const nb::list& options, int64_t points) {
    TrainConfig cfg;
    const auto pairs = Pairs(options);
    return Checked([&] {
      ParseTrainOptions(pairs, &cfg);
      return AutoEnsembleOfFile(cfg, points);
    });
  });
  // Members' top-`len` lists (Model.predict's int32 ids and float32 probabilities, points x
  // len each) merged into the top k of their mean, as `dslide predict` merges an ensemble's
  // (MergeMemberLists).
  using IdRows = nb::ndarray<const int32_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
  using ProbRows = nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
  m.def("merge_member_lists", [](const std::vector<IdRows>& ids, const std::vector<ProbRows>& probs,
                                 int k, const std::vector<double>& weights) {
    if (ids.empty() || ids.size() != probs.size())
      throw nb::value_error("merge_member_lists: one ids and one probabilities array a member");
    const size_t n = ids[0].shape(0), len = ids[0].shape(1);
    std::vector<std::vector<int32_t>> member_ids;
    std::vector<std::vector<double>> member_probs;
    for (size_t m = 0; m < ids.size(); ++m) {
      if (ids[m].shape(0) != n || ids[m].shape(1) != len || probs[m].shape(0) != n ||
          probs[m].shape(1) != len)
        throw nb::value_error("merge_member_lists: the members' arrays differ in shape");
      member_ids.emplace_back(ids[m].data(), ids[m].data() + n * len);
      member_probs.emplace_back(probs[m].data(), probs[m].data() + n * len);
    }
    std::vector<int32_t> top;
    std::vector<double> mean;
    // No weights: the members' plain mean; else one weight a member (MemberWeights).
    if (weights.empty())
      MergeMemberLists(member_ids, member_probs, static_cast<int64_t>(n), static_cast<int>(len),
                       k, &top, &mean);
    else if (weights.size() == ids.size())
      MergeMemberLists(member_ids, member_probs, weights, static_cast<int64_t>(n),
                       static_cast<int>(len), k, &top, &mean);
    else
      throw nb::value_error("merge_member_lists: one weight a member");
    return nb::make_tuple(Matrix(std::move(top), n, k),
                          Matrix(std::vector<float>(mean.begin(), mean.end()), n, k));
  }, "ids"_a, "probs"_a, "k"_a, "weights"_a = std::vector<double>());
  // The linear member of `dslide train`'s ensembles (--linear, model/linear_ovr.h): whether
  // auto adds one, its solve on a set, its top lists, its share chosen on validation points.
  m.def("auto_linear", [](const nb::list& options, int members, int64_t features, int64_t labels,
                          int64_t nonzeros) {
    TrainConfig cfg;
    const auto pairs = Pairs(options);
    return Checked([&] {
      ParseTrainOptions(pairs, &cfg);
      DSLIDE_CHECK(cfg.linear != 1 || members > 1,
                   "option --linear true: the linear member joins an ensemble's networks, and "
                   "ensemble='auto' chose one model (it trains 3 when validating with "
                   "epochs='auto' on at most ",
                   kAutoEnsemblePoints, " training points); give ensemble=2 or more");
      return AutoLinear(cfg, members, features, labels, nonzeros);
    });
  });
  // --rerank as `dslide train` resolves it for `members` networks on `points` training points
  // (the held-back ones among them) of `labels` labels (AutoRerank), and the length of the
  // network's lists of the training points that the reranker is solved on.
  m.def("auto_rerank", [](const nb::list& options, int members, int64_t points, int64_t labels) {
    TrainConfig cfg;
    const auto pairs = Pairs(options);
    return Checked([&] {
      ParseTrainOptions(pairs, &cfg);
      DSLIDE_CHECK(cfg.rerank != 1 || members == 1,
                   "option --rerank true: the reranker rescores one network's lists, and "
                   "ensemble='auto' chose ",
                   members, " models; give ensemble=1");
      return AutoRerank(cfg, members, points, labels);
    });
  });
  m.attr("rerank_list") = kRerankList;
  nb::class_<LinearOvr>(m, "LinearModel")
      .def_prop_ro("features", &LinearOvr::features)
      .def_prop_ro("labels", &LinearOvr::labels)
      .def_prop_ro("shortlist", &LinearOvr::shortlist)
      // A reranker's probabilities of the labels of a network's lists (points x len ids),
      // as `dslide predict` rescores them (LinearOvr::Rescore).
      .def("rescore",
           [](const LinearOvr& l, const Data& in, const IdRows& ids, int threads) {
             if (!l.shortlist())
               throw nb::value_error("rescore: the model is no reranker (a dense linear member: "
                                     "use top)");
             if (in.data.num_features != l.features())
               throw nb::value_error(detail::Concat(in.name, ": ", in.data.num_features,
                                                    " features (columns), the reranker has ",
                                                    l.features())
                                         .c_str());
             const size_t n = ids.shape(0), len = ids.shape(1);
             if (n != static_cast<size_t>(in.data.size()) || len < 1)
               throw nb::value_error("rescore: one list of ids a point");
             std::vector<int32_t> list = LabelLists("rescore", ids, l.labels());
             std::vector<float> probs;
             Checked([&] {
               const ThreadScope scope(threads);
               std::vector<double> p;
               l.Rescore(in.data, static_cast<int>(len), list, &p);
               probs.assign(p.begin(), p.end());
               return 0;
             });
             return nb::make_tuple(Matrix(std::move(list), n, len),
                                   Matrix(std::move(probs), n, len));
           })
      // The folder `dslide train` writes a linear model and its share into (FOLDER/linear.h5).
      .def("save",
           [](const LinearOvr& l, const std::string& folder, double share, uint64_t seed) {
             Checked([&] {
               WriteLinearModel(folder, l, {kLinearC, kLinearEps, kLinearMaxEpochs, seed}, share);
               return 0;
             });
           })
      .def("weights",
           [](const LinearOvr& l) {
             if (l.shortlist())
               throw nb::value_error("weights: a reranker's weights are sparse, by label (save "
                                     "writes them)");
             return Matrix(l.weights(), static_cast<size_t>(l.features()) + 1,
                           static_cast<size_t>(l.labels()));
           })
      .def("top", [](const LinearOvr& l, const Data& in, int len, int threads) {
        if (in.data.num_features != l.features())
          throw nb::value_error(detail::Concat(in.name, ": ", in.data.num_features,
                                               " features (columns), the linear member has ",
                                               l.features())
                                    .c_str());
        if (len < 1 || len > l.labels())
          throw nb::value_error(
              detail::Concat("top: ", len, " labels asked for, the linear member has ", l.labels())
                  .c_str());
        std::vector<int32_t> ids;
        std::vector<float> probs;
        Checked([&] {
          const ThreadScope scope(threads);
          std::vector<double> p;
          l.TopK(in.data, 0, in.data.size(), len, &ids, &p);
          probs.assign(p.begin(), p.end());
          return 0;
        });
        const auto n = static_cast<size_t>(in.data.size());
        return nb::make_tuple(Matrix(std::move(ids), n, static_cast<size_t>(len)),
                              Matrix(std::move(probs), n, static_cast<size_t>(len)));
      });
  m.def("linear_train", [](const Data& train, uint64_t seed, int threads) {
    return Checked([&] {
      const ThreadScope scope(threads);
      return LinearOvr::Train(train.data, {kLinearC, kLinearEps, kLinearMaxEpochs, seed});
    });
  });
  // The reranker of a network's lists: solved on the training points, each label on the
  // points that have it and those whose list (`lists`: points x list ids, the network's best
  // first) holds it, as `dslide train --rerank` solves it (LinearOvr::TrainShortlist).
  m.def("linear_train_shortlist", [](const Data& train, const IdRows& lists, uint64_t seed,
                                     int threads) {
    const size_t n = lists.shape(0), len = lists.shape(1);
    if (n != static_cast<size_t>(train.data.size()) || len < 1)
      throw nb::value_error("linear_train_shortlist: one list a training point");
    const std::vector<int32_t> heads =
        LabelLists("linear_train_shortlist", lists, train.data.num_labels);
    return Checked([&] {
      const ThreadScope scope(threads);
      return LinearOvr::TrainShortlist(train.data, heads, static_cast<int>(len), kRerankPrune,
                                       {kLinearC, kLinearEps, kLinearMaxEpochs, seed});
    });
  });
  m.def("linear_load", [](const std::string& folder) {
    return Checked([&] {
      double share = 0;
      LinearOvr l = ReadLinearModel(folder, &share);
      return std::make_pair(std::move(l), share);
    });
  });
  using WeightRows = nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
  m.def("linear_from_weights", [](const WeightRows& w) {
    if (w.shape(0) < 1 || w.shape(1) < 1)
      throw nb::value_error("linear_from_weights: (features + 1) x labels weights");
    return LinearOvr(static_cast<int64_t>(w.shape(0)) - 1, static_cast<int64_t>(w.shape(1)),
                     std::vector<float>(w.data(), w.data() + w.shape(0) * w.shape(1)));
  });
  // The points --valid-fraction holds back of `n` with `seed` (SplitHoldout's choice), in order.
  m.def("holdout_points", [](int64_t n, double fraction, uint64_t seed) {
    if (n < 1 || n > (int64_t{1} << 31) - 1)
      throw nb::value_error("holdout_points: n must be in [1, 2^31 - 1]");
    std::vector<int64_t> held, kept;
    HoldoutIndices(n, fraction, seed, &held, &kept);
    return Vector(std::move(held));
  });
  // Each member's weight in the mix: the networks' share each, then the linear member's.
  m.def("member_weights", &MemberWeights, "networks"_a, "linear_share"_a);
  m.def("choose_linear_share", [](const IdRows& net_ids, const ProbRows& net_probs,
                                  const IdRows& lin_ids, const ProbRows& lin_probs,
                                  const Data& points) {
    const size_t n = net_ids.shape(0), len = net_ids.shape(1);
    if (n != static_cast<size_t>(points.data.size()) || lin_ids.shape(0) != n ||
        lin_ids.shape(1) != len || net_probs.shape(0) != n || net_probs.shape(1) != len ||
        lin_probs.shape(0) != n || lin_probs.shape(1) != len)
      throw nb::value_error("choose_linear_share: the lists differ in shape from the points");
    std::vector<std::vector<int32_t>> ids{{net_ids.data(), net_ids.data() + n * len},
                                          {lin_ids.data(), lin_ids.data() + n * len}};
    std::vector<std::vector<double>> probs{{net_probs.data(), net_probs.data() + n * len},
                                           {lin_probs.data(), lin_probs.data() + n * len}};
    std::string why;
    const double share = ChooseLinearShare(ids, probs, points.data, static_cast<int>(len), &why);
    return nb::make_tuple(share, why);
  });
  m.def("train_help", &TrainHelp);
  m.def("request_stop", &StopSignals::Request);
}
