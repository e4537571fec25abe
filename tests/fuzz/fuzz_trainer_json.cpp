// libFuzzer harness: a checkpoint's trainer.json (train::read_trainer_json), every field checked.
#include "libgenesis/train/checkpoint.h"
#include "tests/fuzz/fuzz_common.h"

using namespace genesis;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::expect_clean([&] { (void)train::read_trainer_json(fuzz::as_text(data, size), "trainer.json"); });
  return 0;
}
