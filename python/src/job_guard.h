// The job guard of the Python package under MPI: a rank that leaves Python (sys.exit, the end
// of its script) while the other ranks are in, or go on to, a collective call of the package
// would leave them waiting in it for ever, and itself in MPI_Finalize. The executable cannot
// meet this (its ranks run the same code to the end); a script can.
//
// The guard is a private duplicate of MPI_COMM_WORLD, made once, collectively, with the first
// communicator of the package that spans the world (comm=None under mpirun, or mpi4py's
// COMM_WORLD). Over it:
//  - Enter(what), before each collective call (making a communicator, agreeing on the
//    arguments, gathering the weights): a non-blocking barrier, polled; a rank that has left
//    meanwhile has sent its "left" message, and the rank waiting prints who left and how and
//    ends the job (MPI_Abort) instead of entering a collective that would never end.
//  - Leave(code), when Python exits (atexit): sends "left, with this exit code" to every other
//    rank, then waits until every other rank has left too (a rank still working is waited for,
//    as MPI_Finalize would; one that enters a collective call meanwhile ends the job).
// Polling, not a thread: the package initialises MPI as MPI_THREAD_SERIALIZED.
// FinalizeWithin: MPI_Finalize with a watchdog, for the MPI that the package initialised.
//
// With module.cpp's bindings of it, the only code besides src/dist that calls MPI itself;
// header-only, as the extension's sources are listed in CMakeLists.txt.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dslide::py {

class JobGuard {
 public:
  /// An exit code that Python did not tell (the script ended, or raised SystemExit itself).
  static constexpr int kUnknownCode = -1;

  /// The guard, or null before it is made (or where no communicator spans the world).
  static JobGuard* Get() { return guard_; }

  /// Makes the guard when `fortran_comm` (-1: MPI_COMM_WORLD) spans every rank of the world,
  /// which has more than one, and no guard exists: collective over the world (every rank of
  /// such a communicator makes this call). Returns true when this call made it.
  static bool Start(int64_t fortran_comm) {
    if (guard_ != nullptr || !SpansWorld(fortran_comm)) return false;
    MPI_Comm comm = MPI_COMM_NULL;
    if (MPI_Comm_dup(MPI_COMM_WORLD, &comm) != MPI_SUCCESS) return false;
    guard_ = new JobGuard(comm);  // for the process's life (atexit and later)
    return true;
  }

  /// The guard of a communicator (-1: the world): the guard when it spans the world, else
  /// null (a communicator of some ranks only is not guarded).
  static JobGuard* For(int64_t fortran_comm) {
    return guard_ != nullptr && SpansWorld(fortran_comm) ? guard_ : nullptr;
  }

  /// Before a collective call `what`: returns once every rank has entered it; ends the job
  /// (MPI_Abort) if another rank has left Python. Call without the GIL.
  void Enter(const std::string& what) {
    if (left_) return;  // Python's teardown: the other ranks have left too
    MPI_Request barrier = MPI_REQUEST_NULL;
    MPI_Ibarrier(comm_, &barrier);
    Poll([&] {
      int done = 0;
      MPI_Test(&barrier, &done, MPI_STATUS_IGNORE);
      if (done) return true;
      int flag = 0;
      MPI_Status status;
      MPI_Iprobe(MPI_ANY_SOURCE, kLeftTag, comm_, &flag, &status);
      if (flag) AbortForLeft(status.MPI_SOURCE, what);
      return false;
    });
  }

  /// When Python exits: tells every other rank that this one leaves with `code` (or
  /// kUnknownCode), then waits until every other rank has left. Call without the GIL.
  void Leave(int code) {
    if (left_) return;
    left_ = true;
    code_ = code;
    std::vector<MPI_Request> requests;
    std::vector<int> codes(static_cast<size_t>(size_), 0);
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      requests.emplace_back();
      MPI_Isend(&code_, 1, MPI_INT, r, kLeftTag, comm_, &requests.back());
      requests.emplace_back();
      MPI_Irecv(&codes[static_cast<size_t>(r)], 1, MPI_INT, r, kLeftTag, comm_, &requests.back());
    }
    Poll([&] {
      int done = 0;
      MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
      return done != 0;
    });
  }

  int rank() const { return rank_; }
  /// The exit code Leave was given (kUnknownCode before).
  int code() const { return code_; }

  /// The status a job ends with for a rank's exit `code`: its own where it is a failure, 1
  /// where it is 0 or unknown (the job did not end as it should).
  static int AbortCode(int code) { return code > 0 && (code & 0xff) != 0 ? code & 0xff : 1; }

 private:
  static constexpr int kLeftTag = 1;

  explicit JobGuard(MPI_Comm comm) : comm_(comm) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }

  static bool SpansWorld(int64_t fortran_comm) {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (!initialized || finalized) return false;
    const MPI_Comm comm =
        fortran_comm < 0 ? MPI_COMM_WORLD : MPI_Comm_f2c(static_cast<MPI_Fint>(fortran_comm));
    if (comm == MPI_COMM_NULL) return false;
    int world = 0, result = MPI_UNEQUAL;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm_compare(comm, MPI_COMM_WORLD, &result);
    return world > 1 && (result == MPI_IDENT || result == MPI_CONGRUENT);
  }

  /// Calls `done` until it says so: at once at first (the ranks usually arrive together),
  /// then with sleeps growing to 5 ms (a rank may work for long before it arrives).
  template <class F>
  static void Poll(F&& done) {
    const auto start = std::chrono::steady_clock::now();
    auto nap = std::chrono::microseconds(50);
    while (!done()) {
      if (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(2)) continue;
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, std::chrono::microseconds(5000));
    }
  }

  [[noreturn]] void AbortForLeft(int source, const std::string& what) {
    int code = kUnknownCode;
    MPI_Recv(&code, 1, MPI_INT, source, kLeftTag, comm_, MPI_STATUS_IGNORE);
    const std::string how = code == kUnknownCode ? "its script ended or raised SystemExit"
                                                 : "sys.exit, exit code " + std::to_string(code);
    std::fprintf(stderr,
                 "dslide: rank %d left Python (%s) while rank %d waits for it in %s: ending "
                 "every rank of the job (MPI_Abort)\n",
                 source, how.c_str(), rank_, what.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, AbortCode(code));
    std::_Exit(AbortCode(code));
  }

  static inline JobGuard* guard_ = nullptr;
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  int code_ = kUnknownCode;  // sent by Leave: MPI_Isend reads it until the send completes
  bool left_ = false;
};

/// `finalize()` (MPI_Finalize) with a watchdog: where it has not returned after `seconds`
/// (a rank that never arrives), this rank says so and ends with `exit_code`, which ends the
/// job (mpirun ends every rank when one fails).
template <class F>
void FinalizeWithin(double seconds, int rank, int exit_code, F&& finalize) {
  struct Watch {
    std::mutex mutex;
    std::condition_variable cv;
    bool done = false;
  };
  auto* watch = new Watch;  // freed by the watchdog once finalize returned
  std::thread([watch, seconds, rank, exit_code] {
    std::unique_lock<std::mutex> lock(watch->mutex);
    if (!watch->cv.wait_for(lock, std::chrono::duration<double>(seconds),
                            [watch] { return watch->done; })) {
      std::fprintf(stderr,
                   "dslide: rank %d: MPI_Finalize has not ended after %g s (another rank has not "
                   "reached it): ending the job (exit code %d)\n",
                   rank, seconds, exit_code);
      std::fflush(stderr);
      std::_Exit(exit_code);
    }
    lock.unlock();
    delete watch;
  }).detach();
  finalize();
  std::lock_guard<std::mutex> lock(watch->mutex);
  watch->done = true;
  watch->cv.notify_one();  // under the lock: the watchdog frees `watch` only after it
}

}  // namespace dslide::py
