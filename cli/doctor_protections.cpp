// The "protections" part of `kernex doctor`: for each class of the second escape battery (issue
// 15), whether the default profile holds it on this machine, and how. Read from what Build()
// reports (PolicyStatus), never assumed, so a machine that lacks a feature shows `no` with the
// reason.
#include <algorithm>
#include <string>

#include "commands.hpp"
#include "kernex/kernel_files.hpp"
#include "kernex/sandbox/policy.hpp"

namespace kernex::cli {
namespace {

Json row(const char* name, bool active, std::string how) {
  return Json{{"protection", name}, {"active", active}, {"how", std::move(how)}};
}

std::string kernel_files_summary() {
  std::size_t read_only = 0, hidden = 0;
  for (const auto& f : kernex::kernel_files())
    (f.access == KernelFileAccess::Hidden ? hidden : read_only)++;
  return std::to_string(read_only) + " registered read-only, " + std::to_string(hidden) +
         " hidden (config and what it names, plugin and skill dirs; the data dir): read-only binds "
         "and masks in "
         "the policy's mount namespace, or Build() refuses a grant inside one";
}

}  // namespace

Json sandbox_protections_json(const sandbox::PolicyStatus& s) {
  const bool on = s.enforced && s.seccomp;
  Json rows = Json::array();
  rows.push_back(row("kernel_files", s.enforced && s.filesystem, kernel_files_summary()));
  rows.push_back(row("skills_read_only", s.enforced && s.filesystem,
                     "skill folders the kernel loads are kernel files (read-only to every tool); "
                     "skills in writable "
                     "places load only once trusted (`kernex skills trust`)"));
  rows.push_back(
      row("git_read_only", s.enforced && s.filesystem,
          "every .git (and the gitdir a .git file names) is a read-only bind unless a profile sets "
          "git_writes; then config, config.worktree, commondir, hooks/, info/, objects/info/, "
          "worktrees/ and modules/ stay read-only even where they don't exist yet (made empty and "
          "bound read-only at Build; initialized submodule gitdirs guarded alike); in every mode "
          "the directories of submodules not checked out and what git's config names in the "
          "worktree (hooksPath, includes, driver programs) stay read-only"));
  rows.push_back(row(
      "programs_not_files", s.enforced && s.filesystem,
      "allowed_commands and MCP server commands must be executables; EXECUTE on that file only"));
  rows.push_back(row("network_gaps", on,
                     std::string("TCP fast open refused; listen() ") +
                         (s.listen_allowed ? "allowed (profile opted in)" : "refused")));
  rows.push_back(row("sysv_ipc", on, "shm*/msg*/sem* and POSIX message queues refused"));
  rows.push_back(row("process_limit", !s.process_limit.empty(),
                     s.process_limit.empty()
                         ? "no process limit"
                         : "processes and threads capped by " + s.process_limit));
  rows.push_back(
      row("anonymous_code", on,
          std::string(s.memfd_sealed ? "memfd_create only sealed non-executable"
                                     : "memfd_create refused (no MFD_NOEXEC_SEAL on this kernel)") +
              "; writable mounts noexec; no path both writable and executable"));
  rows.push_back(row("nothing_outlives_the_kernel", s.pid_namespace,
                     s.pid_namespace
                         ? "sandboxed processes live in PID namespaces whose init dies with the "
                           "kernel; dead kernels' TMPDIRs "
                           "reclaimed"
                         : "no PID namespace here (needs CAP_SYS_ADMIN): descendants can outlive a "
                           "SIGKILLed kernel"));
  rows.push_back(row("no_watches", on && !s.file_watches_allowed,
                     s.file_watches_allowed ? "inotify allowed (profile opted in)"
                                            : "inotify and fanotify refused"));
  rows.push_back(
      row("read_only_outside_grants", on && s.read_only_root,
          s.read_only_root
              ? "every mount read-only but the writable grants: chmod, chown, utimensat "
                "outside them fail (EROFS)"
              : "no read-only root (mount_setattr needs Linux 5.12): a command can chmod and "
                "touch files it owns outside its grants"));
  return rows;
}

std::string sandbox_protections_text(const Json& rows) {
  std::string out = "  protections\n";
  for (const auto& r : rows) {
    std::string name = r.at("protection").get<std::string>();
    name.resize(std::max<std::size_t>(name.size(), 28), ' ');
    out += "    " + name + (r.at("active").get<bool>() ? "yes  " : "no   ") +
           r.at("how").get<std::string>() + "\n";
  }
  return out;
}

}  // namespace kernex::cli
