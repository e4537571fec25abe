// genesis report RUN_DIR... [--out report.html]: curves, final figures and differing recipe
// keys of one or several runs as an HTML page and SVG files (libgenesis/train/report.h).
#include <iostream>

#include "apps/genesis/commands.h"
#include "libgenesis/train/report.h"

namespace genesis::cli {

void add_report_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand(
      "report", "Curves (loss, evaluation, lr, throughput), final figures and differing recipe keys of runs, as "
                "an HTML page and SVG files");
  auto runs = std::make_shared<std::vector<std::string>>();
  auto out = std::make_shared<std::string>("report.html");
  sub->add_option("RUN_DIR", *runs, "Run directories (runs/NAME); several overlay their curves")->required();
  sub->add_option("--out", *out, "The HTML page to write; the SVG files go beside it (default: report.html)");
  register_command(sub, [runs, out] {
    const std::vector<std::filesystem::path> dirs(runs->begin(), runs->end());
    const train::ReportFiles files = train::write_report(dirs, *out);
    std::cout << files.html.string() << "\n";
    for (const auto& svg : files.svgs) std::cout << svg.string() << "\n";
    return 0;
  });
}

}  // namespace genesis::cli
