// dslide predict (and the model loading `dslide eval` shares with it).
#include "train/predict.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

#include "backend/layer_backend.h"
#include "common/atomic_file.h"
#include "common/error.h"
#include "common/parallel.h"
#include "data/dataset.h"
#include "devices/backend_factory.h"
#include "train/ensemble.h"
#include "train/run_events.h"

namespace dslide {

std::unique_ptr<Trainer> LoadModel(const std::string& folder, Communicator* comm,
                                   CheckpointMeta* meta, bool scoring_only) {
  const bool serving = IsServingModel(folder);
  *meta = serving ? ReadServingMeta(folder) : ReadMeta(folder);
  // The network as the checkpoint describes it, sharded over this job's ranks.
  TrainConfig tc = ConfigOf(*meta);
  tc.scoring_only = scoring_only;
  auto trainer =
      std::make_unique<Trainer>(tc, comm, MakeBackend(tc.device, comm->rank(), tc.gpus_per_node),
                                meta->input_dim, meta->out_dims.back());
  if (serving)
    trainer->LoadServingModel(folder);
  else
    trainer->LoadCheckpoint(folder);
  return trainer;
}

std::string OutputIndexFile(const AnnConfig& ann, const Communicator& comm) {
  if (ann.file.empty() || comm.size() == 1) return ann.file;
  return ann.file + ".rank-" + std::to_string(comm.rank()) + "-of-" + std::to_string(comm.size());
}

double BuildOutputIndex(Trainer& model, const AnnConfig& ann) {
  OutputIndexOptions o;
  o.m = ann.m;
  o.ef_construction = ann.build_ef;
  o.ef = ann.ef;
  o.tail = ann.tail;
  o.one_vs_rest = model.Loss() == OutputLoss::kOneVsRest;
  return model.BuildOutputIndex(o, OutputIndexFile(ann, model.comm()));
}

void PredictTopK(Trainer& model, const Dataset& data, int64_t row0, int k,
                 std::vector<int32_t>* ids, std::vector<double>* probs, ScoreMode mode) {
  const int64_t n = data.size(), eb = model.EvalBlock();
  ids->assign(n * k, -1);
  probs->assign(n * k, 0.0);
  Trainer::Scores sc;
  for (int64_t b0 = 0; b0 < n; b0 += eb) {
    const int64_t count = std::min<int64_t>(eb, n - b0);
    model.Score(data, b0, count, k, &sc, row0, mode, /*probabilities=*/true, /*loss=*/false);
    for (int64_t i = 0; i < count; ++i) {
      for (int j = 0; j < k; ++j) {
        const int32_t id = sc.ids[i * k + j];
        if (id < 0) break;
        (*ids)[(b0 + i) * k + j] = id;
        (*probs)[(b0 + i) * k + j] = sc.probs[i * k + j];
      }
    }
  }
}

ApproximateEval EvaluateApproximate(Trainer& model, const Dataset& test, int64_t max_points,
                                    const std::vector<int>& ks, ScoreMode mode) {
  using Clock = std::chrono::steady_clock;
  const int64_t n = max_points > 0 ? std::min(max_points, test.size()) : test.size();
  const int64_t eb = model.EvalBlock();
  PrecisionCounter counter(ks), exact_counter(ks);
  const int k = counter.max_k();
  ApproximateEval out;
  out.k = k;
  Trainer::Scores exact, approx;
  int64_t found = 0, wanted = 0, labelled = 0;
  double loss = 0;
  for (int64_t b0 = 0; b0 < n; b0 += eb) {
    const int64_t count = std::min(eb, n - b0);
    auto t0 = Clock::now();
    model.Score(test, b0, count, k, &exact);
    auto t1 = Clock::now();
    model.Score(test, b0, count, k, &approx, 0, mode, /*probabilities=*/false);  // ids alone
    auto t2 = Clock::now();
    out.exact_seconds += std::chrono::duration<double>(t1 - t0).count();
    out.approx_seconds += std::chrono::duration<double>(t2 - t1).count();
    for (int64_t i = 0; i < count; ++i) {
      const int32_t* e = exact.ids.data() + i * k;
      const int32_t* a = approx.ids.data() + i * k;
      const int64_t nl = test.NumLabels(b0 + i);
      counter.Add(a, k, test.Labels(b0 + i), nl);
      exact_counter.Add(e, k, test.Labels(b0 + i), nl);
      if (nl > 0) {
        loss += exact.loss[i];
        ++labelled;
      }
      for (int j = 0; j < k; ++j) {
        if (e[j] < 0) continue;
        ++wanted;
        found += std::find(a, a + k, e[j]) != a + k;
      }
    }
  }
  out.approx = counter.Result();
  out.exact = exact_counter.Result();
  if (labelled > 0) out.exact.loss = loss / static_cast<double>(labelled);
  out.exact.seconds = out.exact_seconds;
  out.recall = wanted > 0 ? static_cast<double>(found) / static_cast<double>(wanted) : 1.0;
  return out;
}

int64_t Predict(const PredictConfig& cfg, Communicator* comm) {
  SetNumThreads(cfg.threads);
  // An ensemble's folder (train --ensemble): every member, their probabilities averaged.
  std::vector<std::string> folders = EnsembleMembers(cfg.model_dir);
  const bool ensemble = !folders.empty();
  CheckEnsembleScoredExactly(cfg.model_dir, folders.size(), cfg.ann.approximate);
  if (!ensemble) folders.push_back(ResolveModel(cfg.model_dir, "--model"));
  CheckpointMeta meta;
  DatasetStream in(cfg.input);
  // Checked before a model is loaded: a wrong file fails fast.
  for (const std::string& folder : folders) {
    const CheckpointMeta m = ReadModelMeta(folder);
    DSLIDE_CHECK(in.num_features() == m.input_dim, cfg.input, ":1: ", in.num_features(),
                 " features, the model (", folder, ") has ", m.input_dim, " inputs");
  }
  std::vector<std::unique_ptr<Trainer>> models;
  int64_t outputs = 0;
  for (const std::string& folder : folders) {
    models.push_back(LoadModel(folder, comm, &meta, /*scoring_only=*/true));
    if (models.size() == 1) outputs = meta.out_dims.back();
    DSLIDE_CHECK(meta.out_dims.back() == outputs, folder, ": ", meta.out_dims.back(),
                 " outputs, the ensemble's first member (", folders.front(), ") ", outputs);
  }
  // An ensemble's linear member (train --linear), where the folder holds one.
  double share = 0;
  const std::unique_ptr<LinearOvr> linear =
      ensemble ? ReadEnsembleLinear(cfg.model_dir, meta.input_dim, outputs, &share) : nullptr;
  std::unique_ptr<Trainer>& model = models.front();
  DSLIDE_CHECK(cfg.top_k <= outputs, "option --top-k: ", cfg.top_k,
               " labels asked for, the model (", folders.front(), ") has ", outputs);
  const int k = cfg.top_k;
  const bool jsonl = cfg.format == "jsonl";
  const ScoreMode mode = cfg.ann.approximate == "ann" ? ScoreMode::kIndex : ScoreMode::kExact;
  if (mode == ScoreMode::kIndex) {
    const double seconds = BuildOutputIndex(*model, cfg.ann);
    if (comm->rank() == 0) {
      const OutputIndex& index = *model->output_index();
      std::printf(
          "predict: output index (HNSW, m %d, ef %d) of %lld rows on rank 0 %s in %.1fs\n",
          cfg.ann.m, cfg.ann.ef, static_cast<long long>(index.rows()),
          index.loaded() ? ("read from " + OutputIndexFile(cfg.ann, *comm)).c_str() : "built",
          seconds);
      std::fflush(stdout);
    }
  }
  if (ensemble && comm->rank() == 0 && linear && linear->shortlist()) {
    std::printf(
        "predict: a network and its reranker (%s/member-1, %s/linear; the reranker's "
        "share %g%s)\n",
        cfg.model_dir.c_str(), cfg.model_dir.c_str(), share, share > 0 ? "" : ": left out");
    std::fflush(stdout);
  } else if (ensemble && comm->rank() == 0) {
    std::printf(
        "predict: an ensemble of %zu model%s (%s/member-1 ...)%s, their probabilities "
        "averaged\n",
        folders.size(), folders.size() == 1 ? "" : "s", cfg.model_dir.c_str(),
        linear ? Format(" and the linear member (its share %g%s)", share,
                        share > 0 ? "" : ": left out")
                     .c_str()
               : "");
    std::fflush(stdout);
  }
  Dataset chunk;
  std::vector<int32_t> ids;
  std::vector<double> probs;
  int64_t row = 0;
  std::string line;
  char buf[64];
  // Chunks of whole evaluation blocks, so that every point is scored in the block
  // `dslide eval` scores it in (the same scores where hidden layers are sampled). Every
  // rank scores; rank 0 writes the rows to `out`.
  const int64_t eb = model->EvalBlock();
  const int64_t chunk_points = (cfg.chunk + eb - 1) / eb * eb;
  auto score_all = [&](FILE* out) {
    while (in.Next(chunk_points, &chunk)) {
      const int64_t n = chunk.size();
      if (ensemble)
        EnsembleTopK(models, linear.get(), share, chunk, row, k, &ids, &probs);
      else
        PredictTopK(*model, chunk, row, k, &ids, &probs, mode);
      if (out == nullptr) {
        row += n;
        continue;
      }
      for (int64_t i = 0; i < n; ++i, ++row) {
        line.clear();
        std::string labels, scores;
        if (!jsonl) {
          line = std::to_string(row) + "\t";
        }
        for (int j = 0; j < k; ++j) {
          const int32_t id = ids[i * k + j];
          if (id < 0) break;
          const double p = probs[i * k + j];
          std::snprintf(buf, sizeof buf, "%.6g", p);
          if (jsonl) {
            labels += (j ? "," : "") + std::to_string(id);
            scores += std::string(j ? "," : "") + buf;
          } else {
            line += (j ? " " : "") + std::to_string(id) + ":" + buf;
          }
        }
        if (jsonl) {
          line = "{\"row\":" + std::to_string(row);
          line.append(",\"labels\":[")
              .append(labels)
              .append("],\"scores\":[")
              .append(scores)
              .append("]}");
        }
        line += "\n";
        DSLIDE_CHECK(std::fwrite(line.data(), 1, line.size(), out) == line.size(), cfg.out,
                     ": write failed: ", std::strerror(errno));
      }
    }
  };
  if (comm->rank() != 0) {
    score_all(nullptr);
    return row;
  }
  // Bad input or a full disk before the end leaves no partial output behind.
  WriteAtomically(cfg.out, [&](const std::string& tmp) {
    std::unique_ptr<FILE, int (*)(FILE*)> out(std::fopen(tmp.c_str(), "w"), &std::fclose);
    DSLIDE_CHECK(out != nullptr, "option --out: cannot write ", tmp, ": ", std::strerror(errno));
    score_all(out.get());
    CloseWritten(&out, cfg.out);
  });
  return row;
}

}  // namespace dslide
