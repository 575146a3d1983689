// dslide's entry point: picks the communicator (MPI when started by a launcher), dispatches
// the subcommand, and turns every failure into a message and a non-zero exit on all ranks.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>

#include "app/commands.h"
#include "backend/layer_backend.h"
#include "common/error.h"
#include "common/parallel.h"
#include "common/stop_signal.h"
#include "devices/backend_factory.h"
#include "dist/mpi_communicator.h"

namespace {

constexpr const char* kUsage =
    "dslide: distributed SLIDE, sparse training of very wide networks\n"
    "\n"
    "Usage: dslide COMMAND [options]      (COMMAND --help for its options; --version: the\n"
    "                                     version and the backends built)\n"
    "  gen      write synthetic XC data of a paper's shape\n"
    "  train    train (and evaluate) a network; under mpirun the model is sharded over ranks\n"
    "  eval     evaluate a checkpoint (on any number of ranks)\n"
    "  predict  write the top-k labels of new inputs from a checkpoint\n"
    "  bench    train on generated data and print one JSON object of figures\n"
    "  export   write a checkpoint's model as plain HDF5\n"
    "  convert  turn XC text into a binary dataset that loads faster\n";

}  // namespace

int main(int argc, char** argv) {
  using namespace dslide;
  // A stop signal at any time from here is answered: held through the restart below (a
  // blocked signal stays pending across exec), then delivered to the handlers. train and
  // bench finish their step and stop with their checkpoint (or before their first step);
  // the other commands end at once, saying so.
  HoldStopSignals();
  PreferSleepingIdleThreads(argv);
  const bool trains =
      argc >= 2 && (!std::strcmp(argv[1], "train") || !std::strcmp(argv[1], "bench"));
  InstallStopHandlers(trains ? StopMode::kAfterStep : StopMode::kNow);
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::printf("%s", kUsage);
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version")) {
    const char* wait = std::getenv(kWaitPolicyVar);
    const char* spin = std::getenv(kSpinCountVar);
    std::printf("dslide %s\nbackends: %s\nidle threads: %s=%s %s=%s\n", DSLIDE_VERSION,
                BuiltBackends(), kWaitPolicyVar, wait != nullptr ? wait : "(unset)", kSpinCountVar,
                spin != nullptr ? spin : "(unset)");
    return 0;
  }
  std::unique_ptr<dist::MpiSession> mpi;
  std::unique_ptr<Communicator> comm;
  int rank = 0, size = 1;
  try {
    if (dist::LaunchedByMpi()) {
      mpi = std::make_unique<dist::MpiSession>(&argc, &argv);
      comm = std::make_unique<dist::MpiCommunicator>();
    } else {
      comm = std::make_unique<LocalCommunicator>();
    }
    rank = comm->rank();
    size = comm->size();
    const std::string cmd = argv[1];
    const char* const* sub = argv + 1;
    const int nsub = argc - 1;
    int rc;
    if (cmd == "gen")
      rc = app::Gen(nsub, sub, comm.get());
    else if (cmd == "train")
      rc = app::Train(nsub, sub, comm.get());
    else if (cmd == "eval")
      rc = app::Eval(nsub, sub, comm.get());
    else if (cmd == "predict")
      rc = app::Predict(nsub, sub, comm.get());
    else if (cmd == "bench")
      rc = app::Bench(nsub, sub, comm.get());
    else if (cmd == "export")
      rc = app::Export(nsub, sub, comm.get());
    else if (cmd == "convert")
      rc = app::Convert(nsub, sub, comm.get());
    else
      throw Error("unknown command '" + cmd +
                  "' (expected gen, train, eval, predict, bench, export or convert)");
    comm.reset();
    if (mpi) mpi->Finalize();
    return rc;
  } catch (const Stop& e) {
    // Every rank stops together (a stop signal, divergence, a checkpoint that could not be
    // written): no abort, a clean shutdown and the stated exit code.
    if (rank == 0) {
      std::fprintf(stderr, "dslide: %s\n", e.what());
      std::fflush(stderr);
    }
    comm.reset();
    if (mpi) mpi->Finalize();
    return e.code();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "[rank %d] dslide error: out of memory (an allocation failed)\n", rank);
    std::fflush(stderr);
    if (mpi && size > 1) dist::MpiSession::Abort(1);
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] dslide error: %s\n", rank, e.what());
    std::fflush(stderr);
    if (mpi && size > 1) dist::MpiSession::Abort(1);  // stop every rank, never hang
    return 1;
  }
}
