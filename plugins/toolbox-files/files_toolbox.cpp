// The built-in file and shell tools (bash, read, write, edit, glob, grep). Unlike kernex, none of
// them opens a file in-process: each is a small program (cat, sed, grep, bash with a fixed script
// and the model's values as argv) run inside the sandbox, so every file access follows the same
// workspace policy as a skill's toolbox. A `read` (whole, or lines by offset/limit) is opened by a
// long-lived process in that same sandbox and read by the kernel from the fd it hands over
// (sandboxed_opener.hpp, line_range.hpp); cat and sed remain for what it does not take.
// Config: see kernex::sandbox::ToolboxRunOptions, plus `tools` (names to offer; default all).
#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <stop_token>

#include "kernex/kernel_files.hpp"
#include "kernex/permissions.hpp"
#include "kernex/plugin.hpp"
#include "kernex/sandbox/toolbox.hpp"
#include "line_range.hpp"
#include "sandboxed_opener.hpp"

namespace {

namespace fs = std::filesystem;
namespace sb = kernex::sandbox;
using kernex::ErrorCode;
using kernex::Json;
using kernex::Result;
using kernex::ToolCall;
using kernex::ToolResult;

// Enough for `edit` to read a whole source file; what the model sees is cut to max_output.
constexpr std::size_t kCaptureCap = 16u << 20;
constexpr std::size_t kMaxPattern = 1024;

ToolResult ok(const ToolCall& c, std::string text) {
  return {c.id, c.name, std::move(text), false};
}
ToolResult bad(const ToolCall& c, std::string text) {
  return {c.id, c.name, std::move(text), true};
}

std::string string_arg(const Json& args, const char* name) {
  auto it = args.is_object() ? args.find(name) : args.end();
  return it != args.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::optional<std::uint64_t> uint_arg(const Json& args, const char* name) {
  auto it = args.is_object() ? args.find(name) : args.end();
  if (it == args.end() || !it->is_number_integer() || it->get<std::int64_t>() < 0)
    return std::nullopt;
  return static_cast<std::uint64_t>(it->get<std::int64_t>());
}

ToolResult required(const ToolCall& c, const char* name) {
  return bad(c, std::string("Error: '") + name + "' parameter is required");
}

Json schema(Json properties, std::vector<std::string> required_names) {
  return Json{{"type", "object"},
              {"properties", std::move(properties)},
              {"required", std::move(required_names)}};
}

Json str(const char* what) { return Json{{"type", "string"}, {"description", what}}; }
Json uint(const char* what) {
  return Json{{"type", "integer"}, {"minimum", 0}, {"description", what}};
}

class FilesToolbox final : public kernex::ToolExecutor, public kernex::SharedToolList {
 public:
  FilesToolbox(sb::ToolboxRunOptions options, std::set<std::string> enabled)
      : options_(std::move(options)),
        enabled_(std::move(enabled)),
        specs_(std::make_shared<const std::vector<kernex::ToolSpec>>(enabled_specs())) {}

  static std::vector<kernex::ToolSpec> all_specs() {
    return {
        {"bash",
         "Execute a bash command in the workspace (sandboxed) and return its output.",
         schema({{"command", str("The command line")},
                 {"timeout_secs", uint("Seconds before it is killed")}},
                {"command"}),
         {"shell", "run", "command"}},
        {"read",
         "Read the contents of a file.",
         schema({{"file_path", str("Absolute, or relative to the workspace")},
                 {"offset", uint("First line to return (1-based)")},
                 {"limit", uint("Number of lines to return")}},
                {"file_path"}),
         {"file", "open", "cat"}},
        {"write",
         "Write content to a file (creates or overwrites; parent directories are created).",
         schema({{"file_path", str("Absolute, or relative to the workspace")},
                 {"content", str("The new content")}},
                {"file_path", "content"}),
         {"file", "save", "create"}},
        {"edit",
         "Edit a file by replacing the first occurrence of old_string with new_string (or all with "
         "replace_all).",
         schema({{"file_path", str("Absolute, or relative to the workspace")},
                 {"old_string", str("Exact text to find")},
                 {"new_string", str("Replacement text")},
                 {"replace_all",
                  Json{{"type", "boolean"}, {"description", "Replace every occurrence"}}}},
                {"file_path", "old_string", "new_string"}),
         {"file", "replace", "modify"}},
        {"glob",
         "Find files matching a glob pattern (e.g. \"**/*.cpp\"). Returns paths, newest first.",
         schema({{"pattern", str("Glob pattern; ** matches directories recursively")},
                 {"path", str("Directory to search (default: the workspace)")}},
                {"pattern"}),
         {"find", "files", "list"}},
        {"grep",
         "Search file contents with an extended regular expression. Returns matching lines with "
         "file paths "
         "and line numbers.",
         schema({{"pattern", str("Extended regular expression")},
                 {"path", str("File or directory (default: the workspace)")},
                 {"glob", str("Only files whose name matches this glob, e.g. *.py")}},
                {"pattern"}),
         {"search", "find", "regex"}},
    };
  }

  // Every run lists the tools: a copy of what the constructor built, not the schemas built again.
  Result<std::vector<kernex::ToolSpec>> list_tools(const kernex::Context&) override {
    return *specs_;
  }
  // The kernel's runs share this list instead of copying every schema each run.
  Result<std::shared_ptr<const std::vector<kernex::ToolSpec>>> list_tools_shared(
      const kernex::Context&) override {
    return specs_;
  }

  Result<ToolResult> execute(const kernex::Context& context, const kernex::RunHandles& run,
                             const ToolCall& call) override {
    static const std::map<std::string, ToolResult (FilesToolbox::*)(const Job&, const ToolCall&)>
        tools = {{"bash", &FilesToolbox::bash},   {"read", &FilesToolbox::read},
                 {"write", &FilesToolbox::write}, {"edit", &FilesToolbox::edit},
                 {"glob", &FilesToolbox::glob},   {"grep", &FilesToolbox::grep}};
    auto it = tools.find(call.name);
    if (it == tools.end() || !enabled_.contains(call.name)) {
      return kernex::fail(ErrorCode::Tool, "files: no tool named '" + call.name + "'");
    }
    if (context.stop.stop_requested()) return bad(call, sb::cancelled_text(call.name));
    auto where = sb::call_workspace(sb::CallScope::of(context), options_.workspace);
    if (!where) return bad(call, "Error: " + where.error().message);
    auto p = policy(*where);
    if (!p)
      return bad(call, "Refusing to run " + call.name +
                           ": the sandbox can't be set up: " + p.error().describe());
    const fs::path dir = (*p)->profile().workspace.value_or(where->dir);
    Job job{*p, dir, context.stop, run.code_result_max_bytes, nullptr};
    if (call.name == "read") job.opener = opener(where->key(), *p);
    return (this->*(it->second))(job, call);
  }

 private:
  // What one call works with: the policy of its workspace, that workspace, the run's stop token.
  struct Job {
    std::shared_ptr<const sb::Policy> policy;
    fs::path workspace;
    std::stop_token stop;
    // Nonzero: code called the tool (RunHandles::code_result_max_bytes). Its output is kept
    // whole up to this cap, never cut to the model's max_output, and past it the call fails.
    std::size_t code_cap = 0;
    std::shared_ptr<kernex::files::SandboxedOpener> opener;  // read's fast path; may be null
  };

  struct Cached {
    std::shared_ptr<const sb::Policy> policy;
    std::uint64_t generation = 0;  // kernel_files_generation() when it was built
    std::uint64_t last_used = 0;
    std::shared_ptr<kernex::files::SandboxedOpener> opener;  // made on the first read
    bool opener_failed = false;  // it could not start under this policy: reads spawn
  };

  // One policy per workspace (the configured one, or each host workspace and its overlay layers):
  // the workspace read-write, the rest as the profile says. Rebuilt when a kernel file was
  // registered since (a skill loaded, a project file read), so it keeps that one too. At most
  // kMaxPolicies are kept (least recently used dropped; calls still running keep theirs alive).
  Result<std::shared_ptr<const sb::Policy>> policy(const sb::CallWorkspace& where) {
    constexpr std::size_t kMaxPolicies = 64;
    std::lock_guard lock(mutex_);
    const std::uint64_t generation = kernex::kernel_files_generation();
    const std::string key = where.key();
    Cached& cached = policies_[key];
    cached.last_used = ++uses_;
    if (cached.policy && cached.generation == generation) return cached.policy;
    cached.policy.reset();
    kernex::Toolbox self;
    self.name = "files";
    sb::SandboxProfile profile = sb::toolbox_profile(self, options_, where);
    profile.stdout_cap = kCaptureCap;
    auto built = sb::PolicyBuilder(std::move(profile)).Build();
    if (!built) {
      policies_.erase(key);
      return std::unexpected(built.error());
    }
    cached.policy = std::make_shared<const sb::Policy>(std::move(*built));
    cached.generation = generation;
    auto result = cached.policy;
    while (policies_.size() > kMaxPolicies) {
      auto oldest = std::min_element(
          policies_.begin(), policies_.end(),
          [](const auto& a, const auto& b) { return a.second.last_used < b.second.last_used; });
      policies_.erase(oldest);
    }
    return result;
  }

  // The opener for `policy` (cached with it), started on first use outside the lock (a Python
  // start takes tens of ms); null when it can't run here.
  std::shared_ptr<kernex::files::SandboxedOpener> opener(
      const std::string& key, const std::shared_ptr<const sb::Policy>& policy) {
    {
      std::lock_guard lock(mutex_);
      auto it = policies_.find(key);
      if (it == policies_.end() || it->second.policy != policy || it->second.opener_failed)
        return nullptr;
      if (it->second.opener && !it->second.opener->broken()) return it->second.opener;
    }
    auto started = kernex::files::SandboxedOpener::start(*policy);
    std::lock_guard lock(mutex_);
    auto it = policies_.find(key);
    if (it == policies_.end() || it->second.policy != policy) return started;
    if (!started) {
      it->second.opener_failed = true;
    } else if (!it->second.opener || it->second.opener->broken()) {
      it->second.opener = started;
      keep_few_openers();
    }
    return it->second.opener;
  }

  // An opener is a Python process (~8 MB): at most kMaxOpeners live at once, the workspaces read
  // from least recently losing theirs (a call still using one keeps it until it returns; the next
  // read there starts another).
  void keep_few_openers() {
    constexpr std::size_t kMaxOpeners = 8;
    for (;;) {
      std::size_t live = 0;
      Cached* oldest = nullptr;
      for (auto& [key, cached] : policies_) {
        if (!cached.opener) continue;
        ++live;
        if (oldest == nullptr || cached.last_used < oldest->last_used) oldest = &cached;
      }
      if (live <= kMaxOpeners || oldest == nullptr) return;
      oldest->opener.reset();
    }
  }

  struct Run {
    sb::SpawnResult result;
    std::string refusal;  // non-empty: the command never ran
  };

  // A cancelled run is a refusal too: whatever the tool was doing is not done.
  static Run spawn(const Job& job, const std::string& tool, std::vector<std::string> argv,
                   std::string stdin_data = {},
                   std::optional<std::chrono::milliseconds> timeout = std::nullopt,
                   std::optional<fs::path> cwd = {}) {
    sb::Command cmd;
    cmd.argv = std::move(argv);
    cmd.stdin_data = std::move(stdin_data);
    cmd.timeout = timeout;
    cmd.cwd = std::move(cwd);
    cmd.stop = job.stop;
    if (job.code_cap > 0) cmd.stdout_cap = job.code_cap;
    auto r = sb::spawn(*job.policy, cmd);
    if (!r && r.error().code == ErrorCode::Cancelled) return {{}, sb::cancelled_text(tool)};
    if (!r) return {{}, "Refusing to run " + tool + ": " + r.error().describe()};
    if (r->cancelled) return {std::move(*r), sb::cancelled_text(tool)};
    return {std::move(*r), {}};
  }

  // Relative to the workspace; whether it may be touched is the sandbox's decision, not ours.
  static fs::path resolve(const Job& job, const std::string& path) {
    fs::path p(path);
    return (p.is_absolute() ? p : job.workspace / p).lexically_normal();
  }

  std::string cut(const std::string& s) const {
    if (s.size() <= options_.max_output) return s;
    return cut_copy(s);
  }

  // The model's view of an output; code (job.code_cap) gets it whole, or an error when the
  // output went past the code's cap: never a silently shortened result.
  ToolResult output(const Job& job, const ToolCall& call, std::string s, bool truncated,
                    bool is_error = false) const {
    if (job.code_cap == 0) return ToolResult{call.id, call.name, cut(s), is_error};
    if (truncated) return over_code_cap(job, call);
    return ToolResult{call.id, call.name, std::move(s), is_error};
  }

  static ToolResult over_code_cap(const Job& job, const ToolCall& call) {
    return bad(call, "Error: the result of " + call.name + " is larger than " +
                         std::to_string(job.code_cap) +
                         " bytes (repl.tool_result_max_bytes), the cap on a result code receives; "
                         "nothing was returned. Ask for less (read's offset and limit, a narrower "
                         "grep) or raise the cap.");
  }

  std::string cut_copy(const std::string& s) const {
    const std::size_t n = kernex::floor_char_boundary(s, options_.max_output);
    return s.substr(0, n) + "\n\n... (output truncated: " + std::to_string(s.size()) +
           " total bytes, showing first " + std::to_string(n) + ")";
  }

  static std::string trimmed(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
  }

  std::string failure(const sb::SpawnResult& r, const std::string& what) const {
    if (r.timed_out) return what + ": timed out";
    std::string err = trimmed(r.stderr_data);
    if (err.empty()) {
      err = r.term_signal ? "killed by signal " + std::to_string(r.term_signal)
                          : "exit status " + std::to_string(r.exit_code);
    }
    return what + ": " + err;
  }

  // --norc: bash reads ~/.bashrc even non-interactively when stdin is a socket (as the sandbox's
  // is), taking it for rshd.
  ToolResult bash(const Job& job, const ToolCall& call) {
    const std::string command = string_arg(call.arguments, "command");
    if (command.empty()) return required(call, "command");
    std::optional<std::chrono::milliseconds> timeout;
    if (auto secs = uint_arg(call.arguments, "timeout_secs"); secs && *secs > 0) {
      auto limit = job.policy->profile().timeout;
      timeout =
          std::min(limit, std::chrono::milliseconds(std::min<std::uint64_t>(*secs, 86400) * 1000));
    }
    auto run = spawn(job, "bash", {"bash", "--norc", "--noprofile", "-c", command}, {}, timeout);
    if (!run.refusal.empty()) return bad(call, run.refusal);
    const auto& r = run.result;
    if (r.timed_out) {
      auto limit = timeout ? *timeout : job.policy->profile().timeout;
      return bad(call, "Command timed out after " + std::to_string(limit.count() / 1000) + "s");
    }
    std::string out = r.stdout_data;
    if (!r.stderr_data.empty()) out += (out.empty() ? "" : "\n") + r.stderr_data;
    if (out.empty()) out = "(exit code: " + std::to_string(r.term_signal ? -1 : r.exit_code) + ")";
    return output(job, call, std::move(out), r.stdout_truncated, !r.success());
  }

  ToolResult read(const Job& job, const ToolCall& call) {
    const std::string file = string_arg(call.arguments, "file_path");
    if (file.empty()) return required(call, "file_path");
    const fs::path path = resolve(job, file);
    auto offset = uint_arg(call.arguments, "offset");
    auto limit = uint_arg(call.arguments, "limit");
    if (job.opener) {
      std::optional<kernex::files::LineRange> range;
      if (offset || limit) range = kernex::files::LineRange::of(offset, limit);
      if (auto fast = read_opened(job, call, path, range)) return std::move(*fast);
    }
    std::vector<std::string> argv = {"cat", "--", path.string()};
    if (offset || limit) {
      const std::uint64_t first = std::max<std::uint64_t>(offset.value_or(1), 1);
      const std::string range =
          limit ? std::to_string(first) + "," +
                      std::to_string(first + std::max<std::uint64_t>(*limit, 1) - 1)
                : std::to_string(first) + ",$";
      argv = {"sed", "-n", range + "p", "--", path.string()};
    }
    auto run = spawn(job, "read", std::move(argv));
    if (!run.refusal.empty()) return bad(call, run.refusal);
    if (!run.result.success())
      return bad(call, failure(run.result, "Error reading " + path.string()));
    if (job.code_cap == 0) return ok(call, cut(run.result.stdout_data));
    if (run.result.stdout_truncated) return over_code_cap(job, call);
    return read_for_code(call, std::move(run.result.stdout_data));
  }

  // A read through the opener: the same answer as cat's (whole) or sed's (`range`), or nullopt
  // for the caller to run them (not found, denied, a directory, /proc, a model's whole read past
  // kCaptureCap: their messages and their view stay the only ones).
  std::optional<ToolResult> read_opened(const Job& job, const ToolCall& call, const fs::path& path,
                                        std::optional<kernex::files::LineRange> range) const {
    namespace kf = kernex::files;
    auto opened = job.opener->open(path.string(), job.stop);
    if (!opened) return bad(call, sb::cancelled_text(call.name));
    if (opened->kind == kf::Opened::Kind::NotRegular)
      return bad(call, "Error reading " + path.string() + ": it is " + opened->what +
                           ", not a regular file");
    if (opened->kind != kf::Opened::Kind::File) return std::nullopt;
    if (range) return read_range(job, call, path, opened->fd.get(), *range);
    auto text = kf::read_whole(opened->fd.get(), job.code_cap > 0 ? job.code_cap : kCaptureCap);
    if (!text) return bad(call, "Error reading " + path.string() + ": " + text.error().message);
    if (!*text) {
      if (job.code_cap > 0) return over_code_cap(job, call);
      return std::nullopt;
    }
    if (job.code_cap == 0) return ok(call, cut((*text)->text));
    return read_for_code(call, std::move((*text)->text), (*text)->newlines);
  }

  // The lines of `range` from the opened file, as sed printed them: the model's view cut as any
  // output, code's whole or refused past its cap. The profile's timeout bounds the read as it
  // bounded sed (a huge file, one that keeps growing).
  ToolResult read_range(const Job& job, const ToolCall& call, const fs::path& path, int fd,
                        kernex::files::LineRange range) const {
    const auto deadline = std::chrono::steady_clock::now() + job.policy->profile().timeout;
    auto lines = kernex::files::read_lines(fd, range, job.code_cap > 0 ? job.code_cap : kCaptureCap,
                                           deadline, job.stop);
    if (!lines && lines.error().code == ErrorCode::Cancelled)
      return bad(call, sb::cancelled_text(call.name));
    if (!lines) return bad(call, "Error reading " + path.string() + ": " + lines.error().message);
    if (job.code_cap == 0) return ok(call, cut(lines->text));
    if (lines->truncated) return over_code_cap(job, call);
    return read_for_code(call, std::move(lines->text));
  }

  // What code gets of a read: {content, lines, truncated: false} (the whole text: code is not the
  // model, and past the code's cap the call fails instead). The text itself is moved into the
  // structured result, never copied: a copy of a 2.5 MB file cost more than reading it (fresh
  // pages, faulted in one by one). The content, which hooks, the audit log and the trajectory see
  // of it, is the text up to kContentPreview bytes and a note of its size; the hooks that rewrite
  // results (PII) do the structured value too. The preview is short (the records keep up to
  // 64 KiB of any result, kernel/src/recorded_result.hpp): every call from code writes it into
  // the trajectory and the stream, and at 64 KiB that cost a 2.5 MB read a quarter of its time,
  // for text the code has whole and the model never sees.
  static ToolResult read_for_code(const ToolCall& call, std::string text,
                                  std::optional<std::size_t> newlines = std::nullopt) {
    std::size_t lines = newlines ? *newlines : kernex::files::count_newlines(text);
    if (!text.empty() && text.back() != '\n') ++lines;
    ToolResult result{call.id, call.name, content_preview(text), false};
    result.structured = Json{{"content", std::move(text)}, {"lines", lines}, {"truncated", false}};
    return result;
  }

  static constexpr std::size_t kContentPreview = 4 * 1024;

  static std::string content_preview(const std::string& text) {
    if (text.size() <= kContentPreview) return text;
    const std::size_t n = kernex::floor_char_boundary(text, kContentPreview);
    return text.substr(0, n) + "\n\n... (" + std::to_string(text.size()) +
           " bytes in all, returned whole to the code that called read; the first " +
           std::to_string(n) + " are shown here)";
  }

  static Run write_file(const Job& job, const fs::path& path, std::string content) {
    return spawn(job, "write",
                 {"sh", "-c", "mkdir -p -- \"$(dirname -- \"$1\")\" && cat > \"$1\"",
                  "kernex-write", path.string()},
                 std::move(content));
  }

  ToolResult write(const Job& job, const ToolCall& call) {
    const std::string file = string_arg(call.arguments, "file_path");
    if (file.empty()) return required(call, "file_path");
    const fs::path path = resolve(job, file);
    std::string content = string_arg(call.arguments, "content");
    const std::size_t bytes = content.size();
    auto run = write_file(job, path, std::move(content));
    if (!run.refusal.empty()) return bad(call, run.refusal);
    if (!run.result.success())
      return bad(call, failure(run.result, "Error writing " + path.string()));
    return ok(call, "Wrote " + std::to_string(bytes) + " bytes to " + path.string());
  }

  ToolResult edit(const Job& job, const ToolCall& call) {
    const std::string file = string_arg(call.arguments, "file_path");
    if (file.empty()) return required(call, "file_path");
    const std::string old_string = string_arg(call.arguments, "old_string");
    if (old_string.empty()) return required(call, "old_string");
    const std::string new_string = string_arg(call.arguments, "new_string");
    const bool all = call.arguments.is_object() && call.arguments.contains("replace_all") &&
                     call.arguments["replace_all"] == true;
    const fs::path path = resolve(job, file);

    Job whole_file = job;  // edit reads up to kCaptureCap whoever called it: its result is short
    whole_file.code_cap = 0;
    auto read_run = spawn(whole_file, "edit", {"cat", "--", path.string()});
    if (!read_run.refusal.empty()) return bad(call, read_run.refusal);
    if (!read_run.result.success())
      return bad(call, failure(read_run.result, "Error reading " + path.string()));
    if (read_run.result.stdout_truncated) {
      return bad(call, "Error: " + path.string() + " is larger than " +
                           std::to_string(kCaptureCap) + " bytes; not edited");
    }
    std::string text = std::move(read_run.result.stdout_data);
    std::size_t count = 0;
    for (std::size_t pos = text.find(old_string); pos != std::string::npos;
         pos = text.find(old_string, pos + old_string.size())) {
      ++count;
    }
    if (count == 0) return bad(call, "Error: old_string not found in file");
    std::size_t pos = 0;
    std::size_t replaced = 0;
    while ((pos = text.find(old_string, pos)) != std::string::npos && (all || replaced == 0)) {
      text.replace(pos, old_string.size(), new_string);
      pos += new_string.size();
      ++replaced;
    }
    auto write_run = write_file(job, path, std::move(text));
    if (!write_run.refusal.empty()) return bad(call, write_run.refusal);
    if (!write_run.result.success())
      return bad(call, failure(write_run.result, "Error writing " + path.string()));
    return ok(call, "Edited " + path.string() + " (" + std::to_string(count) +
                        " occurrence(s) of pattern, replaced " + (all ? "all" : "first") + ")");
  }

  ToolResult glob(const Job& job, const ToolCall& call) {
    const std::string pattern = string_arg(call.arguments, "pattern");
    if (pattern.empty()) return required(call, "pattern");
    const std::string base = string_arg(call.arguments, "path");
    const fs::path dir = base.empty() ? job.workspace : resolve(job, base);
    // The pattern is expanded as an unquoted word with IFS empty: pathname expansion only, no
    // splitting and no command substitution of its text.
    static const std::string script = R"(cd -- "$1" || exit 2
shopt -s globstar nullglob extglob
IFS=
found=()
for f in $2; do [[ -e $f || -L $f ]] && found+=("$PWD/$f"); done
(( ${#found[@]} )) || exit 0
if (( ${#found[@]} <= 10000 )); then ls -1td -- "${found[@]}"; else printf '%s\n' "${found[@]}"; fi)";
    auto run = spawn(
        job, "glob",
        {"bash", "--norc", "--noprofile", "-c", script, "kernex-glob", dir.string(), pattern});
    if (!run.refusal.empty()) return bad(call, run.refusal);
    if (!run.result.success())
      return bad(call, failure(run.result, "Error listing " + dir.string()));
    if (job.code_cap > 0) return glob_for_code(job, call, run.result);
    if (run.result.stdout_data.empty()) return ok(call, "(no files matched)");
    return ok(call, cut(run.result.stdout_data));
  }

  // Code gets glob's paths as a list (newest first), [] when none matched.
  static ToolResult glob_for_code(const Job& job, const ToolCall& call, const sb::SpawnResult& r) {
    if (r.stdout_truncated) return over_code_cap(job, call);
    Json paths = Json::array();
    std::size_t at = 0;
    while (at < r.stdout_data.size()) {
      std::size_t end = r.stdout_data.find('\n', at);
      if (end == std::string::npos) end = r.stdout_data.size();
      if (end > at) paths.push_back(r.stdout_data.substr(at, end - at));
      at = end + 1;
    }
    ToolResult result{call.id, call.name, r.stdout_data, false};
    result.structured = std::move(paths);
    return result;
  }

  ToolResult grep(const Job& job, const ToolCall& call) {
    const std::string pattern = string_arg(call.arguments, "pattern");
    if (pattern.empty()) return required(call, "pattern");
    if (pattern.size() > kMaxPattern) return bad(call, "Error: 'pattern' exceeds 1024-char limit");
    const std::string base = string_arg(call.arguments, "path");
    const std::string include = string_arg(call.arguments, "glob");
    // -e and -- keep the model's values from being read as options.
    std::vector<std::string> argv = {"grep", "-r", "-n", "-I", "-E", "--color=never"};
    if (!include.empty()) argv.push_back("--include=" + include);
    argv.insert(argv.end(), {"-e", pattern, "--",
                             base.empty() ? std::string(".") : resolve(job, base).string()});
    auto run = spawn(job, "grep", std::move(argv));
    if (!run.refusal.empty()) return bad(call, run.refusal);
    const auto& r = run.result;
    if (r.timed_out) return bad(call, "grep timed out");
    if (r.stdout_data.empty()) {
      if (r.exit_code == 0 || (r.exit_code == 1 && r.term_signal == 0))
        return ok(call, "(no matches found)");
      return bad(call, "grep error: " + trimmed(r.stderr_data));
    }
    return output(job, call, r.stdout_data, r.stdout_truncated);
  }

  std::vector<kernex::ToolSpec> enabled_specs() const {
    std::vector<kernex::ToolSpec> specs;
    for (auto& spec : all_specs()) {
      if (enabled_.contains(spec.name)) specs.push_back(std::move(spec));
    }
    return specs;
  }

  sb::ToolboxRunOptions options_;
  std::set<std::string> enabled_;
  const std::shared_ptr<const std::vector<kernex::ToolSpec>> specs_;  // enabled; built once
  std::mutex mutex_;
  std::map<std::string, Cached> policies_;  // by host workspace ("" for the configured one)
  std::uint64_t uses_ = 0;
};

Result<std::shared_ptr<kernex::ToolExecutor>> make_files_toolbox(const Json& config) {
  Json runner_config = config.is_object() ? config : Json::object();
  std::set<std::string> enabled;
  for (const auto& spec : FilesToolbox::all_specs()) enabled.insert(spec.name);
  if (!config.is_null() && !config.is_object())
    return kernex::fail(ErrorCode::Config, "files: config must be an object");
  if (runner_config.contains("tools")) {
    const Json wanted = runner_config.at("tools");
    runner_config.erase("tools");
    if (!wanted.is_array())
      return kernex::fail(ErrorCode::Config, "files: `tools` must be a list of tool names");
    std::set<std::string> chosen;
    for (const auto& name : wanted) {
      if (!name.is_string() || !enabled.contains(name.get<std::string>())) {
        return kernex::fail(ErrorCode::Config, "files: `tools`: unknown tool " + name.dump() +
                                                   " (have bash, edit, glob, grep, read, write)");
      }
      chosen.insert(name.get<std::string>());
    }
    enabled = std::move(chosen);
  }
  KERNEX_ASSIGN_OR_RETURN(auto options, sb::ToolboxRunOptions::from_json(runner_config, "files"));
  return std::make_shared<FilesToolbox>(std::move(options), std::move(enabled));
}

}  // namespace

KERNEX_PLUGIN(Toolbox, "files", "1.0.0",
              "bash, read, write, edit, glob, grep: each a small program run in the Landlock + "
              "seccomp sandbox",
              make_files_toolbox)
