// The webhook outbox of cluster mode, in the PostgreSQL database every node shares
// (serve_webhook_outbox, cluster_ops_schema.cpp). Run-end events are written in the run end's
// transaction (cluster_run_end_hook). Every node's sender claims due rows with FOR UPDATE SKIP
// LOCKED and a lease on the database's clock, so one node sends each row while it lives; a node
// that dies mid-send leaves its claim to expire and another node sends it (at least once, same
// X-Kernex-Event-Id). A row is claimable only as the head of its stream (run) at its endpoint, so
// events of one run reach an endpoint in order whichever nodes send them. Attempts, backoff and
// the max age live in the row, so retries survive any node.
#pragma once

#include <memory>
#include <string>

#include "cluster_hooks.hpp"
#include "kernex/pg/pool.hpp"
#include "webhook_outbox.hpp"
#include "webhook_sender.hpp"

namespace kernex::server {

class ClusterOutbox final : public OutboxStore {
 public:
  // Connects (the tables are ClusterStore::open's, made here too for `kernex serve webhooks`).
  // `claim_for` bounds how long one claimed row may take to send (the endpoints' timeout).
  static Result<std::unique_ptr<ClusterOutbox>> open(
      const pg::Options& options,
      std::chrono::milliseconds claim_for = std::chrono::milliseconds(10'000));

  // The rows of `event`, on `c` inside the caller's transaction.
  static Result<void> enqueue(pg::Connection& c, const WebhookEvent& event,
                              const std::vector<std::string>& endpoints, const std::string& tenant);

#include "outbox_store_overrides.inc"

  const std::string& claimer() const { return claimer_; }

 private:
  ClusterOutbox(const pg::Options& options, std::chrono::milliseconds claim_for);
  pg::Pool pool_;
  std::string claimer_;  // this sender's name in claimed_by
  std::chrono::milliseconds claim_for_;
};

// run.completed / run.failed for the endpoints `sink` names, written by ClusterStore in the run
// end's transaction (ClusterHooks::run_end and after_run_end).
void add_webhook_hooks(ClusterHooks& hooks, Webhooks::Sink sink);

}  // namespace kernex::server
