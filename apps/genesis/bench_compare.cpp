#include "apps/genesis/bench_compare.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "libgenesis/core/error.h"
#include "libgenesis/io/json_text.h"

namespace genesis::cli::bench {
namespace {

using nlohmann::json;

json load(const std::string& path) {
  std::ifstream in(path);
  GENESIS_CHECK(in.good(), UsageError, "genesis bench compare: cannot read '", path, "'");
  try {
    json j = json::parse(in);
    std::string schema = j.at("schema").get<std::string>();
    GENESIS_CHECK(schema == "genesis.bench.ops/1" || schema == "genesis.bench.alloc/1" ||
                      schema == "genesis.bench.train/1",
                  UsageError, "genesis bench compare: '", path, "' has schema '", schema,
                  "'; expected genesis.bench.ops/1, genesis.bench.alloc/1 or genesis.bench.train/1");
    return j;
  } catch (const json::exception& e) {
    GENESIS_THROW(UsageError, "genesis bench compare: '", path, "' is not a bench result (", io::json_error_text(e), ")");
  }
}

std::string label(const json& j) {
  return j.value("tool", std::string("?")) + " on " + j.value("device_name", std::string("?"));
}

// Two decimals, or two significant digits for ratios far below one.
std::string ratio_text(double ratio) {
  char buf[32];
  std::snprintf(buf, sizeof buf, ratio >= 0.1 ? "%.2fx" : "%.2gx", ratio);
  return buf;
}

const char* verdict(double ratio) {
  return ratio >= 1.05 ? "A faster" : ratio <= 1 / 1.05 ? "A slower" : "par";
}

struct Summary {
  double log_sum = 0;
  int compared = 0, below = 0, incomparable = 0;
  void add(double ratio) {
    log_sum += std::log(ratio);
    ++compared;
    below += ratio < 1.0;
  }
  void print() const {
    if (compared == 0) {
      std::printf("no comparable cases (%d without a timing on both sides)\n", incomparable);
      return;
    }
    std::printf("%d cases compared: geomean B/A %s, %d below 1.0x (A slower), %d not comparable\n", compared,
                ratio_text(std::exp(log_sum / compared)).c_str(), below, incomparable);
  }
};

int compare_ops(const json& a, const json& b) {
  std::map<std::string, const json*> b_cases;
  for (const json& c : b.at("cases"))
    b_cases[c.at("name").get<std::string>() + "|" + c.at("dtype").get<std::string>()] = &c;
  std::printf("%-38s %-22s %-5s %10s %10s %8s  %s\n", "case", "shape", "dtype", "A ms", "B ms", "B/A", "verdict");
  Summary summary;
  for (const json& ca : a.at("cases")) {
    std::string key = ca.at("name").get<std::string>() + "|" + ca.at("dtype").get<std::string>();
    std::string shapes;
    for (const json& s : ca.at("shapes")) {
      if (!shapes.empty()) shapes += ", ";
      for (size_t d = 0; d < s.size(); ++d) shapes.append(d ? "x" : "").append(std::to_string(s[d].get<long long>()));
    }
    auto it = b_cases.find(key);
    const json* cb = it == b_cases.end() ? nullptr : it->second;
    auto ms = [](const json* c) {
      return c && c->at("median_ms").is_number() ? c->at("median_ms").get<double>() : NAN;
    };
    double ma = ms(&ca), mb = ms(cb);
    char a_txt[32] = "-", b_txt[32] = "-", r_txt[32] = "-";
    if (!std::isnan(ma)) std::snprintf(a_txt, sizeof a_txt, "%.4f", ma);
    if (!std::isnan(mb)) std::snprintf(b_txt, sizeof b_txt, "%.4f", mb);
    std::string why;
    if (!std::isnan(ma) && !std::isnan(mb)) {
      double ratio = mb / ma;
      std::snprintf(r_txt, sizeof r_txt, "%s", ratio_text(ratio).c_str());
      why = verdict(ratio);
      summary.add(ratio);
    } else {
      ++summary.incomparable;
      if (std::isnan(ma)) why.append("A ").append(ca.at("status").get<std::string>());
      if (std::isnan(mb)) {
        if (!why.empty()) why.append(", ");
        if (cb)
          why.append("B ").append(cb->at("status").get<std::string>());
        else
          why.append("not in B");
      }
    }
    std::printf("%-38.38s %-22.22s %-5s %10s %10s %8s  %s\n", ca.at("name").get<std::string>().c_str(), shapes.c_str(),
                ca.at("dtype").get<std::string>().c_str(), a_txt, b_txt, r_txt, why.c_str());
  }
  summary.print();
  return 0;
}

int compare_alloc(const json& a, const json& b) {
  std::map<std::string, const json*> b_rows;
  for (const json& s : b.at("scenarios")) b_rows[s.at("name").get<std::string>()] = &s;
  std::printf("%-14s %12s %12s %8s  %s\n", "scenario", "A ns", "B ns", "B/A", "verdict");
  Summary summary;
  for (const json& sa : a.at("scenarios")) {
    auto it = b_rows.find(sa.at("name").get<std::string>());
    bool both = sa.contains("allocator_ns") && it != b_rows.end() && it->second->contains("allocator_ns");
    if (!both) {
      ++summary.incomparable;
      std::printf("%-14s %12s %12s %8s  %s\n", sa.at("name").get<std::string>().c_str(), "-", "-", "-",
                  "not comparable");
      continue;
    }
    double na = sa.at("allocator_ns").get<double>(), nb = it->second->at("allocator_ns").get<double>();
    summary.add(nb / na);
    std::printf("%-14s %12.0f %12.0f %8s  %s\n", sa.at("name").get<std::string>().c_str(), na, nb,
                ratio_text(nb / na).c_str(), verdict(nb / na));
  }
  summary.print();
  return 0;
}

}  // namespace

int compare_results(const std::string& path_a, const std::string& path_b) {
  json a = load(path_a), b = load(path_b);
  GENESIS_CHECK(a.at("schema") == b.at("schema"), UsageError, "genesis bench compare: '", path_a, "' holds ",
                a.at("schema").get<std::string>(), " but '", path_b, "' holds ", b.at("schema").get<std::string>());
  std::printf("A: %s (%s)\nB: %s (%s)\n", label(a).c_str(), path_a.c_str(), label(b).c_str(), path_b.c_str());
  try {
    // Train results hold cases as ops results do (one per recipe step).
    return a.at("schema") == "genesis.bench.alloc/1" ? compare_alloc(a, b) : compare_ops(a, b);
  } catch (const json::exception& e) {
    GENESIS_THROW(UsageError, "genesis bench compare: malformed result file (", io::json_error_text(e), ")");
  }
}

}  // namespace genesis::cli::bench
