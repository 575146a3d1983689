// Ensembles: training the members one after another, merging their top-k lists.
#include "train/ensemble.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <unordered_map>
#include <utility>

#include "common/error.h"
#include "common/parallel.h"
#include "common/process_clock.h"
#include "io/checkpoint.h"
#include "io/linear_file.h"
#include "train/auto_settings.h"
#include "train/metrics.h"
#include "train/predict.h"
#include "train/run_training.h"

namespace dslide {

std::string EnsembleMemberDir(const std::string& folder, int m) {
  return folder + "/member-" + std::to_string(m);
}

std::vector<std::string> EnsembleMembers(const std::string& folder) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  std::error_code ec;
  for (int m = 1; m <= kMaxEnsemble; ++m) {
    const std::string dir = EnsembleMemberDir(folder, m);
    if (!fs::exists(dir, ec)) break;  // a checkpoint folder, or a serving model export wrote
    const std::string best = dir + "/best";
    out.push_back(ResolveModel(fs::is_directory(best, ec) ? best : dir, "--model"));
  }
  return out;
}

std::unique_ptr<LinearOvr> ReadEnsembleLinear(const std::string& folder, int64_t features,
                                              int64_t labels, double* share) {
  *share = 0;
  std::error_code ec;
  if (!std::filesystem::exists(folder + "/linear", ec)) return nullptr;
  auto m = std::make_unique<LinearOvr>(ReadLinearModel(folder, share));
  DSLIDE_CHECK(m->features() == features && m->labels() == labels, LinearModelFile(folder), ": ",
               m->features(), " features and ", m->labels(),
               " labels, the ensemble's networks have ", features, " inputs and ", labels,
               " outputs");
  return m;
}

void CheckEnsembleFolder(const std::string& dir, int members, const char* option,
                         bool member_folders) {
  namespace fs = std::filesystem;
  if (dir.empty()) return;
  std::error_code ec;
  const auto holds_model = [&](const std::string& d) {
    return !LatestCheckpoint(d).empty() || fs::exists(fs::path(d) / "best" / "meta.h5", ec);
  };
  if (members <= 1 && !member_folders) {
    DSLIDE_CHECK(!fs::exists(EnsembleMemberDir(dir, 1), ec), "option ", option, ": ", dir,
                 " holds an ensemble of another run (", EnsembleMemberDir(dir, 1),
                 " ...), which eval and predict of it would read instead of this run's model: "
                 "move it away or choose another folder");
    return;
  }
  DSLIDE_CHECK(!fs::exists(dir + "/linear", ec), "option ", option, ": ", dir, " holds ", dir,
               "/linear, the linear member of another run, which eval and predict of the folder "
               "would average with this run's members: move it away or choose another folder");
  DSLIDE_CHECK(!holds_model(dir), "option ", option, ": ", dir,
               " holds one model's checkpoints of another run; an ensemble goes into ", dir,
               "/member-1 ...: move them away or choose another folder");
  for (int m = 1; m <= members + 1; ++m) {
    const std::string member = EnsembleMemberDir(dir, m);
    DSLIDE_CHECK(m <= members ? !holds_model(member) : !fs::exists(member, ec), "option ", option,
                 ": ", dir, " holds ", member, " of another run",
                 m > members ? ", which eval and predict of the folder would average with "
                               "this run's members"
                             : "",
                 ": move it away or choose another folder");
  }
}

std::string EnsembleFolderWhat(const std::string& folder, size_t members) {
  std::error_code ec;
  if (members == 1 && std::filesystem::exists(folder + "/linear", ec))
    return std::string(LinearModelIsReranker(folder) ? "a network and its reranker ("
                                                     : "a network and its linear member (") +
           EnsembleMemberDir(folder, 1) + ", " + folder + "/linear)";
  return "an ensemble of " + std::to_string(members) + " models";
}

void CheckEnsembleScoredExactly(const std::string& folder, size_t members,
                                const std::string& approximate) {
  DSLIDE_CHECK(members == 0 || approximate == "off", "option --approximate: ", folder, " holds ",
               EnsembleFolderWhat(folder, members),
               "; approximate scoring reads one model (--model ", folder, "/member-1)");
}

int EnsembleListLength(int k, int64_t outputs) {
  return static_cast<int>(std::min<int64_t>(outputs, std::max(k, kEnsembleListLength)));
}

std::vector<double> MemberWeights(int networks, double linear_share) {
  DSLIDE_ASSERT(networks > 0 && linear_share >= 0 && linear_share <= 1, "ensemble weights");
  std::vector<double> w(networks, (1.0 - linear_share) / networks);
  if (linear_share > 0) w.push_back(linear_share);
  return w;
}

double ChooseLinearShare(const std::vector<std::vector<int32_t>>& ids,
                         const std::vector<std::vector<double>>& probs, const Dataset& points,
                         int len, std::string* why, const char* whose) {
  DSLIDE_ASSERT(ids.size() == 2 && probs.size() == 2, "a network's list and the linear one");
  double best_share = kLinearShare, best_p1 = -1;
  std::string scores;
  std::vector<int32_t> top;
  std::vector<double> top_probs;
  for (const double share : kLinearShares) {
    MergeMemberLists(ids, probs, {1.0 - share, share}, points.size(), len, 1, &top, &top_probs);
    int64_t hits = 0;
    for (int64_t i = 0; i < points.size(); ++i) {
      const int32_t* y = points.Labels(i);
      hits += std::find(y, y + points.NumLabels(i), top[i]) != y + points.NumLabels(i) ? 1 : 0;
    }
    const double p1 = static_cast<double>(hits) / static_cast<double>(points.size());
    scores += Format("%s%g: %.4f", scores.empty() ? "" : ", ", share, p1);
    const double d = std::fabs(share - kLinearShare), best_d = std::fabs(best_share - kLinearShare);
    if (p1 > best_p1 || (p1 == best_p1 && d < best_d)) {
      best_p1 = p1;
      best_share = share;
    }
  }
  if (why != nullptr)
    *why = Format("the best validation P@1 of %s mix on %lld points; %s", whose,
                  (long long)points.size(), scores.c_str());
  return best_share;
}

void MergeMemberLists(const std::vector<std::vector<int32_t>>& ids,
                      const std::vector<std::vector<double>>& probs, int64_t n, int len, int k,
                      std::vector<int32_t>* out_ids, std::vector<double>* out_probs) {
  MergeMemberLists(ids, probs,
                   std::vector<double>(ids.size(), 1.0 / static_cast<double>(ids.size())), n, len,
                   k, out_ids, out_probs);
}

void MergeMemberLists(const std::vector<std::vector<int32_t>>& ids,
                      const std::vector<std::vector<double>>& probs,
                      const std::vector<double>& weights, int64_t n, int len, int k,
                      std::vector<int32_t>* out_ids, std::vector<double>* out_probs) {
  const size_t members = ids.size();
  DSLIDE_ASSERT(members > 0 && probs.size() == members && weights.size() == members,
                "members' lists");
  // Equal weights: the sum divided by the members (the plain mean, to the last bit).
  const bool equal =
      std::all_of(weights.begin(), weights.end(), [&](double w) { return w == weights.front(); });
  out_ids->assign(n * k, -1);
  out_probs->assign(n * k, 0.0);
  std::unordered_map<int32_t, double> sum;
  std::vector<std::pair<double, int32_t>> ranked;
  for (int64_t i = 0; i < n; ++i) {
    sum.clear();
    for (size_t m = 0; m < members; ++m)
      for (int j = 0; j < len; ++j) {
        const int32_t id = ids[m][i * len + j];
        if (id < 0) break;
        sum[id] += equal ? probs[m][i * len + j] : weights[m] * probs[m][i * len + j];
      }
    ranked.clear();
    for (const auto& [id, p] : sum)
      ranked.emplace_back(equal ? p / static_cast<double>(members) : p, id);
    const size_t top = std::min<size_t>(k, ranked.size());
    std::partial_sort(ranked.begin(), ranked.begin() + top, ranked.end(),
                      [](const auto& a, const auto& b) {
                        return a.first != b.first ? a.first > b.first : a.second < b.second;
                      });
    for (size_t j = 0; j < top; ++j) {
      (*out_ids)[i * k + j] = ranked[j].second;
      (*out_probs)[i * k + j] = ranked[j].first;
    }
  }
}

namespace {

/// The linear member's list of each point of `data`: a reranker's is the network's list
/// (`network_ids`, `len` a point) rescored; a dense model's, its own `len` best labels.
void LinearList(const LinearOvr& linear, const Dataset& data, int len,
                const std::vector<int32_t>& network_ids, std::vector<int32_t>* ids,
                std::vector<double>* probs) {
  if (linear.shortlist()) {
    *ids = network_ids;
    linear.Rescore(data, len, network_ids, probs);
  } else {
    linear.TopK(data, 0, data.size(), len, ids, probs);
  }
}

}  // namespace

void EnsembleTopK(const std::vector<std::unique_ptr<Trainer>>& models, const LinearOvr* linear,
                  double share, const Dataset& data, int64_t row0, int k, std::vector<int32_t>* ids,
                  std::vector<double>* probs) {
  DSLIDE_ASSERT(!models.empty(), "an ensemble of no model");
  if (share <= 0) linear = nullptr;
  const int len = EnsembleListLength(k, models.front()->spec().layers.back().out_dim);
  const size_t lists = models.size() + (linear != nullptr ? 1 : 0);
  std::vector<std::vector<int32_t>> member_ids(lists);
  std::vector<std::vector<double>> member_probs(lists);
  for (size_t m = 0; m < models.size(); ++m)
    PredictTopK(*models[m], data, row0, len, &member_ids[m], &member_probs[m]);
  if (linear != nullptr)  // a reranker rescores the first network's lists
    LinearList(*linear, data, len, member_ids.front(), &member_ids.back(), &member_probs.back());
  MergeMemberLists(member_ids, member_probs,
                   MemberWeights(static_cast<int>(models.size()), linear != nullptr ? share : 0.0),
                   data.size(), len, k, ids, probs);
}

EvalResult RunEnsemble(const TrainConfig& cfg, int members, Communicator* comm, RunEvents* events) {
  DSLIDE_CHECK(members >= 1 && members <= kMaxEnsemble, "option --ensemble: ", members, " members");
  if (events == nullptr) events = NoEvents();
  SetNumThreads(cfg.threads);  // the linear member's solve runs before the members' own runs
  CheckEnsembleFolder(cfg.checkpoint_dir, members, "--checkpoint-dir", /*member_folders=*/true);
  CheckEnsembleFolder(cfg.save_dir, members, "--save", /*member_folders=*/true);
  const bool root = comm->rank() == 0;
  // The files are read once (a pipe or FIFO can be): each member trains on a copy.
  Dataset train = ReadXc(cfg.train_file), valid, test;
  if (!cfg.valid_file.empty()) valid = ReadXc(cfg.valid_file);
  if (!cfg.test_file.empty()) test = ReadXc(cfg.test_file);
  // The ensemble's own score: the points the members' evaluations score.
  const Dataset* scored = &test;
  Dataset test_head;
  if (cfg.eval_points > 0 && cfg.eval_points < test.size()) {
    test_head = test.Head(cfg.eval_points);
    scored = &test_head;
  }
  const std::vector<int> ks{1, 3, 5};
  const int k = 5;
  const int len = EnsembleListLength(k, train.num_labels);
  const bool dense_linear = AutoLinear(cfg, members, train.num_features, train.num_labels,
                                       static_cast<int64_t>(train.feat_ids.size()));
  // One network and the reranker of its lists: a shortlist linear member, solved once the
  // network is trained.
  const bool rerank = !dense_linear && AutoRerank(cfg, members, train.size(), train.num_labels);
  DSLIDE_ASSERT(members >= 2 || rerank, "one model trains alone (RunTraining)");
  const bool linear = dense_linear || rerank;
  std::vector<std::vector<int32_t>> ids(members + (linear ? 1 : 0));
  std::vector<std::vector<double>> probs(ids.size());
  double unscored_wall = 0, unscored_cpu = 0;  // evaluations: not training time
  // The linear member: solved first, on every training point (the last member takes them
  // away), and where validating, once more for its share: on the points the first member
  // trains on, scored beside that member on the points it validates on.
  const LinearOvrOptions options{kLinearC, kLinearEps, kLinearMaxEpochs, cfg.seed};
  LinearOvr linear_model, linear_check;
  Dataset share_points;  // the first member's validation points
  // The first member's lists of them (the network's and the linear member's), whose mix
  // chooses the share.
  std::vector<std::vector<int32_t>> v_ids(2);
  std::vector<std::vector<double>> v_probs(2);
  double solve_s = 0, list_s = 0;  // the reranker's: listing included in solve_s
  const int64_t train_points = train.size();
  if (dense_linear) {
    const double w0 = ProcessWallSeconds();
    linear_model = LinearOvr::Train(train, options);
    if (!cfg.valid_file.empty()) {
      share_points = valid;
    } else if (cfg.valid_fraction > 0) {
      Dataset kept;
      SplitHoldout(train, cfg.valid_fraction, cfg.seed, &kept, &share_points);
      kept.num_labels = train.num_labels;
      linear_check = LinearOvr::Train(kept, options);
    }
    solve_s = ProcessWallSeconds() - w0;
  }
  double share = kLinearShare;
  std::string share_why = "not validating: the default";
  EvalResult last;
  int trained = members;  // the networks trained: the first alone where the share is 1
  for (int m = 1; m <= members; ++m) {
    TrainConfig c = cfg;
    c.ensemble = 1;
    c.reranked = rerank;
    c.seed = cfg.seed + static_cast<uint64_t>(m - 1);
    if (!cfg.checkpoint_dir.empty()) c.checkpoint_dir = EnsembleMemberDir(cfg.checkpoint_dir, m);
    if (!cfg.save_dir.empty()) c.save_dir = EnsembleMemberDir(cfg.save_dir, m);
    if (root && rerank)
      events->Line(Format(
          "the network: --seed %llu%s%s; its reranker after it\n", (unsigned long long)c.seed,
          c.checkpoint_dir.empty() ? "" : ", checkpoints in ", c.checkpoint_dir.c_str()));
    else if (root)
      events->Line(Format(
          "ensemble member %d of %d: --seed %llu%s%s\n", m, members, (unsigned long long)c.seed,
          c.checkpoint_dir.empty() ? "" : ", checkpoints in ", c.checkpoint_dir.c_str()));
    // The last member takes the training and validation points themselves (RunTraining
    // moves from them); the test points stay, for the ensemble to score.
    const bool last_member = m == members && !rerank;  // the reranker reads them after
    Dataset member_train, member_valid, member_test = test;
    if (!last_member) {
      member_train = train;
      member_valid = valid;
    }
    RunData data;
    data.train = last_member ? &train : &member_train;
    if (!cfg.valid_file.empty()) data.valid = last_member ? &valid : &member_valid;
    if (!cfg.test_file.empty()) data.test = &member_test;
    data.read_from_files = true;
    data.warn = m == 1;
    TrainingRun run;
    last = RunTraining(c, comm, data, &run, events);
    Trainer& model = *run.trainer;
    unscored_wall += model.eval_wall_seconds();
    unscored_cpu += model.eval_cpu_seconds();
    if (scored->size() > 0) {
      const double w0 = ProcessWallSeconds(), c0 = ProcessCpuSeconds();
      PredictTopK(model, *scored, 0, len, &ids[m - 1], &probs[m - 1]);
      unscored_wall += ProcessWallSeconds() - w0;
      unscored_cpu += ProcessCpuSeconds() - c0;
    }
    if (rerank && m == 1) {
      // The network's lists of every training point, an evaluation block at a time in place
      // (the blocks PredictTopK scores): the first `list` labels of each, ids alone (the
      // candidates of the reranker's negatives). The whole lists (len, with the
      // probabilities) of the network's validation points, where the share is chosen, are
      // scored below.
      const double w0 = ProcessWallSeconds();
      const int list = std::min(kRerankList, len);
      std::vector<int64_t> held, kept_rows;
      const bool held_back = cfg.valid_file.empty() && cfg.valid_fraction > 0;
      if (held_back) HoldoutIndices(train.size(), cfg.valid_fraction, c.seed, &held, &kept_rows);
      std::vector<int32_t> heads(train.size() * list);
      const int64_t block = model.EvalBlock();
      Trainer::Scores sc;
      for (int64_t b = 0; b < train.size(); b += block) {
        model.Score(train, b, std::min(block, train.size() - b), list, &sc, 0, ScoreMode::kExact,
                    /*probabilities=*/false, /*loss=*/false);
        std::copy(sc.ids.begin(), sc.ids.end(), heads.begin() + b * list);
      }
      list_s = ProcessWallSeconds() - w0;
      // Solved on every training point: those the network validates on, whose lists it
      // makes without having trained on them, are the most test-like.
      linear_model = LinearOvr::TrainShortlist(train, heads, list, kRerankPrune, options);
      if (!cfg.valid_file.empty()) {
        share_points = valid;
      } else if (held_back) {
        // The share: once more solved on the network's training points alone, scoring its
        // lists of the network's validation points.
        share_points = train.Subset(held);
        std::vector<int32_t> kept_heads(kept_rows.size() * list);
        for (size_t r = 0; r < kept_rows.size(); ++r)
          std::copy_n(heads.begin() + kept_rows[r] * list, list, kept_heads.begin() + r * list);
        linear_check = LinearOvr::TrainShortlist(train.Subset(kept_rows), kept_heads, list,
                                                 kRerankPrune, options);
      }
      solve_s = ProcessWallSeconds() - w0;
    }
    if (linear && m == 1 && share_points.size() > 0) {
      // The share of the grid whose mix scores the best P@1 on the first member's
      // validation points (ties: the share nearest kLinearShare, then the smaller): the
      // linear model solved without them where the member held them back.
      PredictTopK(model, share_points, 0, len, &v_ids[0], &v_probs[0]);
      LinearList(cfg.valid_file.empty() ? linear_check : linear_model, share_points, len, v_ids[0],
                 &v_ids[1], &v_probs[1]);
      share = ChooseLinearShare(v_ids, v_probs, share_points, len, &share_why,
                                rerank ? "the network's" : "the first member's");
    }
    if (dense_linear && m == 1 && members > 1 && share >= 1) {
      // The linear member takes the whole mix (MemberWeights: the networks' weight 0), so
      // the other members could not change a prediction: they are not trained.
      trained = 1;
      if (root)
        events->Line(
            Format("ensemble member%s 2%s not trained: the linear member's share is 1 "
                   "on the first member's validation points (its line below), which "
                   "leaves the networks no weight in the mix\n",
                   members > 2 ? "s" : "", members > 2 ? Format("-%d", members).c_str() : ""));
      break;
    }
  }
  // Where members were left out, the linear member's list follows the first member's.
  ids.resize(trained + (linear ? 1 : 0));
  probs.resize(ids.size());
  if (linear) {
    std::string saved;  // the folders written, for the line
    for (const std::string& dir : {cfg.checkpoint_dir, cfg.save_dir}) {
      if (dir.empty()) continue;
      if (root) WriteLinearModel(dir, linear_model, options, share);
      saved += (saved.empty() ? "" : " and ") + dir + "/linear";
    }
    std::string line =
        rerank ? Format(
                     "reranker (--rerank%s): one-vs-rest squared hinge, C %g, on the "
                     "L2-normalised rows, each label on the points that have it and the "
                     "points whose network list of %d holds it (%lld training points "
                     "listed in %.1fs, solved in %.1fs)%s%s; its share of the network's "
                     "probability %g (%s)\n",
                     cfg.rerank < 0 ? " auto" : "", kLinearC, std::min(kRerankList, len),
                     (long long)train_points, list_s, solve_s - list_s,
                     saved.empty() ? "" : ", saved in ", saved.c_str(), share, share_why.c_str())
               : Format(
                     "ensemble linear member (--linear%s): one-vs-rest squared hinge, C %g, "
                     "on the %lld L2-normalised training points, solved in %.1fs%s%s; its "
                     "share of the mean probability %g (%s)\n",
                     cfg.linear < 0 ? " auto" : "", kLinearC, (long long)train_points, solve_s,
                     saved.empty() ? "" : ", saved in ", saved.c_str(), share, share_why.c_str());
    if (scored->size() > 0) {
      const double s0 = ProcessWallSeconds(), c0 = ProcessCpuSeconds();
      LinearList(linear_model, *scored, len, ids.front(), &ids.back(), &probs.back());
      std::vector<int32_t> top;
      std::vector<double> top_probs;
      MergeMemberLists({ids.back()}, {probs.back()}, scored->size(), len, k, &top, &top_probs);
      PrecisionCounter counter(ks);
      for (int64_t i = 0; i < scored->size(); ++i)
        counter.Add(top.data() + i * k, k, scored->Labels(i), scored->NumLabels(i));
      const EvalResult r = counter.Result();
      line += Format("test  %s alone | P@1 %.4f P@3 %.4f P@5 %.4f | %lld points\n",
                     rerank ? "reranker" : "linear member", r.At(1), r.At(3), r.At(5),
                     (long long)r.points);
      unscored_wall += ProcessWallSeconds() - s0;
      unscored_cpu += ProcessCpuSeconds() - c0;
    }
    if (root) events->Line(line);
  }
  const double train_wall = ProcessWallSeconds() - unscored_wall;
  const double train_cpu = ProcessCpuSeconds() - unscored_cpu;
  if (scored->size() == 0) return last;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int32_t> top;
  std::vector<double> top_probs;
  if (linear && share <= 0) {  // validation left the linear member out
    ids.pop_back();
    probs.pop_back();
  }
  MergeMemberLists(ids, probs, MemberWeights(trained, linear ? share : 0.0), scored->size(), len, k,
                   &top, &top_probs);
  PrecisionCounter counter(ks);
  for (int64_t i = 0; i < scored->size(); ++i)
    counter.Add(top.data() + i * k, k, scored->Labels(i), scored->NumLabels(i));
  EvalResult r = counter.Result();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (root) {
    if (rerank)
      events->Line(
          Format("test  network and reranker | P@1 %.4f P@3 %.4f P@5 %.4f | %lld "
                 "points (the reranker's share %g%s) | %.1fs of training\n",
                 r.At(1), r.At(3), r.At(5), (long long)r.points, share,
                 share > 0 ? "" : ": left out", train_wall));
    else
      events->Line(Format(
          "test  ensemble of %d%s | P@1 %.4f P@3 %.4f P@5 %.4f | %lld points (the "
          "mean of the members' probabilities%s) | %.1fs of training\n",
          trained, linear ? " and the linear member" : "", r.At(1), r.At(3), r.At(5),
          (long long)r.points,
          linear ? Format(", the linear member's share %g%s", share, share > 0 ? "" : ": left out")
                       .c_str()
                 : "",
          train_wall));
    JsonObject o;
    o.Add("set", "test")
        .Add("ensemble", trained)
        .Add("linear", dense_linear)
        .Add("rerank", rerank)
        .Add("linear_share", linear ? share : 0.0)
        .Add("p_at_1", r.At(1))
        .Add("p_at_3", r.At(3))
        .Add("p_at_5", r.At(5))
        .Add("eval_points", r.points)
        .Add("train_wall_s", train_wall)
        .Add("train_cpu_s", train_cpu)
        .Add("ranks", comm->size())
        .Add("threads", cfg.threads);
    events->Record(o.str());
    if (!cfg.metrics_file.empty()) MetricsFile(cfg.metrics_file, events).Write(o);
  }
  return r;
}

}  // namespace dslide
