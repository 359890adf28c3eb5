// `kernex serve webhooks list|retry`: the CLI's view of the webhook outbox.
#include <charconv>
#include <ostream>

#include "cluster_outbox.hpp"
#include "kernex/config.hpp"
#include "kernex/server/webhooks.hpp"
#include "webhook_outbox.hpp"

namespace kernex::server {
namespace {

constexpr const char* kUsage =
    "usage: kernex serve webhooks list [--failed] [--json] | retry ID... | retry --all-failed";
constexpr std::size_t kListLimit = 1000;

int usage(std::ostream& err, const std::string& problem) {
  err << "kernex: usage: " << problem << '\n' << kUsage << '\n';
  return 2;
}

Json row_json(const OutboxRow& r) {
  Json j{{"id", r.id},
         {"status", r.status},
         {"type", r.type},
         {"event_id", r.event_id},
         {"url", r.endpoint},
         {"attempts", r.attempts},
         {"created_at", iso_utc(r.created_ms)},
         {"last_error", r.last_error}};
  if (r.status == "pending") j["next_attempt_at"] = iso_utc(r.next_ms);
  if (r.status == "delivered") j["delivered_at"] = iso_utc(r.delivered_ms);
  return j;
}

int list(OutboxStore* outbox, const std::vector<std::string>& args, std::ostream& out,
         std::ostream& err) {
  bool failed = false, json = false;
  for (std::size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--failed") {
      failed = true;
    } else if (args[i] == "--json") {
      json = true;
    } else {
      return usage(err, "serve webhooks list: unknown option '" + args[i] + "'");
    }
  }
  std::vector<OutboxRow> rows;
  if (outbox) {
    auto listed = outbox->list(failed, kListLimit);
    if (!listed) {
      err << "kernex: " << listed.error().describe() << '\n';
      return 1;
    }
    rows = std::move(*listed);
  }
  Json all = Json::array();
  for (const auto& r : rows) {
    if (json) {
      all.push_back(row_json(r));
      continue;
    }
    out << r.id << '\t' << r.status << '\t' << r.type << '\t' << r.event_id << '\t' << r.endpoint
        << '\t' << r.attempts << '\t' << iso_utc(r.created_ms) << '\t' << r.last_error << '\n';
  }
  if (json) out << all.dump(2) << '\n';
  return 0;
}

int retry(OutboxStore* outbox, const std::vector<std::string>& args, std::ostream& out,
          std::ostream& err) {
  const bool all = args.size() == 2 && args[1] == "--all-failed";
  if (args.size() < 2) return usage(err, "serve webhooks retry: expected IDs or --all-failed");
  std::vector<std::int64_t> ids;
  for (std::size_t i = 1; i < args.size() && !all; ++i) {
    std::int64_t id = 0;
    const auto& a = args[i];
    auto [end, ec] = std::from_chars(a.data(), a.data() + a.size(), id);
    if (ec != std::errc() || end != a.data() + a.size() || id <= 0)
      return usage(err, "serve webhooks retry: '" + a + "' is not a delivery id");
    ids.push_back(id);
  }
  std::size_t changed = 0;
  if (outbox) {
    auto r = outbox->retry_now(ids);
    if (!r) {
      err << "kernex: " << r.error().describe() << '\n';
      return 1;
    }
    changed = *r;
  }
  out << "retrying " << changed << (changed == 1 ? " delivery" : " deliveries") << '\n';
  if (!all && changed < ids.size())
    err << "kernex: " << ids.size() - changed << " of the ids named no failed delivery\n";
  return 0;
}

int run_action(OutboxStore* outbox, const std::vector<std::string>& args, std::ostream& out,
               std::ostream& err) {
  return args[0] == "list" ? list(outbox, args, out, err) : retry(outbox, args, out, err);
}

bool bad_action(const std::vector<std::string>& args, std::ostream& err, int* rc) {
  if (args.empty()) {
    *rc = usage(err, "serve webhooks: expected an action");
  } else if (args[0] != "list" && args[0] != "retry") {
    *rc = usage(err, "serve webhooks: unknown action '" + args[0] + "'");
  } else {
    return false;
  }
  return true;
}

}  // namespace

int serve_webhooks_command(const Config& config, const std::vector<std::string>& args,
                           std::ostream& out, std::ostream& err) {
  if (!config.memory || config.memory->name != "postgres")
    return serve_webhooks_command(config.data_dir / "serve.db", args, out, err);
  if (int rc = 0; bad_action(args, err, &rc)) return rc;
  pg::Options options;
  if (auto it = config.memory->config.find("dsn");
      it != config.memory->config.end() && it->is_string())
    options.dsn = *it;
  options.what = "serve webhook outbox";
  options.application_name = "kernex-serve-webhooks";
  auto opened = ClusterOutbox::open(options);
  if (!opened) {
    err << "kernex: " << opened.error().describe() << '\n';
    return 1;
  }
  return run_action(opened->get(), args, out, err);
}

int serve_webhooks_command(const std::filesystem::path& serve_db,
                           const std::vector<std::string>& args, std::ostream& out,
                           std::ostream& err) {
  if (int rc = 0; bad_action(args, err, &rc)) return rc;
  std::unique_ptr<WebhookOutbox> outbox;
  std::error_code ec;
  if (std::filesystem::exists(serve_db, ec)) {  // no serve.db yet: nothing was ever sent
    auto opened = WebhookOutbox::open(serve_db);
    if (!opened) {
      err << "kernex: " << opened.error().describe() << '\n';
      return 1;
    }
    outbox = std::move(*opened);
  }
  return run_action(outbox.get(), args, out, err);
}

}  // namespace kernex::server
