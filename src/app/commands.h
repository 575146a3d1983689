// The subcommands of the dslide executable.
#pragma once

#include "dist/communicator.h"

namespace dslide::app {

int Gen(int argc, const char* const* argv, Communicator* comm);
int Train(int argc, const char* const* argv, Communicator* comm);
int Eval(int argc, const char* const* argv, Communicator* comm);
int Bench(int argc, const char* const* argv, Communicator* comm);
int Export(int argc, const char* const* argv, Communicator* comm);
int Convert(int argc, const char* const* argv, Communicator* comm);
int Predict(int argc, const char* const* argv, Communicator* comm);

}  // namespace dslide::app
