// The command line as the commands see it: a small facade over CLI11, which only args.cpp
// includes. CLI11 2.1 is header-only and its inline code cost every command file ~12 s of
// compiling; behind this header a change to a command recompiles that command alone. The handles
// mirror CLI11's names (add_option, required, ...) and behave exactly as CLI11 does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace kernex::cli {

// A check of one value: "" when it passes, else what is wrong (CLI11 prefixes the option's name).
using Check = std::function<std::string(const std::string& value)>;

// One option or positional argument of a command. Setters return the handle, to chain them.
class Option {
 public:
  explicit Option(CLI::Option* option) : option_(option) {}
  Option required() const;
  Option type_name(const std::string& name) const;  // NAME in the help: --data-dir DIR
  Option check(Check check) const;
  // false: one value per occurrence, so `--skills a MESSAGE` leaves MESSAGE to the positional.
  Option allow_extra_args(bool allow) const;
  Option excludes(const std::string& other) const;  // "--no-overlay" excludes "--overlay"
  bool named(const std::string& name) const;        // "--config" names the option --config
  bool takes_value() const;                         // `--config FILE` does, `--json` does not

 private:
  CLI::Option* option_;
};

// One command or subcommand; a handle (copies name the same command). Options bind to the
// caller's variables, which must outlive the parse.
class Command {
 public:
  explicit Command(CLI::App* app) : app_(app) {}
  Command add_subcommand(const std::string& name, const std::string& description) const;
  Option add_option(const std::string& name, std::string& value, const std::string& help) const;
  Option add_option(const std::string& name, std::optional<std::string>& value,
                    const std::string& help) const;
  Option add_option(const std::string& name, std::vector<std::string>& values,
                    const std::string& help) const;
  Option add_option(const std::string& name, std::size_t& value, const std::string& help) const;
  Option add_option(const std::string& name, std::optional<std::uint32_t>& value,
                    const std::string& help) const;
  Option add_option(const std::string& name, std::optional<std::uint64_t>& value,
                    const std::string& help) const;
  Option add_option(const std::string& name, std::optional<double>& value,
                    const std::string& help) const;
  Option add_option(const std::string& name, std::vector<std::uint16_t>& values,
                    const std::string& help) const;
  Option add_flag(const std::string& name, bool& value, const std::string& help) const;
  void require_subcommand() const;  // exactly one
  void fallthrough() const;         // options this command lacks go to the one above it
  void footer(const std::string& text) const;
  void callback(std::function<void()> on_parsed) const;        // when the command was given
  void final_callback(std::function<void()> on_parsed) const;  // ... after its subcommands ran
  // Whether the command was given on the command line (after parsing).
  explicit operator bool() const;

  // What suggest.cpp reads to name a mistyped command.
  std::string name() const;
  std::optional<Command> parent() const;
  std::vector<Command> subcommands() const;  // the named ones, in the order they were added
  bool named(const std::string& word) const;
  std::optional<Option> option(const std::string& name) const;  // this command's own
  bool has_positionals() const;
  bool requires_subcommand() const;

 private:
  CLI::App* app_;
};

// How a parse ended when it did not succeed.
struct ParseFailure {
  bool printed = false;  // --help or --version: printed, exit with exit_code (0)
  int exit_code = 0;
  std::string message;  // otherwise: what was wrong with the command line
};

// The program's command line: owns the root command and parses argv once.
class CommandLine {
 public:
  CommandLine(const std::string& description, const std::string& program);
  ~CommandLine();
  CommandLine(const CommandLine&) = delete;
  CommandLine& operator=(const CommandLine&) = delete;

  Command root() const;
  void version_flag(const std::string& flag, const std::string& text) const;
  std::optional<ParseFailure> parse(int argc, const char* const* argv) const;

 private:
  std::unique_ptr<CLI::App> app_;
};

}  // namespace kernex::cli
