// Untrusted text (skill manifests, config errors, plugin errors, tool and model output) printed
// for a person goes through for_terminal(): a raw ESC or CSI would let a skill retitle the
// terminal, clear it or forge lines. --json output is JSON-escaped already and is left alone.
#pragma once

#include <string>
#include <string_view>

namespace kernex::cli {

// `text` with C0 controls except \n and \t shown as \xNN, and DEL and the C1 controls (U+0080 to
// U+009F, UTF-8 encoded) as \u00NN. Those forms are also valid inside JSON strings, so a JSON
// document printed for a person stays JSON. Other bytes, UTF-8 or not, pass unchanged.
std::string for_terminal(std::string_view text);

}  // namespace kernex::cli
