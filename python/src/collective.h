// The ranks of a Python call and how its C++ work runs: Comm (the communicator and the job
// guard, and the ranks' agreement on a call's arguments), Data (a data set of a call), and
// the wrappers that release the GIL and turn dslide's errors into Python's (Collective,
// Checked, InputsChecked).
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <utility>

#include "common/error.h"
#include "common/stop_signal.h"
#include "data/dataset.h"
#include "dist/communicator.h"
#include "dist/mpi_communicator.h"
#include "job_guard.h"

namespace dslide::py {

namespace nb = nanobind;

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

inline std::pair<bool, bool> Comm::Agree(bool ok, uint64_t digest, const std::string& what) {
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

inline uint64_t Data::Digest() const { return data.Digest(); }

}  // namespace dslide::py
