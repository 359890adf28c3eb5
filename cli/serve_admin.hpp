// `kernex serve keys` and `kernex serve webhooks`: subcommands of `serve` that manage what a server
// reads (its keys file, its webhook outbox) without starting one. Parsing only; the actions are
// kernex::server functions.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "commands.hpp"

namespace kernex::cli {

// The configuration `kernex serve` would run with (--config, then serve's own options applied).
using LoadServeConfig = std::function<Result<Config>(const ConfigFile& config)>;

struct ServeAdminCommand {
  Command command;  // chosen when true after parsing
  CommandRun run;
};

// Options (--config, --data-dir, --keys-file) go before or after the action; `data_dir` is the one
// `kernex serve --data-dir` sets, so both spellings reach `load`.
ServeAdminCommand add_serve_keys(Command serve, std::string& config,
                                 std::optional<std::string>& data_dir, LoadServeConfig load);
ServeAdminCommand add_serve_webhooks(Command serve, std::string& config,
                                     std::optional<std::string>& data_dir, LoadServeConfig load);

}  // namespace kernex::cli
