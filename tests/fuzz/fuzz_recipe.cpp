// libFuzzer harness: recipes (recipe::load_recipe). The input is written as main.toml and as
// inc.toml beside it, so `include = ["inc.toml"]` and self-includes reach the include logic.
// A recipe that loads must print (to_toml) as TOML that parses back to the same recipe.
#include "libgenesis/recipe/recipe.h"
#include "tests/fuzz/fuzz_common.h"

using namespace genesis;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = fuzz::as_text(data, size);
  fuzz::write_input("inc.toml", text);
  const std::filesystem::path path = fuzz::write_input("main.toml", text);
  fuzz::expect_clean([&] {
    const RecipeSpec spec = load_recipe(path);
    const std::string resolved = spec.to_toml();
    std::string again;
    try {
      again = parse_recipe(resolved, "resolved.toml").to_toml();
    } catch (const Error& e) {
      fuzz::finding("a loaded recipe's to_toml() does not parse back", std::string(e.what()) + "\n" + resolved);
    }
    if (again != resolved) fuzz::finding("a loaded recipe's to_toml() parses to another recipe", resolved + "\n---\n" + again);
  });
  return 0;
}
