// The executable's RunEvents: a run's lines on standard output, its warnings on standard
// error, each flushed at once; its records go to --metrics alone.
#pragma once

#include <cstdio>
#include <string>

#include "common/error.h"
#include "train/run_events.h"

namespace dslide {

class ConsoleEvents final : public RunEvents {
 public:
  void Line(const std::string& text) override {
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
  }
  void Warning(const std::string& text) override { WarnOnStderr(text); }
};

}  // namespace dslide
