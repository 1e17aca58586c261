// A trainer checkpoint's state.json: the trainer counters, the skip-step rule's window and the
// data loader's state, each read as a resume reads them.
#include "fuzz_util.h"
#include "tandem/data/loader_state.h"
#include "tandem/io/json.h"
#include "tandem/optim/skip_step.h"
#include "tandem/train/checkpoint_manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tandem;
  fuzz::expect_clean([&] {
    const nlohmann::json state = io::parse_json(fuzz::as_text(data, size), "state.json");
    train::check_trainer_state(state, 6, "state.json");
    (void)optim::SkipStepRule::from_json(state.at("skip_step"));
    (void)data::LoaderState::from_json(state.at("loader"), "state.json");
  });
  return 0;
}
