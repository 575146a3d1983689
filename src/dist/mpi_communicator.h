// The Communicator over MPI: the only code in dslide that calls MPI_*.
#pragma once

#include <memory>

#include "dist/communicator.h"

namespace dslide::dist {

/// True when this process was started by an MPI launcher (mpirun, srun with PMI/PMIx).
bool LaunchedByMpi();

/// Owns MPI initialisation: MPI_Init_thread (funneled) on construction, MPI_Finalize in
/// Finalize() (never in a destructor: a rank that throws must abort instead).
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  void Finalize();
  /// Ends every rank of the job (MPI_Abort) with `code`.
  [[noreturn]] static void Abort(int code);
};

/// For a host process that may have initialised MPI itself (Python with mpi4py): initialises
/// MPI (MPI_THREAD_SERIALIZED, no arguments) unless it is already; returns true when this call
/// initialised it, and the caller then finalises it (FinalizeMpi).
bool EnsureMpiInitialized();
/// MPI_Finalize unless MPI is finalised already.
void FinalizeMpi();

/// Collectives over a private duplicate of MPI_COMM_WORLD, or of another communicator.
class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator();
  /// Over a duplicate of the communicator whose Fortran handle is `fortran_comm` (what
  /// mpi4py's Comm.py2f() gives; no MPI type in this header). MPI must be initialised.
  explicit MpiCommunicator(int64_t fortran_comm);
  ~MpiCommunicator() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  /// Rank among the ranks on the same node (for binding a rank to a GPU).
  int local_rank() const { return local_rank_; }

 protected:
  void DoAllgatherv(const void* mine, const std::vector<int64_t>& counts, void* all,
                    DType type) override;
  void DoReduceScatterSum(const float* in, const std::vector<int64_t>& counts,
                          float* mine) override;
  void DoAllreduce(void* inout, int64_t n, DType type, ReduceOp op) override;
  /// MPI_Allreduce with a user operation (CombineSoftmax) on records of four floats.
  void DoAllreduceSoftmax(SoftmaxPart* inout, int64_t n) override;
  void DoBroadcast(void* buf, int64_t bytes, int root) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0, size_ = 1, local_rank_ = 0;
};

}  // namespace dslide::dist
