// The one translation unit that includes CLI11 (see args.hpp): each call is CLI11's own.
#include "args.hpp"

#include <utility>

#include <CLI/CLI.hpp>

namespace kernex::cli {

namespace {

template <class T>
Option bind(CLI::App* app, const std::string& name, T& value, const std::string& help) {
  return Option(app->add_option(name, value, help));
}

}  // namespace

Option Option::required() const { return Option(option_->required()); }

Option Option::type_name(const std::string& name) const { return Option(option_->type_name(name)); }

Option Option::check(Check check) const {
  // No description and no name: the help shows the type name alone, as before the facade.
  CLI::Validator validator([check = std::move(check)](std::string& text) { return check(text); },
                           "", "");
  return Option(option_->check(std::move(validator)));
}

Option Option::allow_extra_args(bool allow) const {
  return Option(option_->allow_extra_args(allow));
}

Option Option::excludes(const std::string& other) const { return Option(option_->excludes(other)); }

bool Option::named(const std::string& name) const { return option_->check_name(name); }

bool Option::takes_value() const { return option_->get_items_expected_min() > 0; }

Command Command::add_subcommand(const std::string& name, const std::string& description) const {
  return Command(app_->add_subcommand(name, description));
}

Option Command::add_option(const std::string& name, std::string& value,
                           const std::string& help) const {
  return bind(app_, name, value, help);
}

Option Command::add_option(const std::string& name, std::optional<std::string>& value,
                           const std::string& help) const {
  return bind(app_, name, value, help);
}

Option Command::add_option(const std::string& name, std::vector<std::string>& values,
                           const std::string& help) const {
  return bind(app_, name, values, help);
}

Option Command::add_option(const std::string& name, std::size_t& value,
                           const std::string& help) const {
  return bind(app_, name, value, help);
}

Option Command::add_option(const std::string& name, std::optional<std::uint32_t>& value,
                           const std::string& help) const {
  return bind(app_, name, value, help);
}

Option Command::add_option(const std::string& name, std::optional<std::uint64_t>& value,
                           const std::string& help) const {
  return bind(app_, name, value, help);
}

Option Command::add_option(const std::string& name, std::optional<double>& value,
                           const std::string& help) const {
  return bind(app_, name, value, help);
}

Option Command::add_option(const std::string& name, std::vector<std::uint16_t>& values,
                           const std::string& help) const {
  return bind(app_, name, values, help);
}

Option Command::add_flag(const std::string& name, bool& value, const std::string& help) const {
  return Option(app_->add_flag(name, value, help));
}

void Command::require_subcommand() const { app_->require_subcommand(1); }

void Command::fallthrough() const { app_->fallthrough(); }

void Command::footer(const std::string& text) const { app_->footer(text); }

void Command::callback(std::function<void()> on_parsed) const {
  app_->callback(std::move(on_parsed));
}

void Command::final_callback(std::function<void()> on_parsed) const {
  app_->final_callback(std::move(on_parsed));
}

Command::operator bool() const { return static_cast<bool>(*app_); }

std::string Command::name() const { return app_->get_name(); }

std::optional<Command> Command::parent() const {
  if (app_->get_parent() == nullptr) return std::nullopt;
  return Command(app_->get_parent());
}

std::vector<Command> Command::subcommands() const {
  std::vector<Command> named;
  for (CLI::App* s : app_->get_subcommands([](CLI::App*) { return true; })) {
    if (!s->get_name().empty()) named.emplace_back(s);  // option groups have no name
  }
  return named;
}

bool Command::named(const std::string& word) const { return app_->check_name(word); }

std::optional<Option> Command::option(const std::string& name) const {
  for (CLI::Option* opt : app_->get_options()) {
    if (opt->check_name(name)) return Option(opt);
  }
  return std::nullopt;
}

bool Command::has_positionals() const {
  return !app_->get_options([](CLI::Option* o) { return o->get_positional(); }).empty();
}

bool Command::requires_subcommand() const { return app_->get_require_subcommand_min() > 0; }

CommandLine::CommandLine(const std::string& description, const std::string& program)
    : app_(std::make_unique<CLI::App>(description, program)) {}

CommandLine::~CommandLine() = default;

Command CommandLine::root() const { return Command(app_.get()); }

void CommandLine::version_flag(const std::string& flag, const std::string& text) const {
  app_->set_version_flag(flag, text);
}

std::optional<ParseFailure> CommandLine::parse(int argc, const char* const* argv) const {
  try {
    app_->parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version "fail" with exit code 0: CLI11 prints what they ask for.
    if (e.get_exit_code() == 0) return ParseFailure{true, app_->exit(e), ""};
    return ParseFailure{false, e.get_exit_code(), e.what()};
  }
  return std::nullopt;
}

}  // namespace kernex::cli
