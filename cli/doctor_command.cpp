#include <iostream>
#include <memory>

#include "commands.hpp"
#include "exit_codes.hpp"
#include "terminal_text.hpp"
#include "kernex/doctor.hpp"

namespace kernex::cli {

namespace {

int doctor_command(const ConfigFile& config_file, bool json) {
  const DoctorReport report = diagnose_config_file(
      config_file ? std::optional<std::filesystem::path>(*config_file) : std::nullopt);
  if (json) {
    Json out = to_json(report);
    out["sandbox"] = sandbox_doctor_json();
    std::cout << out.dump(-1, ' ', false, Json::error_handler_t::replace) << '\n';
  } else {
    // The report quotes the config file and its errors: controls made visible.
    std::cout << for_terminal(to_text(report) + sandbox_doctor_text());
  }
  // The report is the result: missing features are findings, not failures of the command.
  return kExitOk;
}

}  // namespace

CommandRun setup_doctor(Command command, std::string&) {
  auto json = std::make_shared<bool>(false);
  command.add_flag("--json", *json, "print the report as JSON");
  return [json](const ConfigFile& config) { return doctor_command(config, *json); };
}

}  // namespace kernex::cli
