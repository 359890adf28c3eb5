// Secrets (API keys) must not leave the kernel. A key echoed by a provider can be cut into an
// excerpt, capped, escaped or JSON-encoded on its way out, and a cut leaves a prefix that the
// whole key no longer matches, so redaction works on pieces: any run of kSecretPieceMin or more
// bytes of a secret is replaced, wherever the text was cut. The sinks (log lines, errors printed
// by the CLI, trajectory and audit files, serve responses) pass what they write through
// redact_secrets(), after every transformation.
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

// For protocol text (JSON bodies, SSE events): redacts only inside JSON string values, never in
// object keys or outside strings, so field names, event names and ids keep their shape; and only
// runs of kSecretRunMinInValues bytes of a secret or a whole shorter secret. Thread-safe.
std::string redact_secrets_in_json(std::string text);

}  // namespace kernex
