// The options of the commands other than train: gen, eval, predict, bench, export and
// convert, each a table over its config struct (config.h) and its checks.
#include <algorithm>
#include <string>

#include "common/error.h"
#include "config/config.h"
#include "config/option_table.h"

namespace dslide {

using namespace options;  // NOLINT: this file is the option table's

void GenConfig::ResolveShape() {
  struct Shape {
    const char* name;
    int64_t features, labels, points;
    int nnz, lpp;
  };
  static const Shape kShapes[] = {
      {"amazon-670k", 135909, 670091, 100000, 75, 5},
      {"delicious-200k", 782585, 205443, 50000, 300, 75},
      {"wikilshtc-325k", 1617899, 325056, 50000, 42, 3},
  };
  if (!shape.empty()) {
    const Shape* found = nullptr;
    for (const auto& s : kShapes)
      if (shape == s.name) found = &s;
    DSLIDE_CHECK(found, "option --shape: unknown shape '", shape,
                 "' (expected amazon-670k|delicious-200k|wikilshtc-325k)");
    if (features == 0) features = found->features;
    if (labels == 0) labels = found->labels;
    if (points == 0) points = found->points;
    if (nnz == 0) nnz = found->nnz;
    if (labels_per_point == 0) labels_per_point = found->lpp;
  }
  if (features == 0) features = 5000;
  if (labels == 0) labels = 1000;
  if (points == 0) points = 20000;
  if (nnz == 0) nnz = 30;
  if (labels_per_point == 0) labels_per_point = 3;
  if (test_points == 0) test_points = std::max<int64_t>(1, points / 5);
}

void GenConfig::Validate() const {
  DSLIDE_CHECK(!out.empty(), "option --out is required");
  CheckRange<int64_t>("points", points, 1, kMaxGenPoints);
  CheckRange<int64_t>("test-points", test_points, 1, kMaxGenPoints);
  CheckRange<int64_t>("features", features, 2, kMaxDim);
  CheckRange<int64_t>("labels", labels, 2, kMaxDim);
  DSLIDE_CHECK(nnz >= 1 && nnz <= features, "option --nnz: must be in [1, features = ", features,
               "], got ", nnz);
  DSLIDE_CHECK(labels_per_point >= 1 && labels_per_point <= labels,
               "option --labels-per-point: must be in [1, labels = ", labels, "], got ",
               labels_per_point);
  DSLIDE_CHECK(noise >= 0 && noise < 1, "option --noise: must be in [0, 1), got ", noise);
  DSLIDE_CHECK(zipf >= 0 && zipf <= 3, "option --zipf: must be in [0, 3], got ", zipf);
}

bool ParseGen(int argc, const char* const* argv, GenConfig* c, std::string* help) {
  po::options_description d("gen options");
  OptionTable t(&d);
  t.Path("shape", &c->shape, "amazon-670k|delicious-200k|wikilshtc-325k (sets sizes)");
  t.Field("points", &c->points, "training points (0: shape default)");
  t.Field("test-points", &c->test_points, "test points (0: points/5)");
  t.Field("features", &c->features, "input dimension");
  t.Field("labels", &c->labels, "number of labels");
  t.Field("nnz", &c->nnz, "average non-zero features per point");
  t.Field("labels-per-point", &c->labels_per_point,
          "maximum labels per point (each point has 1..M)");
  t.Field("noise", &c->noise, "fraction of random noise features");
  t.Field("zipf", &c->zipf, "Zipf exponent of label popularity");
  t.Switch("popular-first", &c->popular_first,
           "number labels by descending popularity (label 0 the most frequent), as word tasks "
           "number words (default: popular labels spread over the id range)");
  t.Text(
      "seed", [c] { return Text(c->seed); }, "random seed, in [0, 2^64)");
  t.Path("out", &c->out, "output prefix: writes PREFIX.train.txt and PREFIX.test.txt");
  po::variables_map vm;
  if (!Parse(argc, argv, d, "Usage: dslide gen [--shape NAME] [options] --out PREFIX", &vm, help))
    return false;
  c->seed = ParseUnsigned("seed", vm["seed"].as<std::string>());
  c->ResolveShape();
  c->Validate();
  return true;
}

namespace {

void AddAnnOptions(OptionTable& t, AnnConfig* c, bool with_lsh) {
  t.Text(
      "approximate", [c] { return c->approximate; },
      with_lsh ? "off|ann|lsh: also score approximately, beside the exact scores: ann scores "
                 "the candidates of an HNSW graph of the output rows (--ann-*), lsh the "
                 "output layer's own LSH selection (filled to its budget, as training "
                 "selects); prints their P@k, their recall of the exact top-k and the seconds "
                 "of each"
               : "off|ann: ann scores, instead of every output, the candidates of an HNSW "
                 "graph of the output rows (--ann-*; built at the start, or read from "
                 "--ann-file) and writes the k best of them; a softmax model's normaliser "
                 "beyond them is estimated (--ann-tail)",
      "ann");
  t.Field("ann-ef", &c->ef,
          "--approximate ann: candidates per point (the rows scored), in [k, 10000]");
  t.Field("ann-m", &c->m, "--approximate ann: links per row of the graph, in [2, 100]");
  t.Field("ann-build-ef", &c->build_ef,
          "--approximate ann: candidates while building the graph, in [1, 10000]");
  t.Field("ann-tail", &c->tail,
          "--approximate ann, softmax models: rows drawn uniformly (per block of points) "
          "to estimate the normaliser's part outside each point's candidates (0: the "
          "candidates' terms alone), in [0, 100000]");
  t.Path("ann-file", &c->file,
         "--approximate ann: read the graph from this file when it indexes the model's "
         "weights, else build it and write it there (under mpirun, one file per rank: "
         "FILE.rank-R-of-P)");
}

void FinishAnn(const po::variables_map& vm, AnnConfig* c, bool with_lsh, int k) {
  c->approximate = vm["approximate"].as<std::string>();
  DSLIDE_CHECK(
      c->approximate == "off" || c->approximate == "ann" || (with_lsh && c->approximate == "lsh"),
      "option --approximate: invalid value '", c->approximate, "' (expected ",
      with_lsh ? "off|ann|lsh" : "off|ann", ")");
  CheckRange("ann-m", c->m, 2, 100);
  CheckRange("ann-build-ef", c->build_ef, 1, 10000);
  CheckRange("ann-ef", c->ef, 1, 10000);
  CheckRange("ann-tail", c->tail, 0, 100000);
  DSLIDE_CHECK(c->approximate != "ann" || c->ef >= k, "option --ann-ef: ", c->ef,
               " candidates cannot give the top ", k);
}

}  // namespace

bool ParseEval(int argc, const char* const* argv, EvalConfig* c, std::string* help) {
  po::options_description d("eval options");
  OptionTable t(&d);
  t.Path("model", &c->model_dir, "model (checkpoint) directory");
  t.Path("test", &c->test_file, "test file");
  t.Text(
      "k", [c] { return Join(c->k); }, "precision cut-offs, comma separated, each in [1, 10000]");
  t.Field("points", &c->points, "evaluate the first N test points (0: all)");
  t.Field("threads", &c->threads, "OpenMP threads per rank (0: default)");
  AddAnnOptions(t, &c->ann, /*with_lsh=*/true);
  po::variables_map vm;
  if (!Parse(argc, argv, d,
             "Usage: dslide eval --model DIR --test FILE [options]\n"
             "Exact P@k of the newest checkpoint in DIR (written by any number of ranks) on FILE.",
             &vm, help))
    return false;
  c->k = ParseList<int>("k", vm["k"].as<std::string>());
  for (int k : c->k)
    DSLIDE_CHECK(k >= 1 && k <= kMaxTopK, "option --k: each cut-off must be in [1, ", kMaxTopK,
                 "], got ", k);
  DSLIDE_CHECK(!c->model_dir.empty(), "option --model is required");
  DSLIDE_CHECK(!c->test_file.empty(), "option --test is required");
  CheckRange<int64_t>("points", c->points, 0, kMaxPoints);
  CheckRange("threads", c->threads, 0, kMaxThreads);
  FinishAnn(vm, &c->ann, /*with_lsh=*/true, *std::max_element(c->k.begin(), c->k.end()));
  return true;
}

bool ParseExport(int argc, const char* const* argv, ExportConfig* c, std::string* help) {
  po::options_description d("export options");
  OptionTable t(&d);
  t.Path("model", &c->model_dir, "checkpoint directory (its newest checkpoint)");
  t.Path("out", &c->out, "HDF5 file to write");
  t.Field("dtype", &c->dtype,
          "fp32|bf16: the weights and biases as floats, or as bfloat16 (rounded to the "
          "nearest; half the bytes, read back as those floats)");
  po::variables_map vm;
  if (!Parse(argc, argv, d,
             "Usage: dslide export --model DIR --out FILE.h5\n"
             "Writes the newest checkpoint's model as plain HDF5 (see docs/user-guide.md: Export).",
             &vm, help))
    return false;
  DSLIDE_CHECK(!c->model_dir.empty(), "option --model is required");
  DSLIDE_CHECK(!c->out.empty(), "option --out is required");
  DSLIDE_CHECK(c->dtype == "fp32" || c->dtype == "bf16", "option --dtype: invalid value '",
               c->dtype, "' (expected fp32|bf16)");
  return true;
}

bool ParseConvert(int argc, const char* const* argv, ConvertConfig* c, std::string* help) {
  po::options_description d("convert options");
  OptionTable t(&d);
  t.Path("in", &c->in, "XC text file (plain or gzip)");
  t.Path("out", &c->out, "binary dataset to write (train/eval read it like text)");
  po::variables_map vm;
  if (!Parse(argc, argv, d,
             "Usage: dslide convert --in FILE.txt --out FILE.dsb\n"
             "Converts XC text to dslide's binary dataset and prints both load times.",
             &vm, help))
    return false;
  DSLIDE_CHECK(!c->in.empty(), "option --in is required");
  DSLIDE_CHECK(!c->out.empty(), "option --out is required");
  return true;
}

bool ParsePredict(int argc, const char* const* argv, PredictConfig* c, std::string* help) {
  po::options_description d("predict options");
  OptionTable t(&d);
  t.Path("model", &c->model_dir, "checkpoint directory (its newest checkpoint) or folder");
  t.Path("input", &c->input,
         "points to score (XC text, plain or gzip, or .dsb; labels are ignored)");
  t.Field("top-k", &c->top_k, "labels per row, best first, in [1, 10000]");
  t.Path("out", &c->out, "file to write");
  t.Field("format", &c->format,
          "tsv: ROW<TAB>LABEL:SCORE ... | jsonl: {\"row\":..,\"labels\":[..],\"scores\":[..]}");
  t.Field("chunk", &c->chunk, "input points read and scored at a time, in [1, 2^24]");
  t.Field("threads", &c->threads, "OpenMP threads per rank (0: default)");
  AddAnnOptions(t, &c->ann, /*with_lsh=*/false);

  po::variables_map vm;
  if (!Parse(argc, argv, d,
             "Usage: dslide predict --model DIR --input FILE --top-k K --out FILE [--format "
             "tsv|jsonl]\n"
             "Writes the K most probable labels (softmax probabilities, exact over every output,\n"
             "or from an output index with --approximate) of each input row; under mpirun every\n"
             "rank scores its block of the outputs.",
             &vm, help))
    return false;
  DSLIDE_CHECK(!c->model_dir.empty(), "option --model is required");
  DSLIDE_CHECK(!c->input.empty(), "option --input is required");
  DSLIDE_CHECK(!c->out.empty(), "option --out is required");
  CheckRange("top-k", c->top_k, 1, kMaxTopK);
  DSLIDE_CHECK(c->format == "tsv" || c->format == "jsonl", "option --format: invalid value '",
               c->format, "' (expected tsv|jsonl)");
  CheckRange<int64_t>("chunk", c->chunk, 1, kMaxChunk);
  CheckRange("threads", c->threads, 0, kMaxThreads);
  FinishAnn(vm, &c->ann, /*with_lsh=*/false, c->top_k);
  return true;
}

bool ParseBench(int argc, const char* const* argv, BenchConfig* c, std::string* help) {
  po::options_description d("bench options");
  OptionTable t(&d);
  t.Field("shape", &c->shape, "data shape to generate");
  t.Field("points", &c->points, "training points to generate (0: shape default)");
  t.Field("features", &c->features, "input dimension (0: the shape's)");
  t.Field("labels", &c->labels, "output labels (0: the shape's)");
  t.Field("nnz", &c->nnz, "non-zero features per point (0: the shape's)");
  AddTrainOptions(t, &c->train);  // with bench's own defaults (BenchConfig)
  po::variables_map vm;
  if (!Parse(argc, argv, d,
             "Usage: dslide bench --shape NAME [options]\n"
             "Trains on generated data of that shape (or on --train/--test files) and prints "
             "one JSON object.",
             &vm, help))
    return false;
  FinishTrain(vm, &c->train);
  CheckRange<int64_t>("points", c->points, 0, kMaxGenPoints);
  DSLIDE_CHECK(c->features == 0 || (c->features >= 2 && c->features <= kMaxDim),
               "option --features: must be 0 (the shape's) or in [2, ", kMaxDim, "], got ",
               c->features);
  DSLIDE_CHECK(c->labels == 0 || (c->labels >= 2 && c->labels <= kMaxDim),
               "option --labels: must be 0 (the shape's) or in [2, ", kMaxDim, "], got ",
               c->labels);
  CheckRange("nnz", c->nnz, 0, static_cast<int>(kMaxDim));
  if (c->train.train_file.empty()) {
    c->train.train_file = "(generated)";
  } else {
    DSLIDE_CHECK(!c->train.test_file.empty(), "option --test is required with --train");
  }
  c->train.Validate();
  return true;
}

}  // namespace dslide
