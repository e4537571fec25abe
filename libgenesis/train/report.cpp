#include "libgenesis/train/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "libgenesis/core/error.h"
#include "libgenesis/io/file_util.h"
#include "libgenesis/recipe/recipe.h"

namespace genesis::train {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct Run {
  std::string name;
  std::vector<json> steps, evals;  // metrics.jsonl's step lines and evaluation lines
  json summary;                    // null when the run has none yet
  std::optional<RecipeSpec> recipe;
};

Run load_run(const fs::path& dir) {
  GENESIS_CHECK(fs::is_regular_file(dir / "metrics.jsonl"), UsageError, "report: ", dir.string(),
                " has no metrics.jsonl (pass run directories: runs/NAME)");
  Run run;
  run.name = fs::absolute(dir).lexically_normal().filename().string();
  if (run.name.empty()) run.name = fs::absolute(dir).lexically_normal().parent_path().filename().string();
  std::istringstream lines(io::read_file(dir / "metrics.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    const json j = json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("step")) continue;  // a torn last line of a crashed run
    (j.contains("eval") ? run.evals : run.steps).push_back(j);
  }
  if (fs::is_regular_file(dir / "summary.json")) run.summary = json::parse(io::read_file(dir / "summary.json", io::kMaxConfigFileBytes), nullptr, false);
  if (fs::is_regular_file(dir / "recipe.toml")) {
    try {
      run.recipe = parse_recipe(io::read_file(dir / "recipe.toml"), (dir / "recipe.toml").string());
    } catch (const RecipeError&) {
      run.recipe.reset();  // another genesis version's recipe: the differences table leaves it out
    }
  }
  return run;
}

std::string escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// Axis and table numbers: "70000" rather than "7e+04" (large ones rounded to integers),
// "0.0003" and "1.5e-05" as %g has them.
std::string number(double v) {
  char buf[32];
  if (std::abs(v) >= 1e4 && std::abs(v) < 1e15) std::snprintf(buf, sizeof buf, "%.0f", v);
  else std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

// Tick positions over [lo, hi]: steps of 1, 2 or 5 times a power of ten, about five of them.
std::vector<double> ticks(double lo, double hi) {
  const double span = hi - lo;
  const double raw = span / 5, power = std::pow(10.0, std::floor(std::log10(raw)));
  const double step = raw / power < 1.5 ? power : raw / power < 3.5 ? 2 * power : raw / power < 7.5 ? 5 * power : 10 * power;
  std::vector<double> out;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push_back(std::abs(t) < step * 1e-9 ? 0 : t);
  return out;
}

// A qualitative palette that stays apart for color-blind readers (Okabe and Ito's).
const char* color(size_t i) {
  static const char* kColors[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442"};
  return kColors[i % std::size(kColors)];
}

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (step, value), by step
};

std::string chart(const std::string& title, const std::string& y_label, const std::vector<Series>& series) {
  // The legend has a column of its own right of the plot, so it never hides a curve.
  constexpr double kLegend = 170, kW = 640 + kLegend, kH = 380, kLeft = 72, kRight = 16 + kLegend, kTop = 40,
                   kBottom = 52;
  constexpr double kPlotW = kW - kLeft - kRight, kPlotH = kH - kTop - kBottom;
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kW << "\" height=\"" << kH << "\" viewBox=\"0 0 " << kW
      << " " << kH << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg << "<text x=\"" << kW / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">" << escape(title) << "</text>\n";
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const Series& s : series)
    for (auto [x, y] : s.points) {
      if (!std::isfinite(y)) continue;
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  if (!std::isfinite(x0)) {
    svg << "<text x=\"" << kW / 2 << "\" y=\"" << kH / 2 << "\" text-anchor=\"middle\" fill=\"#666\">no data</text>\n</svg>\n";
    return svg.str();
  }
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) y0 -= std::max(std::abs(y0) * 0.05, 1e-6), y1 += std::max(std::abs(y1) * 0.05, 1e-6);
  const double pad = (y1 - y0) * 0.05;
  y0 -= pad, y1 += pad;
  auto px = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * kPlotW; };
  auto py = [&](double y) { return kTop + (1 - (y - y0) / (y1 - y0)) * kPlotH; };
  for (double t : ticks(y0, y1)) {
    svg << "<line x1=\"" << kLeft << "\" x2=\"" << kLeft + kPlotW << "\" y1=\"" << py(t) << "\" y2=\"" << py(t)
        << "\" stroke=\"#e4e4e4\"/>\n<text x=\"" << kLeft - 6 << "\" y=\"" << py(t) + 4
        << "\" text-anchor=\"end\" fill=\"#333\">" << number(t) << "</text>\n";
  }
  for (double t : ticks(x0, x1)) {
    svg << "<line x1=\"" << px(t) << "\" x2=\"" << px(t) << "\" y1=\"" << kTop << "\" y2=\"" << kTop + kPlotH
        << "\" stroke=\"#f0f0f0\"/>\n<text x=\"" << px(t) << "\" y=\"" << kTop + kPlotH + 16
        << "\" text-anchor=\"middle\" fill=\"#333\">" << number(t) << "</text>\n";
  }
  svg << "<rect x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << kPlotW << "\" height=\"" << kPlotH
      << "\" fill=\"none\" stroke=\"#888\"/>\n";
  svg << "<text x=\"" << kLeft + kPlotW / 2 << "\" y=\"" << kH - 12 << "\" text-anchor=\"middle\">step</text>\n";
  svg << "<text transform=\"translate(16 " << kTop + kPlotH / 2 << ") rotate(-90)\" text-anchor=\"middle\">"
      << escape(y_label) << "</text>\n";
  for (size_t i = 0; i < series.size(); ++i) {
    std::string points;
    for (auto [x, y] : series[i].points)
      if (std::isfinite(y)) points += number(px(x)) + "," + number(py(y)) + " ";
    svg << "<polyline fill=\"none\" stroke=\"" << color(i) << "\" stroke-width=\"1.8\" points=\"" << points << "\"/>\n";
    if (series[i].points.size() <= 40)
      for (auto [x, y] : series[i].points)
        if (std::isfinite(y))
          svg << "<circle cx=\"" << px(x) << "\" cy=\"" << py(y) << "\" r=\"2.6\" fill=\"" << color(i) << "\"/>\n";
    const double lx = kLeft + kPlotW + 16, ly = kTop + 10 + 18 * static_cast<double>(i);
    svg << "<line x1=\"" << lx << "\" x2=\"" << lx + 18 << "\" y1=\"" << ly - 4 << "\" y2=\"" << ly - 4 << "\" stroke=\""
        << color(i) << "\" stroke-width=\"3\"/>\n<text x=\"" << lx + 24 << "\" y=\"" << ly << "\">"
        << escape(series[i].name) << "</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

std::vector<Series> curve(const std::vector<Run>& runs, const std::string& key, bool from_evals) {
  std::vector<Series> out;
  for (const Run& run : runs) {
    Series s{run.name, {}};
    for (const json& line : from_evals ? run.evals : run.steps) {
      const json& holder = from_evals ? line["eval"] : line;
      if (holder.contains(key) && holder[key].is_number())
        s.points.push_back({line["step"].get<double>(), holder[key].get<double>()});
    }
    std::sort(s.points.begin(), s.points.end());
    out.push_back(std::move(s));
  }
  return out;
}

bool any_has(const std::vector<Run>& runs, const std::string& key, bool evals) {
  for (const Run& run : runs)
    for (const json& line : evals ? run.evals : run.steps)
      if ((evals ? line["eval"] : line).contains(key)) return true;
  return false;
}

// A classifier's figures by class from its summary's confusion matrix: support, precision,
// recall and F1 of each class that occurs among the targets or the predictions; "" without one.
std::string class_table(const Run& run) {
  const json& s = run.summary;
  if (!s.is_object() || !s.contains("confusion_matrix") || !s["confusion_matrix"].is_object()) return "";
  const json& m = s["confusion_matrix"];
  if (!m.contains("classes") || !m.contains("counts") || !m["classes"].is_array() || !m["counts"].is_array()) return "";
  const size_t n = m["classes"].size();
  if (m["counts"].size() != n) return "";
  std::vector<std::vector<double>> counts(n, std::vector<double>(n, 0.0));
  for (size_t t = 0; t < n; ++t) {
    const json& row = m["counts"][t];
    if (!row.is_array() || row.size() != n) return "";
    for (size_t p = 0; p < n; ++p) counts[t][p] = row[p].is_number() ? row[p].get<double>() : 0.0;
  }
  std::ostringstream out;
  out << "<h2>By class: " << escape(run.name) << " (" << escape(m.value("split", std::string("eval")))
      << ")</h2>\n<table><tr><th>class</th><th>support</th><th>precision</th><th>recall</th><th>F1</th></tr>\n";
  for (size_t c = 0; c < n; ++c) {
    double predicted = 0, actual = 0;
    for (size_t k = 0; k < n; ++k) {
      predicted += counts[k][c];
      actual += counts[c][k];
    }
    if (predicted + actual == 0) continue;
    const double hits = counts[c][c];
    auto ratio = [](double a, double b) { return b > 0 ? number(a / b) : std::string("&ndash;"); };
    const std::string name = m["classes"][c].is_string() ? m["classes"][c].get<std::string>() : std::to_string(c);
    out << "<tr><td>" << escape(name) << "</td><td>" << static_cast<int64_t>(actual) << "</td><td>"
        << ratio(hits, predicted) << "</td><td>" << ratio(hits, actual) << "</td><td>"
        << ratio(2 * hits, predicted + actual) << "</td></tr>\n";
  }
  out << "</table>\n";
  return out.str();
}

}  // namespace

ReportFiles write_report(const std::vector<fs::path>& run_dirs, const fs::path& html) {
  GENESIS_CHECK(!run_dirs.empty(), UsageError, "report: give at least one run directory");
  std::vector<Run> runs;
  for (const fs::path& dir : run_dirs) runs.push_back(load_run(dir));

  // The evaluation metric: a classifier's accuracy, a language model's bits per byte, a
  // regression's r2, else the loss.
  std::string metric = "loss";
  for (const char* key : {"accuracy", "bits_per_byte", "r2"})
    if (any_has(runs, key, true)) {
      metric = key;
      break;
    }
  const std::string rate = any_has(runs, "tokens_per_s", false) ? "tokens_per_s" : "samples_per_s";
  struct Picture {
    std::string name, title, label;
    std::vector<Series> series;
  };
  const std::vector<Picture> pictures = {
      {"loss", "Training loss", "loss", curve(runs, "loss", false)},
      {"eval", "Evaluation: " + metric, metric, curve(runs, metric, true)},
      {"lr", "Learning rate", "lr", curve(runs, "lr", false)},
      {"throughput", "Throughput", rate == "tokens_per_s" ? "tokens/s" : "samples/s", curve(runs, rate, false)},
  };

  ReportFiles files{html, {}};
  const fs::path dir = html.has_parent_path() ? html.parent_path() : fs::path(".");
  fs::create_directories(dir);
  std::ostringstream page;
  page << "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>genesis report</title>\n<style>"
          "body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse;margin:12px 0}"
          "td,th{border:1px solid #ccc;padding:4px 10px;text-align:right}th{background:#f4f4f4}"
          "td:first-child,th:first-child{text-align:left}.charts{display:flex;flex-wrap:wrap;gap:12px}</style>"
          "</head><body>\n<h1>genesis report</h1>\n<p>"
       << runs.size() << " run(s): ";
  for (size_t i = 0; i < runs.size(); ++i) page << (i ? ", " : "") << escape(runs[i].name);
  page << "</p>\n<div class=\"charts\">\n";
  for (const Picture& p : pictures) {
    const std::string svg = chart(p.title, p.label, p.series);
    const fs::path file = dir / (html.stem().string() + "_" + p.name + ".svg");
    io::write_file_atomic(file, svg);
    files.svgs.push_back(file);
    page << svg;
  }
  page << "</div>\n<h2>Final figures</h2>\n<table><tr><th>run</th><th>step</th><th>train loss</th><th>"
       << escape(metric) << "</th><th>wall s</th><th>" << (rate == "tokens_per_s" ? "tokens/s" : "samples/s")
       << "</th><th>peak memory GiB</th></tr>\n";
  for (const Run& run : runs) {
    const json& s = run.summary;
    auto cell = [&](const json& v) { return v.is_number() ? number(v.get<double>()) : std::string("&ndash;"); };
    const json none;
    const json& eval = s.is_object() && s.contains("eval") ? s["eval"] : none;
    page << "<tr><td>" << escape(run.name) << "</td><td>" << cell(s.is_object() ? s.value("final_step", none) : none)
         << "</td><td>" << cell(s.is_object() ? s.value("train_loss", none) : none) << "</td><td>"
         << cell(eval.is_object() ? eval.value(metric, none) : none) << "</td><td>"
         << cell(s.is_object() ? s.value("wall_s", none) : none) << "</td><td>"
         << cell(s.is_object() ? s.value(rate, none) : none) << "</td><td>"
         << (s.is_object() && s.contains("peak_memory_bytes") && s["peak_memory_bytes"].is_number()
                 ? number(s["peak_memory_bytes"].get<double>() / 1073741824.0)
                 : std::string("&ndash;"))
         << "</td></tr>\n";
  }
  page << "</table>\n";
  for (const Run& run : runs) page << class_table(run);
  // The recipe keys that differ between the runs: each run against the first with a recipe.
  const Run* base = nullptr;
  for (const Run& run : runs)
    if (run.recipe && !base) base = &run;
  std::map<std::string, std::map<std::string, std::string>> differing;  // key -> run -> value
  if (base) {
    for (const Run& run : runs) {
      if (!run.recipe || &run == base) continue;
      for (const RecipeChange& c : recipe_changes(*base->recipe, *run.recipe)) {
        if (c.key == "run.name" || c.key == "run.out_dir") continue;
        differing[c.key][base->name] = c.before;
        differing[c.key][run.name] = c.after;
      }
    }
  }
  if (!differing.empty()) {
    page << "<h2>Recipe keys that differ</h2>\n<table><tr><th>key</th>";
    for (const Run& run : runs) page << "<th>" << escape(run.name) << "</th>";
    page << "</tr>\n";
    for (const auto& [key, values] : differing) {
      page << "<tr><td>" << escape(key) << "</td>";
      for (const Run& run : runs) {
        auto it = values.find(run.name);
        page << "<td>" << (it != values.end() ? escape(it->second) : run.recipe ? escape(values.at(base->name)) : "&ndash;")
             << "</td>";
      }
      page << "</tr>\n";
    }
    page << "</table>\n";
  }
  page << "</body></html>\n";
  io::write_file_atomic(html, page.str());
  return files;
}

}  // namespace genesis::train
