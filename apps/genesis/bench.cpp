// genesis bench ops | ceilings | alloc | compare: operator timings checked against a CPU
// float64 reference, the device's ceilings, allocator costs, and ratio tables between two
// result files (genesis vs scripts/bench/torch_ops.py). Schemas: docs/benchmarks.md.
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <regex>

#include "apps/genesis/bench_alloc.h"
#include "apps/genesis/bench_ceilings.h"
#include "apps/genesis/bench_compare.h"
#include "apps/genesis/bench_ops.h"
#include "apps/genesis/bench_train.h"
#include "apps/genesis/commands.h"
#include "libgenesis/core/error.h"
#include "libgenesis/core/threads.h"
#include "libgenesis/recipe/recipe.h"
#include "libgenesis/train/run_log.h"
#if GENESIS_WITH_CUDA
#include "libgenesis/cuda/runtime.h"
#endif

namespace genesis::cli {
namespace {

using nlohmann::json;
using namespace bench;

Device parse_device(const std::string& name) {
  if (name != "auto") return Device::parse(name);
#if GENESIS_WITH_CUDA
  if (cuda::is_available()) return Device(DeviceType::cuda, 0);
#endif
  return kCPU;
}

// The device to time; on the CPU also the thread count, chosen as genesis train chooses it
// with run.threads = 0 (libgenesis/core/threads.h; OMP_NUM_THREADS wins), noted on stderr.
Device bench_device(const std::string& name, bool quiet) {
  Device device = parse_device(name);
  if (device.is_cpu() && quiet) {
    configure_threads(0);
  } else if (device.is_cpu()) {
    ThreadChoice threads = configure_threads(0);
    std::string note = thread_note(threads);
    std::cerr << "genesis bench: " << threads.threads << (threads.threads == 1 ? " CPU thread (" : " CPU threads (")
              << threads.reason << ")\n";
    if (!note.empty()) std::cerr << note << "\n";
  }
  return device;
}

json header(const char* schema, const DeviceTimer& timer) {
  return {{"schema", schema},
          {"tool", "genesis"},
          {"tool_version", GENESIS_VERSION_STRING},
          {"device", timer.device().str()},
          {"device_name", timer.device_name()},
          {"cpu_threads", timer.device().is_cpu() ? json(omp_get_max_threads()) : json()}};
}

void write_json(const std::string& path, const json& j) {
  if (path.empty()) return;
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  GENESIS_CHECK(out.good(), Error, "genesis bench: cannot write '", path, "'");
}

double default_tolerance(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return 1e-9;
    case DType::f32:
      return 1e-3;
    case DType::f16:
      return 1e-2;
    default:
      return 2e-2;
  }
}

std::string shape_column(const BenchCase& c) {
  if (c.shapes.size() <= 4) return shape_text(c.shapes);
  double elements = 0;
  for (const Shape& s : c.shapes) elements += static_cast<double>(numel_of(s));
  char buf[64];
  std::snprintf(buf, sizeof buf, "%zu tensors, %.1fM", c.shapes.size(), elements / 1e6);
  return buf;
}

struct OpsFlags {
  std::string device = "auto", dtype, suite = "recipes/bench/ops.toml", filter, json_path, ceilings_path, emit_path;
  int reps = 100;
  double budget_ms = 300;
  int64_t flush_mib = -1;
  std::string flush_mode = "read";
  bool quiet = false;
};

// Runs one (case, dtype): check first, time only what passed.
json run_case(const BenchCase& c, DType dtype, DeviceTimer& timer, const Ceilings& ceilings, const OpsFlags& flags) {
  Cost cost = case_cost(c, dtype);
  double tolerance = c.tolerance > 0 ? c.tolerance : default_tolerance(dtype);
  json row{{"name", c.name},
           {"op", c.op},
           {"shapes", c.shapes},
           {"dtype", std::string(dtype_name(dtype))},
           {"backward", c.backward},
           {"where", c.where},
           {"bytes", cost.bytes},
           {"flops", cost.flops},
           {"tolerance", tolerance},
           {"status", "ok"},
           {"message", nullptr},
           {"check_rel_err", nullptr},
           {"median_ms", nullptr},
           {"p10_ms", nullptr},
           {"p90_ms", nullptr},
           {"reps", nullptr},
           {"gbps", nullptr},
           {"tflops", nullptr},
           {"pct_of_ceiling", nullptr},
           {"host_us", nullptr},
           {"back_to_back_us", nullptr}};
  try {
    std::unique_ptr<Workload> work = make_workload(c, dtype, timer.device(), timer.cache_bytes());
    double err = work->check();
    row["check_rel_err"] = std::isnan(err) ? json("nan") : json(err);
    if (!(err <= tolerance)) {
      row["status"] = "FAIL";
      row["message"] = "relative error " + std::to_string(err) + " against the CPU float64 reference exceeds " +
                       std::to_string(tolerance);
      return row;
    }
    auto fn = [&](int rep) { work->run(rep); };
    int reps = timer.warm_up(fn, flags.reps, flags.budget_ms);
    Stats s = summarize(timer.time(fn, reps));
    row["median_ms"] = s.median_ms;
    row["p10_ms"] = s.p10_ms;
    row["p90_ms"] = s.p90_ms;
    row["reps"] = s.reps;
    bool arithmetic = cost.flops > 0;
    double rate = arithmetic ? cost.flops / (s.median_ms * 1e9) : cost.bytes / (s.median_ms * 1e6);
    row[arithmetic ? "tflops" : "gbps"] = rate;
    if (std::optional<double> ceiling = ceiling_for(ceilings, arithmetic, dtype))
      row["pct_of_ceiling"] = 100 * rate / *ceiling;
    if (timer.device().is_cuda() && s.median_ms < 0.1) {
      auto [host_us, wall_us] = timer.host_overhead_us(fn, 200);
      row["host_us"] = host_us;
      row["back_to_back_us"] = wall_us;
    }
  } catch (const NotImplementedError& e) {
    row["status"] = "unsupported";
    row["message"] = e.what();
  } catch (const DTypeError& e) {
    row["status"] = "unsupported";
    row["message"] = e.what();
  } catch (const Error& e) {
    row["status"] = "error";
    row["message"] = e.what();
  }
  timer.synchronize();
  return row;
}

void print_row(const json& r, const BenchCase& c) {
  auto num = [&](const char* key, const char* fmt) {
    char buf[32] = "-";
    if (r[key].is_number()) std::snprintf(buf, sizeof buf, fmt, r[key].get<double>());
    return std::string(buf);
  };
  std::string rate = r["tflops"].is_number() ? num("tflops", "%.3g TFLOP/s") : num("gbps", "%.4g GB/s");
  std::string status = r["status"].get<std::string>();
  if (status == "ok")
    status += " (err " + num("check_rel_err", "%.1e") + ")";
  else if (r["message"].is_string())
    status += ": " + r["message"].get<std::string>();
  std::printf("%-38.38s %-22.22s %-5s %9s %9s %9s %14s %6s %8s  %s\n", c.name.c_str(), shape_column(c).c_str(),
              r["dtype"].get<std::string>().c_str(), num("median_ms", "%.4f").c_str(), num("p10_ms", "%.4f").c_str(),
              num("p90_ms", "%.4f").c_str(), rate.c_str(), num("pct_of_ceiling", "%.1f").c_str(),
              num("host_us", "%.1f").c_str(), status.c_str());
  std::fflush(stdout);
}

// The selected cases, resolved, for scripts/bench/torch_ops.py: nothing is run.
int emit_cases(const OpsFlags& flags, const std::vector<std::pair<const BenchCase*, DType>>& selected) {
  json cases = json::array();
  for (size_t i = 0; i < selected.size(); ++i) {
    if (i > 0 && selected[i].first == selected[i - 1].first) continue;
    BenchCase c = *selected[i].first;
    c.dtypes.clear();
    for (size_t j = i; j < selected.size() && selected[j].first == selected[i].first; ++j)
      c.dtypes.push_back(selected[j].second);
    cases.push_back(describe_case(c));
  }
  json out{{"schema", "genesis.bench.cases/1"}, {"suite", flags.suite}, {"filter", flags.filter}, {"cases", cases}};
  write_json(flags.emit_path, out);
  if (!flags.quiet) std::cerr << "genesis bench: " << cases.size() << " cases written to " << flags.emit_path << "\n";
  return 0;
}

int run_ops(const OpsFlags& flags) {
  std::vector<BenchCase> cases = flags.suite == "all"        ? registry_suite(false)
                                 : flags.suite == "all-test" ? registry_suite(true)
                                                             : load_suite(flags.suite, bench_op_names());
  for (const BenchCase& c : cases) validate_case(c);
  std::optional<DType> only;
  if (!flags.dtype.empty()) {
    only = parse_dtype(flags.dtype);
    GENESIS_CHECK(only && is_floating(*only), UsageError, "--dtype: expected f32, bf16, f16 or f64 (got '", flags.dtype,
                  "')");
  }
  std::regex filter;
  try {
    filter = std::regex(flags.filter.empty() ? "." : flags.filter);
  } catch (const std::regex_error& e) {
    GENESIS_THROW(UsageError, "--filter: '", flags.filter, "' is not a valid regular expression (", e.what(), ")");
  }
  std::vector<std::pair<const BenchCase*, DType>> selected;
  for (const BenchCase& c : cases) {
    if (!std::regex_search(c.name, filter) && !std::regex_search(c.op, filter)) continue;
    for (DType d : c.dtypes)
      if (!only || d == *only) selected.emplace_back(&c, d);
  }
  GENESIS_CHECK(!selected.empty(), UsageError, "genesis bench ops: no case of ", flags.suite, " matches --filter '",
                flags.filter, "'", only ? " and --dtype " + flags.dtype : "");
  if (!flags.emit_path.empty()) return emit_cases(flags, selected);

  DeviceTimer timer(bench_device(flags.device, flags.quiet), flags.flush_mib,
                    flags.flush_mode == "write" ? FlushMode::write : FlushMode::read);
  Ceilings ceilings;
  if (!flags.ceilings_path.empty()) {
    ceilings = read_ceilings(flags.ceilings_path);
  } else {
    if (!flags.quiet)
      std::cerr << "genesis bench: measuring the ceilings of " << timer.device_name()
              << " (--ceilings FILE skips this)\n";
    ceilings = measure_ceilings(timer, timer.device().is_cuda() ? 8192 : 512);
  }
  std::printf("# %s (%s): copy %.4g GB/s, GEMM f32 %.3g / bf16 %.3g TFLOP/s; %s, cache flush %zu MiB (%s)\n",
              timer.device_name().c_str(), timer.device().str().c_str(), ceilings.copy_gbps, ceilings.gemm_f32_tflops,
              ceilings.gemm_bf16_tflops, timer.method().c_str(), timer.flush_bytes() >> 20, timer.flush_mode());
  std::printf("%-38s %-22s %-5s %9s %9s %9s %14s %6s %8s  %s\n", "case", "shape", "dtype", "median ms", "p10 ms",
              "p90 ms", "rate", "%ceil", "host us", "check");
  json results = json::array();
  int ok = 0, failed = 0, unsupported = 0, errors = 0;
  // Rows go to stdout as cases finish; the bar (or a line every 10 s) to stderr.
  train::RunLog log("", flags.quiet);
  int64_t done = 0;
  for (auto [c, dtype] : selected) {
    log.progress("bench ops", done++, static_cast<int64_t>(selected.size()));
    json row = run_case(*c, dtype, timer, ceilings, flags);
    log.clear_progress();
    print_row(row, *c);
    std::fflush(stdout);
    std::string status = row["status"];
    (status == "ok" ? ok : status == "FAIL" ? failed : status == "unsupported" ? unsupported : errors)++;
    results.push_back(std::move(row));
  }
  std::printf("# %zu cases: %d ok, %d FAIL, %d unsupported, %d error\n", selected.size(), ok, failed, unsupported,
              errors);
  json out = header("genesis.bench.ops/1", timer);
  out["suite"] = flags.suite;
  out["filter"] = flags.filter;
  out["dtype"] = only ? json(std::string(dtype_name(*only))) : json(nullptr);
  out["timing"] = {{"method", timer.method()},
                   {"flush_bytes", timer.flush_bytes()},
                   {"flush_mode", timer.flush_mode()},
                   {"max_reps", flags.reps},
                   {"budget_ms", flags.budget_ms},
                   {"statistic", "median"}};
  out["ceilings"] = ceilings_json(ceilings);
  out["cases"] = results;
  write_json(flags.json_path, out);
  return failed + errors > 0 ? 1 : 0;
}

}  // namespace

void add_bench_command(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks: ops (checked timings), ceilings, alloc, compare");
  bench->require_subcommand(1);

  auto ops = std::make_shared<OpsFlags>();
  CLI::App* ops_cmd =
      bench->add_subcommand("ops", "Time the suite's ops after checking each against the CPU in float64");
  ops_cmd->add_option("--device", ops->device, "cuda, cuda:N, cpu or auto (cuda when present)")->check(device_validator());
  ops_cmd->add_option("--dtype", ops->dtype, "Run only this dtype of each case (f32, bf16, f16, f64)");
  ops_cmd->add_option("--suite", ops->suite,
                      "Suite TOML (default recipes/bench/ops.toml), or 'all': every op case of the registry at its "
                      "benchmark size ('all-test': at the tests' small sizes)");
  ops_cmd->add_option("--emit-cases", ops->emit_path,
                      "Write the selected cases, resolved (inputs, PyTorch call, cost), as JSON for "
                      "scripts/bench/torch_ops.py, and run nothing");
  ops_cmd->add_option("--filter", ops->filter, "Regular expression on case names and op names");
  ops_cmd->add_option("--json", ops->json_path, "Write the results as JSON (schema in docs/benchmarks.md)");
  ops_cmd->add_option("--reps", ops->reps, "Most timed repetitions per case (fewer when a case is slow)")
      ->check(CLI::Range(1, 100000));
  ops_cmd->add_option("--budget-ms", ops->budget_ms, "Time budget per case that sets the repetitions")
      ->check(CLI::PositiveNumber);
  ops_cmd
      ->add_option("--flush-mib", ops->flush_mib,
                   "Cache flush buffer streamed before each repetition (0: none; default twice the L2 / L3)")
      ->check(CLI::Range(int64_t{0}, int64_t{65536}));
  ops_cmd
      ->add_option("--flush-mode", ops->flush_mode,
                   "read: the flush reads its buffer (the cache ends clean); write: it writes it (the cache ends "
                   "dirty, and the timed op pays for writing that back)")
      ->check(CLI::IsMember({"read", "write"}));
  ops_cmd->add_option("--ceilings", ops->ceilings_path, "Read the ceilings from this JSON instead of measuring");
  ops_cmd->add_flag("-q,--quiet", ops->quiet, "No progress or notes on stderr");
  register_command(ops_cmd, [ops] { return run_ops(*ops); });

  struct TrainFlags {
    std::string recipe, json_path, device, packed;
    std::vector<std::string> sets;
    TrainBenchOptions options;
  };
  auto tf = std::make_shared<TrainFlags>();
  CLI::App* train_cmd = bench->add_subcommand(
      "train", "Time a language-model recipe's training step on synthetic tokens (tokens/s, MFU, memory, phases)");
  train_cmd->add_option("recipe", tf->recipe, "Recipe file (TOML)")->required()->check(CLI::ExistingFile);
  train_cmd->add_option("--set", tf->sets, "Override a recipe key: section.key=value (repeatable)");
  train_cmd->add_option("--device", tf->device, "cpu, cuda, cuda:N or auto (overrides run.device)")->check(device_validator());
  train_cmd->add_option("--steps", tf->options.steps, "Timed steps (the median is reported)")
      ->check(CLI::Range(int64_t{1}, int64_t{100000}));
  train_cmd->add_option("--warmup", tf->options.warmup, "Untimed steps first")
      ->check(CLI::Range(int64_t{0}, int64_t{100000}));
  train_cmd->add_option("--json", tf->json_path, "Write the result as JSON (genesis.bench.train/1)");
  train_cmd->add_option("--packed", tf->packed,
                        "MIN:MAX: pack each row with documents of MIN to MAX tokens (uniform, seeded by run.seed), "
                        "as supervised fine-tuning packs them: attention and positions restart per document");
  train_cmd->add_option("--lora", tf->options.lora_rank,
                        "R: train LoRA adapters of rank R (alpha 2R) on every linear layer of the blocks, the base "
                        "frozen in amp.dtype")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  train_cmd->add_option("--base-quant", tf->options.base_quant,
                        "With --lora: nf4 stores the frozen base's linear layers in 4-bit NormalFloat (QLoRA)")
      ->check(CLI::IsMember({"none", "nf4"}));
  train_cmd->add_flag("-q,--quiet", tf->options.quiet, "No progress on stderr");
  register_command(train_cmd, [tf] {
    if (!tf->packed.empty()) tf->options.packed = parse_packed_documents(tf->packed);
    std::vector<std::string> sets = tf->sets;
    if (!tf->device.empty()) sets.push_back("run.device=" + tf->device);
    write_json(tf->json_path, run_train_bench(load_recipe(tf->recipe, sets), tf->options));
    return 0;
  });

  struct CeilingFlags {
    std::string device = "auto", json_path;
    int64_t gemm_size = 0;
    bool quiet = false;
  };
  auto cf = std::make_shared<CeilingFlags>();
  CLI::App* ceil_cmd = bench->add_subcommand("ceilings", "Measure copy bandwidth and GEMM rates of the device");
  ceil_cmd->add_option("--device", cf->device, "cuda, cuda:N, cpu or auto")->check(device_validator());
  ceil_cmd->add_option("--gemm-size", cf->gemm_size, "n of the n^3 GEMMs (default 8192 on CUDA, 512 on the CPU)")
      ->check(CLI::Range(int64_t{16}, int64_t{65536}));
  ceil_cmd->add_option("--json", cf->json_path, "Write the ceilings as JSON (for bench ops --ceilings)");
  ceil_cmd->add_flag("-q,--quiet", cf->quiet, "No notes on stderr");
  register_command(ceil_cmd, [cf] {
    DeviceTimer timer(bench_device(cf->device, cf->quiet));
    int64_t n = cf->gemm_size > 0 ? cf->gemm_size : timer.device().is_cuda() ? 8192 : 512;
    Ceilings c = measure_ceilings(timer, n);
    std::printf("%s (%s)\n", timer.device_name().c_str(), timer.device().str().c_str());
    std::printf("copy, bytes read + written: %.4g GB/s\n", c.copy_gbps);
    std::printf("copy kernel (f32 copy_):    %.4g GB/s\n", c.copy_kernel_gbps);
    std::printf("GEMM f32  %lld^3: %.3g TFLOP/s\n", static_cast<long long>(n), c.gemm_f32_tflops);
    std::printf("GEMM bf16 %lld^3: %.3g TFLOP/s\n", static_cast<long long>(n), c.gemm_bf16_tflops);
    json out = header("genesis.bench.ceilings/1", timer);
    out["ceilings"] = ceilings_json(c);
    write_json(cf->json_path, out);
    return 0;
  });

  struct AllocFlags {
    std::string device = "auto", json_path;
    int64_t pairs = 20000;
    bool quiet = false;
  };
  auto af = std::make_shared<AllocFlags>();
  CLI::App* alloc_cmd =
      bench->add_subcommand("alloc", "Caching allocator vs raw cudaMalloc/cudaFree (malloc/free on the CPU)");
  alloc_cmd->add_option("--device", af->device, "cuda, cuda:N, cpu or auto")->check(device_validator());
  alloc_cmd->add_option("--pairs", af->pairs, "Allocation + free pairs of the simple scenarios (default 20000)");
  alloc_cmd->add_option("--json", af->json_path, "Write the results as JSON");
  alloc_cmd->add_flag("-q,--quiet", af->quiet, "No notes on stderr");
  register_command(alloc_cmd, [af] {
    DeviceTimer timer(bench_device(af->device, af->quiet));
    json scenarios = run_alloc_bench(timer.device(), af->pairs);
    std::printf("%-14s %12s %12s %9s  %s\n", "scenario", "genesis ns", "raw ns", "raw/gen", "what");
    for (const json& s : scenarios) {
      if (s.contains("error")) {
        std::printf("%-14s error: %s\n", s["name"].get<std::string>().c_str(), s["error"].get<std::string>().c_str());
        continue;
      }
      std::printf("%-14s %12.0f %12.0f %8.1fx  %s\n", s["name"].get<std::string>().c_str(),
                  s["allocator_ns"].get<double>(), s["raw_ns"].get<double>(), s["raw_over_allocator"].get<double>(),
                  s["description"].get<std::string>().c_str());
    }
    json out = header("genesis.bench.alloc/1", timer);
    out["scenarios"] = scenarios;
    write_json(af->json_path, out);
    return 0;
  });

  auto files = std::make_shared<std::vector<std::string>>();
  CLI::App* cmp = bench->add_subcommand("compare", "Ratio table of two result files: B ms / A ms per case");
  cmp->add_option("files", *files, "A.json B.json (bench ops or bench alloc results)")->required()->expected(2);
  register_command(cmp, [files] { return compare_results((*files)[0], (*files)[1]); });
}

}  // namespace genesis::cli
