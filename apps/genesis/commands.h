#pragma once
// Subcommand registration: each apps/genesis/<command>.cpp adds its CLI11 subcommand and
// the function that runs it; main() parses, then runs the one selected.
#include <CLI/CLI.hpp>

#include <functional>

namespace genesis::cli {

using CommandFn = std::function<int()>;

// Associates `sub` with the function that runs it.
void register_command(CLI::App* sub, CommandFn run);
// Runs the parsed subcommand; returns its exit code.
int run_selected(CLI::App& app);

// The values of every --device flag: cpu, cuda, cuda:N or auto; anything else is a usage error
// that names the flag ("--device: 'gpu' is not a device; use cpu, cuda, cuda:N or auto").
CLI::Validator device_validator();

// When argv[1] is neither a flag nor a subcommand, the line to print (naming the closest
// subcommand); "" otherwise.
std::string unknown_command_message(CLI::App& app, const std::string& word);

void add_ops_command(CLI::App& app);
void add_train_commands(CLI::App& app);
void add_info_command(CLI::App& app);
void add_data_commands(CLI::App& app);
void add_data_preview_command(CLI::App* data_cmd);  // genesis data preview
void add_bench_command(CLI::App& app);
void add_convert_command(CLI::App& app);
void add_inspect_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_chat_command(CLI::App& app);
void add_report_command(CLI::App& app);
void add_predict_command(CLI::App& app);
void add_completion_command(CLI::App& app);

}  // namespace genesis::cli
