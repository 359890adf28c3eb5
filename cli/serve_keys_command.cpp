// `kernex serve keys add TENANT | list | revoke TENANT | revoke --id ID`: arguments only; the
// actions are kernex::server's.
#include <iostream>
#include <memory>

#include "exit_codes.hpp"
#include "kernex/server/keys.hpp"
#include "kernex/server/serve_config.hpp"
#include "serve_admin.hpp"

namespace kernex::cli {
namespace {

struct KeysArgs {
  std::optional<std::string> keys_file;
  std::string action;
  std::optional<std::string> tenant;  // add, revoke
  std::optional<std::string> id;      // revoke --id
};

Result<std::filesystem::path> keys_file(const ConfigFile& file, const KeysArgs& args,
                                        const LoadServeConfig& load) {
  if (args.keys_file) return absolute_path(*args.keys_file);
  KERNEX_ASSIGN_OR_RETURN(auto config, load(file));
  KERNEX_ASSIGN_OR_RETURN(auto settings, server::ServeConfig::from(config));
  return settings.keys_file;
}

Result<void> run_keys(const ConfigFile& file, const KeysArgs& args, const LoadServeConfig& load) {
  if (args.action == "revoke" && args.tenant.has_value() == args.id.has_value())
    return fail(ErrorCode::Usage,
                "serve keys revoke: expected TENANT or --id KEY_ID (one of the two)");
  KERNEX_ASSIGN_OR_RETURN(auto path, keys_file(file, args, load));
  if (args.action == "add") return server::keys_add(path, *args.tenant, std::cout, std::cerr);
  if (args.action == "list") return server::keys_list(path, std::cout);
  if (args.id) return server::keys_revoke_id(path, *args.id, std::cout);
  return server::keys_revoke(path, *args.tenant, std::cout);
}

// On `keys` and on each action, so they may come before or after it.
void add_shared_options(Command app, std::string& config, std::optional<std::string>& data_dir,
                        KeysArgs& args) {
  add_config_option(app, config, "kernex.yaml whose serve.keys_file to use");
  app.add_option("--keys-file", args.keys_file, "the keys file (default: serve.keys_file)")
      .type_name("FILE");
  app.add_option("--data-dir", data_dir, "the data dir whose serve-keys.json to use")
      .type_name("DIR");
}

}  // namespace

ServeAdminCommand add_serve_keys(Command serve, std::string& config,
                                 std::optional<std::string>& data_dir, LoadServeConfig load) {
  auto args = std::make_shared<KeysArgs>();
  Command keys = serve.add_subcommand(
      "keys", "Manage API keys: add TENANT (prints the key once), list, revoke TENANT");
  keys.require_subcommand();
  add_shared_options(keys, config, data_dir, *args);
  const auto action = [&](const char* name, const char* summary) {
    Command sub = keys.add_subcommand(name, summary);
    sub.callback([args, name] { args->action = name; });
    add_shared_options(sub, config, data_dir, *args);
    return sub;
  };
  action("add", "Add a key for TENANT and print it (shown only this once)")
      .add_option("TENANT", args->tenant, "the tenant the key acts for")
      .required();
  action("list", "List the keys: id, tenant, created, active or revoked (never the key)");
  Command revoke = action("revoke", "Revoke every key of TENANT, or the one key --id ID");
  revoke.add_option("TENANT", args->tenant, "the tenant whose keys to revoke");
  revoke.add_option("--id", args->id, "revoke only the key with this id").type_name("KEY_ID");
  return {keys, [args, load = std::move(load)](const ConfigFile& file) {
            auto done = run_keys(file, *args, load);
            return done ? static_cast<int>(kExitOk) : report(done.error());
          }};
}

}  // namespace kernex::cli
