#include "libgenesis/train/data_source.h"

#include <vector>

#include "libgenesis/core/error.h"

namespace genesis::train {

// The sources, each in its own file (sample_source.cpp, csv_source.cpp, image_folder_source.cpp,
// text_classification_source.cpp, token_source.cpp, sft_source.cpp).
std::unique_ptr<DataSource> open_sample_source(const RecipeSpec& spec, Device device, RunLog& log,
                                               const EvalShare& share, const std::string& encoding);
std::unique_ptr<DataSource> open_csv_source(const RecipeSpec& spec, Device device, RunLog& log, const EvalShare& share,
                                            const std::string& encoding);
std::unique_ptr<DataSource> open_image_folder_source(const RecipeSpec& spec, Device device, RunLog& log,
                                                     const EvalShare& share, const std::string& encoding);
std::unique_ptr<DataSource> open_text_classification_source(const RecipeSpec& spec, Device device, RunLog& log,
                                                            const EvalShare& share, const std::string& encoding);
std::unique_ptr<DataSource> open_token_source(const RecipeSpec& spec, Device device, RunLog& log,
                                              const EvalShare& share, const std::string& encoding);
std::unique_ptr<DataSource> open_sft_source(const RecipeSpec& spec, Device device, RunLog& log, const EvalShare& share,
                                            const std::string& encoding);

namespace {

using Opener = std::unique_ptr<DataSource> (*)(const RecipeSpec&, Device, RunLog&, const EvalShare&,
                                               const std::string& encoding);

struct SourceEntry {
  const char* name;  // data.name
  bool language_model;
  Opener open;
};

// A static table rather than registration from each file: the linker drops an object file of a
// static library that nothing references, registration and all.
const std::vector<SourceEntry>& sources() {
  static const std::vector<SourceEntry> table{
      {"fashion_mnist", false, open_sample_source},
      {"csv", false, open_csv_source},
      {"image_folder", false, open_image_folder_source},
      {"text_classification", false, open_text_classification_source},
      {"tokens", true, open_token_source},
      {"sft", true, open_sft_source},
  };
  return table;
}

const SourceEntry& find_source(const std::string& name) {
  std::string names;
  for (const SourceEntry& s : sources()) {
    if (name == s.name) return s;
    names += std::string(names.empty() ? "" : ", ") + s.name;
  }
  GENESIS_THROW(RecipeError, "data.name: no data source is called '", name, "' (there are: ", names, ")");
}

}  // namespace

std::unique_ptr<DataSource> open_data_source(const RecipeSpec& spec, Device device, RunLog& log,
                                             const EvalShare& share, const std::string& encoding) {
  return find_source(spec.data.name).open(spec, device, log, share, encoding);
}

bool language_model_data(const std::string& data_name) { return find_source(data_name).language_model; }

}  // namespace genesis::train
