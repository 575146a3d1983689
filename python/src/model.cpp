// Load: a checkpoint's or serving model's network for the Python package.
#include "model.h"

#include <filesystem>

#include "common/error.h"
#include "io/checkpoint.h"
#include "train/ensemble.h"
#include "train/predict.h"

namespace dslide::py {

std::unique_ptr<Model> Load(const std::string& path, Comm& comm) {
  std::string folder;
  CheckpointMeta meta;
  Checked([&] {
    const size_t members = EnsembleMembers(path).size();
    std::error_code ec;
    DSLIDE_CHECK(members != 1 || !std::filesystem::exists(path + "/linear", ec), path,
                 " holds a network and the linear model beside it (train --rerank or "
                 "--linear): load the network alone (",
                 path, "/member-1); `dslide predict` and `dslide eval` of the folder mix them");
    DSLIDE_CHECK(members == 0, path, " holds an ensemble of ", members,
                 " models (train --ensemble): load each member (", path,
                 "/member-1 ...), or fit dslide.Classifier(ensemble=N), which averages them");
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

}  // namespace dslide::py
