// genesis: the command-line front end. Parses flags, calls libgenesis, prints results to
// stdout and messages to stderr. Exit codes: 0 ok, 1 runtime error, 2 usage/recipe error.
#include <CLI/CLI.hpp>

#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <new>
#include <string>

#include "apps/genesis/commands.h"
#include "libgenesis/core/error.h"
#include "libgenesis/core/interrupt.h"
#include "libgenesis/core/printable.h"
#include "libgenesis/core/threads.h"
#include "libgenesis/dist/failure.h"

// A bounded OpenMP spin before libgomp starts (libgenesis/core/threads.h).
GENESIS_PREINIT;

namespace {

// A path for a one-line message: quoted, cut in the middle past 200 characters.
std::string short_path(const std::filesystem::path& path) {
  std::string text = path.string();
  if (text.size() > 200) text = text.substr(0, 96) + "[... " + std::to_string(text.size() - 192) + " characters ...]" +
                                text.substr(text.size() - 96);
  return "'" + text + "'";
}

// What a file-system call that no genesis check caught says, in genesis's form: the paths, the
// system's reason, and what to look at (the library's own text repeats "filesystem error").
std::string filesystem_message(const std::filesystem::filesystem_error& e) {
  std::string where = e.path1().empty() ? std::string() : " " + short_path(e.path1());
  if (!e.path2().empty()) where += " and " + short_path(e.path2());
  return "a file operation on" + (where.empty() ? std::string(" a path") : where) + " failed: " + e.code().message() +
         " (check that the path exists, is writable by you and is not a symlink loop, and that the disk has room)";
}

// CLI11's parse errors read as the others do: one line after "genesis: error: ", the text from
// the command line escaped (printable) and cut in the middle past 300 characters, then where the
// usage is.
std::string parse_failure(const CLI::App* app, const CLI::Error& e) {
  std::string what = genesis::printable(e.what());
  if (what.size() > 300)
    what = what.substr(0, 146) + "[... " + std::to_string(what.size() - 292) + " characters ...]" +
           what.substr(what.size() - 146);
  std::string command = "genesis";
  for (const CLI::App* sub = app; sub && !sub->get_subcommands().empty();) {
    sub = sub->get_subcommands().front();
    command += " " + sub->get_name();
  }
  return "genesis: error: " + what + " (" + command + " --help gives the usage)\n";
}

}  // namespace

int main(int argc, char** argv) {
  genesis::reexec_for_blas_core(argv);  // before anything else: OpenBLAS's generic kernels on a newer CPU
  CLI::App app{"genesis: a C++/CUDA deep-learning training toolkit driven by TOML recipes"};
  app.require_subcommand(1);
  app.failure_message(parse_failure);
  app.set_version_flag("--version", std::string(GENESIS_VERSION_STRING));
  // A rank that loses a peer prints its line and ends within seconds (libgenesis/dist/failure.h);
  // what fails after that line (an aborted NCCL kernel's CUDA fault, say) is its consequence.
  genesis::dist::set_exit_on_failure(true);
  static const std::terminate_handler default_terminate = std::set_terminate([] {
    if (genesis::dist::failure_reported()) std::_Exit(1);
    default_terminate();
  });
  genesis::cli::add_train_commands(app);
  genesis::cli::add_ops_command(app);
  genesis::cli::add_info_command(app);
  genesis::cli::add_data_commands(app);
  genesis::cli::add_bench_command(app);
  genesis::cli::add_convert_command(app);
  genesis::cli::add_inspect_command(app);
  genesis::cli::add_report_command(app);
  genesis::cli::add_predict_command(app);
  genesis::cli::add_completion_command(app);
  genesis::cli::add_generate_command(app);
  genesis::cli::add_chat_command(app);
  if (argc > 1) {
    if (std::string message = genesis::cli::unknown_command_message(app, argv[1]); !message.empty()) {
      std::cerr << "genesis: error: " << genesis::printable(message) << "\n";
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    return genesis::cli::run_selected(app);
  } catch (const genesis::UsageError& e) {
    std::cerr << "genesis: error: " << genesis::printable(e.what()) << "\n";
    return 2;
  } catch (const genesis::Interrupted& e) {
    std::cerr << "genesis: " << genesis::printable(e.what()) << "\n";
    return 130;
  } catch (const genesis::DistError& e) {
    // A rank is gone: the process's normal exit (the CUDA runtime's teardown) could wait on NCCL
    // work that will never finish, so leave at once, as PyTorch's NCCL watchdog does.
    if (!genesis::dist::failure_reported()) std::cerr << "genesis: error: " << genesis::printable(e.what()) << std::endl;
    std::_Exit(1);
  } catch (const std::filesystem::filesystem_error& e) {
    if (genesis::dist::failure_reported()) std::_Exit(1);
    std::cerr << "genesis: error: " << genesis::printable(filesystem_message(e)) << "\n";
    return 1;
  } catch (const std::bad_alloc&) {
    if (genesis::dist::failure_reported()) std::_Exit(1);
    std::cerr << "genesis: error: out of host memory (an allocation failed): free memory on this machine, or give the "
                 "command less to hold at once (smaller or fewer input files, training.batch_size, data.prefetch)\n";
    return 1;
  } catch (const std::exception& e) {
    if (genesis::dist::failure_reported()) std::_Exit(1);  // a consequence of the failure already named
    std::cerr << "genesis: error: " << genesis::printable(e.what()) << "\n";
    return 1;
  }
}
