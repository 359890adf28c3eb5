// `kernex serve webhooks list [--failed] [--json] | retry ID... | retry --all-failed`: arguments
// only; the actions are kernex::server's (on serve.db, or PostgreSQL in cluster mode).
#include <charconv>
#include <iostream>
#include <memory>

#include "exit_codes.hpp"
#include "kernex/server/webhooks.hpp"
#include "serve_admin.hpp"

namespace kernex::cli {
namespace {

struct WebhooksArgs {
  std::string action;
  server::WebhookListOptions list;
  std::vector<std::string> ids;  // retry ID...
  bool all_failed = false;       // retry --all-failed
};

Result<server::WebhookRetry> retry_of(const WebhooksArgs& args) {
  if (args.all_failed == !args.ids.empty())
    return fail(ErrorCode::Usage, "serve webhooks retry: expected IDs or --all-failed");
  server::WebhookRetry retry{{}, args.all_failed};
  for (const std::string& a : args.ids) {
    std::int64_t id = 0;
    auto [end, ec] = std::from_chars(a.data(), a.data() + a.size(), id);
    if (ec != std::errc() || end != a.data() + a.size() || id <= 0)
      return fail(ErrorCode::Usage, "serve webhooks retry: '" + a + "' is not a delivery id");
    retry.ids.push_back(id);
  }
  return retry;
}

Result<void> run_webhooks(const ConfigFile& file, const WebhooksArgs& args,
                          const LoadServeConfig& load) {
  std::optional<server::WebhookRetry> retry;
  if (args.action == "retry") {
    KERNEX_ASSIGN_OR_RETURN(retry, retry_of(args));  // a usage error before any file is read
  }
  KERNEX_ASSIGN_OR_RETURN(auto config, load(file));
  const auto place = server::WebhookOutboxPlace::of(config);
  if (retry) return server::webhooks_retry(place, *retry, std::cout, std::cerr);
  return server::webhooks_list(place, args.list, std::cout);
}

// On `webhooks` and on each action, so they may come before or after it.
void add_shared_options(Command app, std::string& config, std::optional<std::string>& data_dir) {
  add_config_option(app, config, "kernex.yaml whose data dir (or postgres store) to use");
  app.add_option("--data-dir", data_dir, "the data dir whose serve.db to use").type_name("DIR");
}

}  // namespace

ServeAdminCommand add_serve_webhooks(Command serve, std::string& config,
                                     std::optional<std::string>& data_dir, LoadServeConfig load) {
  auto args = std::make_shared<WebhooksArgs>();
  Command webhooks = serve.add_subcommand(
      "webhooks", "Webhook deliveries: list [--failed] [--json], retry ID... | --all-failed");
  webhooks.require_subcommand();
  add_shared_options(webhooks, config, data_dir);
  const auto action = [&](const char* name, const char* summary) {
    Command sub = webhooks.add_subcommand(name, summary);
    sub.callback([args, name] { args->action = name; });
    add_shared_options(sub, config, data_dir);
    return sub;
  };
  Command list = action("list", "List deliveries, newest first (at most 1000)");
  list.add_flag("--failed", args->list.failed, "only the deliveries that gave up");
  list.add_flag("--json", args->list.json, "print a JSON array");
  Command retry =
      action("retry", "Make failed deliveries due now, with a fresh max age: IDs or --all-failed");
  retry.add_option("ID", args->ids, "delivery ids (from list)");
  retry.add_flag("--all-failed", args->all_failed, "every failed delivery");
  return {webhooks, [args, load = std::move(load)](const ConfigFile& file) {
            auto done = run_webhooks(file, *args, load);
            return done ? static_cast<int>(kExitOk) : report(done.error());
          }};
}

}  // namespace kernex::cli
