// Secrets (API keys) must not leave the kernel. A key echoed by a provider can be cut into an
// excerpt, capped, escaped or JSON-encoded on its way out, and a cut leaves a prefix that the
// whole key no longer matches, so redaction works on pieces: any run of kSecretPieceMin or more
// bytes of a secret is replaced, wherever the text was cut. The sinks (log lines, errors printed
// by the CLI, trajectory and audit files, serve responses) pass what they write through
// redact_secrets() (JSON ones redact_secrets_in_json(), which keeps their structure), after every
// transformation.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kernex {

// The shortest piece of a secret that is redacted: shorter runs are too common in plain text.
inline constexpr std::size_t kSecretPieceMin = 8;

// `text` with every run of >= kSecretPieceMin bytes of `secret` replaced by [REDACTED]; a secret
// shorter than that is replaced where it appears whole. An empty secret changes nothing.
std::string redact(std::string text, std::string_view secret);

// Adds a secret to the process-wide set the sinks redact. Secrets shorter than kSecretPieceMin are
// not kept (redacting, say, a one-letter test key everywhere would garble output). Thread-safe.
void register_secret(std::string_view secret);

// `text` with every piece of every registered secret replaced. Thread-safe; cheap when none is.
std::string redact_secrets(std::string text);

// In protocol text a field name that shares 8 bytes with a key (a key ending in `approvals`) must
// not turn into [REDACTED]: the shortest run of a secret that redact_secrets_in_json replaces.
inline constexpr std::size_t kSecretRunMinInValues = 16;

// For protocol text (JSON bodies, SSE events, the metrics exposition): keeps its structure. Field
// names, ids (`id`, `*_id`), enumerations (`type`, `object`, `role`, `status`, `event`, `model`,
// `finish_reason`, `name`) and metrics label values lose only a whole secret, never a piece that
// happens to match (a key ending in `approvals` leaves the field `approvals`); text outside
// strings (SSE `event:` and `id:` lines, metric names) is never changed; other string values lose
// every run of kSecretRunMinInValues bytes of a secret, or a whole shorter secret. Thread-safe.
std::string redact_secrets_in_json(std::string text);
// The same with the shortest run redacted in other string values given (kSecretPieceMin for the
// kernel's own files, where a cut excerpt of a key must not survive).
std::string redact_secrets_in_json(std::string text, std::size_t min_run);

}  // namespace kernex
