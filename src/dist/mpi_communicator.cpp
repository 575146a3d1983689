// MPI collectives with byte/time accounting done by the Communicator base class.
#include "dist/mpi_communicator.h"

#include <mpi.h>

#include <climits>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "common/error.h"

#define DSLIDE_MPI_CHECK(expr)                                                                \
  do {                                                                                        \
    const int dslide_mpi_rc = (expr);                                                         \
    if (dslide_mpi_rc != MPI_SUCCESS) {                                                       \
      char dslide_msg[MPI_MAX_ERROR_STRING];                                                  \
      int dslide_len = 0;                                                                     \
      MPI_Error_string(dslide_mpi_rc, dslide_msg, &dslide_len);                               \
      throw ::dslide::Error(                                                                  \
          ::dslide::detail::Concat(#expr, " failed: ", std::string(dslide_msg, dslide_len))); \
    }                                                                                         \
  } while (0)

namespace dslide::dist {

bool LaunchedByMpi() {
  for (const char* v :
       {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

MpiSession::MpiSession(int* argc, char*** argv) {
  int provided = 0;
  DSLIDE_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
  // Errors come back as return codes, which DSLIDE_MPI_CHECK turns into exceptions.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

void MpiSession::Finalize() { MPI_Finalize(); }

bool EnsureMpiInitialized() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return false;
  int provided = 0;
  DSLIDE_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided));
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  return true;
}

void FinalizeMpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void MpiSession::Abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

struct MpiCommunicator::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  std::vector<int> counts, displs;
  MPI_Datatype softmax_part = MPI_DATATYPE_NULL;  // four floats
  MPI_Op softmax_op = MPI_OP_NULL;                // CombineSoftmax
};

namespace {
MPI_Datatype ToMpi(DType t) {
  switch (t) {
    case DType::kInt32:
      return MPI_INT32_T;
    case DType::kInt64:
      return MPI_INT64_T;
    case DType::kFloat32:
      return MPI_FLOAT;
    case DType::kFloat64:
      return MPI_DOUBLE;
  }
  return MPI_BYTE;
}
MPI_Op ToMpi(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return MPI_SUM;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kMin:
      return MPI_MIN;
  }
  return MPI_SUM;
}
void CombineSoftmaxOp(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const SoftmaxPart*>(in);
  auto* b = static_cast<SoftmaxPart*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = CombineSoftmax(a[i], b[i]);
}
}  // namespace

MpiCommunicator::MpiCommunicator() : MpiCommunicator(MPI_Comm_c2f(MPI_COMM_WORLD)) {}

MpiCommunicator::MpiCommunicator(int64_t fortran_comm) : impl_(std::make_unique<Impl>()) {
  const MPI_Comm base = MPI_Comm_f2c(static_cast<MPI_Fint>(fortran_comm));
  DSLIDE_CHECK(base != MPI_COMM_NULL, "not an MPI communicator (Fortran handle ", fortran_comm,
               ")");
  DSLIDE_MPI_CHECK(MPI_Comm_dup(base, &impl_->comm));
  MPI_Comm_set_errhandler(impl_->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(impl_->comm, &rank_);
  MPI_Comm_size(impl_->comm, &size_);
  MPI_Comm node;
  DSLIDE_MPI_CHECK(
      MPI_Comm_split_type(impl_->comm, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
  MPI_Comm_rank(node, &local_rank_);
  MPI_Comm_free(&node);
  static_assert(sizeof(SoftmaxPart) == 4 * sizeof(float), "SoftmaxPart is four floats");
  DSLIDE_MPI_CHECK(MPI_Type_contiguous(4, MPI_FLOAT, &impl_->softmax_part));
  DSLIDE_MPI_CHECK(MPI_Type_commit(&impl_->softmax_part));
  DSLIDE_MPI_CHECK(MPI_Op_create(&CombineSoftmaxOp, /*commute=*/1, &impl_->softmax_op));
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (impl_->softmax_op != MPI_OP_NULL) MPI_Op_free(&impl_->softmax_op);
  if (impl_->softmax_part != MPI_DATATYPE_NULL) MPI_Type_free(&impl_->softmax_part);
  if (impl_->comm != MPI_COMM_NULL) MPI_Comm_free(&impl_->comm);
}

void MpiCommunicator::DoAllgatherv(const void* mine, const std::vector<int64_t>& counts, void* all,
                                   DType type) {
  // MPI counts are int: this version refuses larger messages instead of truncating them.
  auto& c = impl_->counts;
  auto& d = impl_->displs;
  c.resize(size_);
  d.resize(size_);
  int64_t off = 0;
  for (int r = 0; r < size_; ++r) {
    DSLIDE_CHECK(counts[r] <= INT_MAX && off <= INT_MAX, "Allgatherv of ", counts[r],
                 " elements exceeds MPI's int counts; use a smaller --batch");
    c[r] = static_cast<int>(counts[r]);
    d[r] = static_cast<int>(off);
    off += counts[r];
  }
  DSLIDE_MPI_CHECK(MPI_Allgatherv(mine, c[rank_], ToMpi(type), all, c.data(), d.data(), ToMpi(type),
                                  impl_->comm));
}

void MpiCommunicator::DoReduceScatterSum(const float* in, const std::vector<int64_t>& counts,
                                         float* mine) {
  auto& c = impl_->counts;
  c.resize(size_);
  for (int r = 0; r < size_; ++r) {
    DSLIDE_CHECK(counts[r] <= INT_MAX, "Reduce_scatter of ", counts[r],
                 " elements exceeds MPI's int counts; use a smaller --batch");
    c[r] = static_cast<int>(counts[r]);
  }
  DSLIDE_MPI_CHECK(MPI_Reduce_scatter(in, mine, c.data(), MPI_FLOAT, MPI_SUM, impl_->comm));
}

void MpiCommunicator::DoAllreduce(void* inout, int64_t n, DType type, ReduceOp op) {
  // Large buffers (data-parallel gradients) go in chunks below INT_MAX elements.
  constexpr int64_t kChunk = int64_t{1} << 30;
  char* p = static_cast<char*>(inout);
  for (int64_t done = 0; done < n; done += kChunk) {
    const int64_t c = std::min(kChunk, n - done);
    DSLIDE_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, p + done * SizeOf(type), static_cast<int>(c),
                                   ToMpi(type), ToMpi(op), impl_->comm));
  }
}

void MpiCommunicator::DoAllreduceSoftmax(SoftmaxPart* inout, int64_t n) {
  DSLIDE_CHECK(n <= INT_MAX, "Allreduce of ", n, " softmax records exceeds MPI's int counts");
  DSLIDE_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, inout, static_cast<int>(n), impl_->softmax_part,
                                 impl_->softmax_op, impl_->comm));
}

void MpiCommunicator::DoBroadcast(void* buf, int64_t bytes, int root) {
  constexpr int64_t kChunk = int64_t{1} << 30;
  char* p = static_cast<char*>(buf);
  for (int64_t done = 0; done < bytes; done += kChunk)
    DSLIDE_MPI_CHECK(MPI_Bcast(p + done, static_cast<int>(std::min(kChunk, bytes - done)), MPI_BYTE,
                               root, impl_->comm));
}

}  // namespace dslide::dist
