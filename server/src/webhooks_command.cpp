// The actions of `kernex serve webhooks` (list, retry) over the webhook outbox; cli/ parses.
#include <ostream>

#include "cluster_outbox.hpp"
#include "kernex/config.hpp"
#include "kernex/server/webhooks.hpp"
#include "webhook_outbox.hpp"

namespace kernex::server {
namespace {

constexpr std::size_t kListLimit = 1000;

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

// The outbox at `place`; nullptr when serve.db does not exist yet.
Result<std::unique_ptr<OutboxStore>> open_outbox(const WebhookOutboxPlace& place) {
  if (place.pg_dsn) {
    pg::Options options;
    options.dsn = *place.pg_dsn;
    options.what = "serve webhook outbox";
    options.application_name = "kernex-serve-webhooks";
    KERNEX_ASSIGN_OR_RETURN(auto opened, ClusterOutbox::open(options));
    return std::unique_ptr<OutboxStore>(std::move(opened));
  }
  std::error_code ec;
  if (!std::filesystem::exists(place.serve_db, ec)) return std::unique_ptr<OutboxStore>();
  KERNEX_ASSIGN_OR_RETURN(auto opened, WebhookOutbox::open(place.serve_db));
  return std::unique_ptr<OutboxStore>(std::move(opened));
}

}  // namespace

WebhookOutboxPlace WebhookOutboxPlace::of(const Config& config) {
  WebhookOutboxPlace place{config.data_dir / "serve.db", std::nullopt};
  if (!config.memory || config.memory->name != "postgres") return place;
  place.pg_dsn = std::string();
  if (auto it = config.memory->config.find("dsn");
      it != config.memory->config.end() && it->is_string())
    place.pg_dsn = it->get<std::string>();
  return place;
}

Result<void> webhooks_list(const WebhookOutboxPlace& place, WebhookListOptions options,
                           std::ostream& out) {
  KERNEX_ASSIGN_OR_RETURN(auto outbox, open_outbox(place));
  std::vector<OutboxRow> rows;
  if (outbox) {
    KERNEX_ASSIGN_OR_RETURN(rows, outbox->list(options.failed, kListLimit));
  }
  Json all = Json::array();
  for (const auto& r : rows) {
    if (options.json) {
      all.push_back(row_json(r));
      continue;
    }
    out << r.id << '\t' << r.status << '\t' << r.type << '\t' << r.event_id << '\t' << r.endpoint
        << '\t' << r.attempts << '\t' << iso_utc(r.created_ms) << '\t' << r.last_error << '\n';
  }
  if (options.json) out << all.dump(2) << '\n';
  return {};
}

Result<void> webhooks_retry(const WebhookOutboxPlace& place, const WebhookRetry& retry,
                            std::ostream& out, std::ostream& note) {
  if (retry.all_failed == !retry.ids.empty())
    return fail(ErrorCode::Usage, "serve webhooks retry: expected IDs or --all-failed");
  for (std::int64_t id : retry.ids) {
    if (id <= 0)
      return fail(ErrorCode::Usage,
                  "serve webhooks retry: '" + std::to_string(id) + "' is not a delivery id");
  }
  KERNEX_ASSIGN_OR_RETURN(auto outbox, open_outbox(place));
  std::size_t changed = 0;
  if (outbox) {
    KERNEX_ASSIGN_OR_RETURN(changed, outbox->retry_now(retry.ids));
  }
  out << "retrying " << changed << (changed == 1 ? " delivery" : " deliveries") << '\n';
  if (!retry.all_failed && changed < retry.ids.size())
    note << "kernex: " << retry.ids.size() - changed << " of the ids named no failed delivery\n";
  return {};
}

}  // namespace kernex::server
