#pragma once
// `genesis report`: the curves of one or several runs overlaid (training loss, the evaluation
// metric, learning rate, throughput) as standalone SVG files and one self-contained HTML page
// with the same pictures inline, a table of each run's final figures, and the recipe keys
// whose values differ between the runs (a sweep's axis).
#include <filesystem>
#include <string>
#include <vector>

namespace genesis::train {

struct ReportFiles {
  std::filesystem::path html;
  std::vector<std::filesystem::path> svgs;
};

// Reads each run directory's metrics.jsonl, summary.json (when present) and recipe.toml, and
// writes `html` plus `<stem>_<curve>.svg` beside it. A directory without metrics.jsonl is a
// UsageError naming it.
ReportFiles write_report(const std::vector<std::filesystem::path>& runs, const std::filesystem::path& html);

}  // namespace genesis::train
