// An ensemble's linear member or a network's reranker (model/linear_ovr.h) on disk:
// FOLDER/linear/linear.h5, one HDF5 file of the weights ((features + 1) x labels, the bias
// row last; a reranker's sparse by label, format 2), its share of the mean probability and
// the solver's settings, with the checksum sidecar of checkpoints (linear.h5.sum), verified
// before the file is parsed.
#pragma once

#include <string>

#include "model/linear_ovr.h"

namespace dslide {

/// The linear member's file in an ensemble's folder.
std::string LinearModelFile(const std::string& folder);

/// Writes `model` (solved with `options`) and its `share` of the ensemble's mean probability
/// as LinearModelFile(folder), creating the folders; the file is written whole (a temporary
/// name, renamed), then its sidecar.
void WriteLinearModel(const std::string& folder, const LinearOvr& model,
                      const LinearOvrOptions& options, double share);

/// Reads LinearModelFile(folder) and its share; a missing, truncated or altered file
/// throws dslide::Error (DamagedCheckpoint) naming it.
LinearOvr ReadLinearModel(const std::string& folder, double* share);

/// Whether LinearModelFile(folder) holds a reranker (a shortlist model, `train --rerank`)
/// rather than an ensemble's linear member; false where it cannot be read.
bool LinearModelIsReranker(const std::string& folder);

}  // namespace dslide
