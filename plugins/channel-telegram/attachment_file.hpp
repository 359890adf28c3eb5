// Writes a file a person sent into a session's attachments folder. That folder is in the
// session's workspace, where tools write: a tool may have planted a symlink there (or made the
// folder one) to have the channel, which runs unsandboxed, overwrite a file elsewhere. So the
// folder is opened without following links and the file is created new (O_EXCL, O_NOFOLLOW)
// under a temporary name, then renamed over whatever entry held its name.
#pragma once

#include <filesystem>
#include <string>

#include "kernex/error.hpp"

namespace kernex::telegram {

Result<void> write_attachment(const std::filesystem::path& dir, const std::string& name,
                              const std::string& body);

}  // namespace kernex::telegram
