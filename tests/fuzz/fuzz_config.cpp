// libFuzzer harness: Hugging Face config.json (models::config_parameter_count, and for configs
// of at most two million parameters models::causal_lm_from_config, which builds the model).
#include "libgenesis/models/hf.h"
#include "tests/fuzz/fuzz_common.h"

using namespace genesis;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = fuzz::as_text(data, size);
  fuzz::expect_clean([&] {
    const double parameters = models::config_parameter_count(text);
    if (!(parameters >= 0)) fuzz::finding("a negative or NaN parameter count", text);
    if (parameters <= 2e6) (void)models::causal_lm_from_config(text);
  });
  return 0;
}
