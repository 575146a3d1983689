// The events of a run whose caller takes none.
#include "train/run_events.h"

#include "common/error.h"

namespace dslide {

namespace {

class WarningsOnly final : public RunEvents {
 public:
  void Warning(const std::string& text) override { WarnOnStderr(text); }
};

}  // namespace

RunEvents* NoEvents() {
  static WarningsOnly events;
  return &events;
}

}  // namespace dslide
