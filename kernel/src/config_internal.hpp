// Pieces of config loading: the defaults and the environment override that Config::load and
// Config::defaults share.
#pragma once

#include <filesystem>
#include <optional>
#include <string_view>

#include "kernex/config.hpp"

namespace kernex::detail {

// $HOME, else the password database; nullopt when neither names a directory.
std::optional<std::filesystem::path> home_dir();

// `~` and `~/...` -> home; anything else unchanged. Fails (Config, naming `what`) when the
// path needs a home directory and none is known.
Result<std::filesystem::path> expand_home(std::string_view path, std::string_view what);

// Defaults: data_dir from $XDG_DATA_HOME/kernex (when absolute), else ~/.local/share/kernex;
// memory: the sqlite store (in <data_dir>/memory.db).
Config default_config();

// KERNEX_DATA_DIR overrides data_dir (relative values resolve against the working directory).
Result<void> apply_env_overrides(Config& config);

}  // namespace kernex::detail
