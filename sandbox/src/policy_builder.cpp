// PolicyBuilder::Build(): validate the profile, resolve every grant to a canonical path, refuse
// grants that would expose a protected path, then prepare the Landlock ruleset and seccomp BPF.
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <utility>

#include "clone_thread.hpp"
#include "kernex/log.hpp"
#include "kernex/kernel_files.hpp"
#include "kernex/sandbox/executable.hpp"
#include "owner_tag.hpp"
#include "landlock_abi.hpp"
#include "git_config_paths.hpp"
#include "git_guard.hpp"
#include "mount_plan.hpp"
#include "pids_cgroup.hpp"
#include "policy_state.hpp"

extern char** environ;

namespace kernex::sandbox {
namespace fs = std::filesystem;

Policy::State::~State() {
  if (landlock_fd >= 0) ::close(landlock_fd);
  if (mntns_fd >= 0) ::close(mntns_fd);
  if (userns_fd >= 0) ::close(userns_fd);
  if (!private_tmp.empty()) {
    std::error_code ec;
    fs::remove_all(private_tmp, ec);
  }
}

const SandboxProfile& Policy::profile() const { return state_->profile; }
const PolicyStatus& Policy::status() const { return state_->status; }
const fs::path& Policy::private_tmp() const { return state_->private_tmp; }
const std::vector<fs::path>& Policy::allowed_executables() const {
  return state_->allowed_executables;
}

PolicyBuilder& PolicyBuilder::workspace_overlay(WorkspaceOverlay layers) {
  profile_.workspace_overlay = std::move(layers);
  return *this;
}

PolicyBuilder& PolicyBuilder::workspace(fs::path dir) {
  profile_.workspace = std::move(dir);
  return *this;
}
PolicyBuilder& PolicyBuilder::read_only(fs::path p) {
  profile_.read_only.push_back(std::move(p));
  return *this;
}
PolicyBuilder& PolicyBuilder::read_write(fs::path p) {
  profile_.read_write.push_back(std::move(p));
  return *this;
}
PolicyBuilder& PolicyBuilder::executable(fs::path p) {
  profile_.executable.push_back(std::move(p));
  return *this;
}
PolicyBuilder& PolicyBuilder::protect(fs::path p) {
  profile_.protected_paths.push_back(std::move(p));
  return *this;
}
PolicyBuilder& PolicyBuilder::allow_tcp_connect(std::uint16_t port) {
  profile_.network.tcp_connect_ports.push_back(port);
  return *this;
}
PolicyBuilder& PolicyBuilder::allow_unix_sockets() {
  profile_.network.unix_sockets = true;
  return *this;
}
PolicyBuilder& PolicyBuilder::allow_listen() {
  profile_.network.listen = true;
  return *this;
}
PolicyBuilder& PolicyBuilder::allow_file_watches() {
  profile_.watch_files = true;
  return *this;
}
PolicyBuilder& PolicyBuilder::passthrough_env(std::string name) {
  profile_.env.passthrough.push_back(std::move(name));
  return *this;
}
PolicyBuilder& PolicyBuilder::set_env(std::string name, std::string value) {
  profile_.env.set[std::move(name)] = std::move(value);
  return *this;
}
PolicyBuilder& PolicyBuilder::allow_command(std::string c) {
  profile_.allowed_commands.push_back(std::move(c));
  return *this;
}
PolicyBuilder& PolicyBuilder::limits(ResourceLimits l) {
  profile_.limits = l;
  return *this;
}
PolicyBuilder& PolicyBuilder::timeout(std::chrono::milliseconds t) {
  profile_.timeout = t;
  return *this;
}
PolicyBuilder& PolicyBuilder::output_caps(std::size_t out, std::size_t err) {
  profile_.stdout_cap = out;
  profile_.stderr_cap = err;
  return *this;
}
PolicyBuilder& PolicyBuilder::working_dir(fs::path dir) {
  profile_.working_dir = std::move(dir);
  return *this;
}
PolicyBuilder& PolicyBuilder::enforce(bool on) {
  profile_.enforce = on;
  return *this;
}

namespace {

std::vector<fs::path> home_dirs() {
  std::vector<fs::path> homes;
  if (const char* h = std::getenv("HOME"); h != nullptr && h[0] == '/') homes.emplace_back(h);
  passwd pw{};
  passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (getpwuid_r(getuid(), &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr &&
      pw.pw_dir != nullptr && pw.pw_dir[0] == '/') {
    homes.emplace_back(pw.pw_dir);
  }
  return homes;
}

// Both the lexical form and, when it exists, the resolved form: a protected path reached through a
// symlink must be caught either way.
std::vector<fs::path> protected_forms(const SandboxProfile& p) {
  std::vector<fs::path> raw = p.protected_paths;
  for (const auto& home : home_dirs()) {
    auto defaults = default_protected_paths(home);
    raw.insert(raw.end(), defaults.begin(), defaults.end());
  }
  std::vector<fs::path> out;
  for (const auto& q : raw) {
    if (!q.is_absolute()) continue;
    out.push_back(q.lexically_normal());
    std::error_code ec;
    auto resolved = fs::weakly_canonical(q, ec);
    if (!ec) out.push_back(resolved);
  }
  return out;
}

bool valid_env_name(std::string_view name) {
  return !name.empty() && name.find('=') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos;
}

constexpr std::string_view kPrivateTmpPrefix = "kernex-sandbox-";

// Once per base directory and process: the private TMPDIRs that kernels which died without cleaning
// up left there. Only directories (never a symlink of that name, which is not followed) owned by
// this euid; remove_all doesn't follow symlinks inside either.
void reclaim_dead_private_tmps(const fs::path& base) {
  static std::mutex mutex;
  static std::vector<fs::path> swept;
  std::lock_guard lock(mutex);
  if (std::find(swept.begin(), swept.end(), base) != swept.end()) return;
  swept.push_back(base);
  detail::for_each_stale(base, kPrivateTmpPrefix, [](const fs::path& dir) {
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) return;
    std::error_code ec;
    fs::remove_all(dir, ec);
    kernex::log(LogLevel::Debug,
                "sandbox: removed the private TMPDIR of a dead kernel: " + dir.string());
  });
}

// A registered kernel file as Build() sees it: the path the kernel uses and, resolved through
// whatever exists of it, the file it reaches.
struct ResolvedKernelFile {
  fs::path path;
  fs::path resolved;
  KernelFileAccess access;
  std::string why;
  bool exists = false;
};

std::vector<ResolvedKernelFile> resolve_kernel_files() {
  std::vector<ResolvedKernelFile> out;
  for (auto& k : kernel_files()) {
    std::error_code ec;
    fs::path resolved = fs::weakly_canonical(k.path, ec);
    if (ec) resolved = k.path;
    const bool exists = fs::exists(fs::symlink_status(resolved, ec));
    out.push_back({k.path, resolved, k.access, std::move(k.why), exists});
  }
  return out;
}

// Tool areas (kernex/kernel_files.hpp) resolved through whatever exists of them: a grant is
// compared with where an area really is, so an area named through a symlink exempts only what it
// reaches.
std::vector<ToolArea> resolve_tool_areas() {
  std::vector<ToolArea> out;
  for (auto& a : tool_areas()) {
    std::error_code ec;
    fs::path resolved = fs::weakly_canonical(a.path, ec);
    if (ec) continue;
    out.push_back({resolved, std::move(a.why)});
  }
  return out;
}

class Builder {
 public:
  explicit Builder(SandboxProfile p) : state_(std::make_shared<Policy::State>()) {
    state_->profile = std::move(p);
  }

  Result<Policy> build() {
    SandboxProfile& p = state_->profile;
    if (p.timeout.count() <= 0) return fail(ErrorCode::Config, "sandbox.timeout: must be positive");
    if (p.stdout_cap == 0 || p.stderr_cap == 0)
      return fail(ErrorCode::Config, "sandbox output caps must be positive");
    for (const auto& dir : p.search_path) {
      if (!dir.is_absolute())
        return fail(ErrorCode::Config,
                    "sandbox.search_path: '" + dir.string() + "' is not absolute");
    }
    protected_ = protected_forms(p);
    kernel_files_ = resolve_kernel_files();
    tool_areas_ = resolve_tool_areas();

    KERNEX_RETURN_IF_ERROR(collect_grants());
    KERNEX_RETURN_IF_ERROR(check_overlay());
    KERNEX_RETURN_IF_ERROR(resolve_allow_list());
    KERNEX_RETURN_IF_ERROR(protect_inside_writable());
    KERNEX_RETURN_IF_ERROR(build_env());
    KERNEX_RETURN_IF_ERROR(choose_working_dir());
    KERNEX_RETURN_IF_ERROR(prepare_enforcement());
    return Policy(state_);
  }

 private:
  Result<void> check_protected(const fs::path& grant) const {
    for (const auto& q : protected_) {
      if (is_within(q, grant) || is_within(grant, q)) {
        return fail(ErrorCode::Sandbox, "refusing to grant '" + grant.string() + "': it " +
                                            (is_within(grant, q) ? "lies inside" : "contains") +
                                            " the protected path '" + q.string() + "'");
      }
    }
    return {};
  }

  // A grant inside (or equal to) a kernel file would reach it whole: no mount inside the grant can
  // take it back. Refused when the kernel file is hidden, or read-only and the grant writes.
  // A grant inside a tool area that lies below the kernel file is the exception (see
  // tool_area_for).
  Result<void> check_kernel_files(const fs::path& grant, std::uint64_t rights, const char* field) {
    const bool writes = (rights & LANDLOCK_ACCESS_FS_MAKE_REG) != 0;
    for (const auto& k : kernel_files_) {
      if (k.access == KernelFileAccess::ReadOnly && !writes) continue;
      for (const fs::path* form : {&k.path, &k.resolved}) {
        if (!is_within(grant, *form)) continue;
        KERNEX_ASSIGN_OR_RETURN(auto area, tool_area_for(grant, *form, field));
        if (area != nullptr) {
          area_grants_.push_back({grant, k.resolved, (area)->why});
          break;
        }
        return fail(ErrorCode::Sandbox,
                    std::string("refusing the ") + field + " grant '" + grant.string() + "': it " +
                        (grant == *form ? "is" : "lies inside") + " the kernel's " + k.why + " '" +
                        form->string() + "', which sandboxed processes must not " +
                        (k.access == KernelFileAccess::Hidden ? "see" : "write"));
      }
    }
    return {};
  }

  // The registered tool area, lying strictly below the kernel file `kernel` (one of its forms),
  // that holds the canonical `grant`; nullptr when none does. A grant that contains a kernel file
  // is refused even there: nothing inside it is masked (Landlock and the mask around it keep the
  // rest of `kernel` away, see mask_around_tool_area_grants).
  Result<const ToolArea*> tool_area_for(const fs::path& grant, const fs::path& kernel,
                                        const char* field) const {
    for (const auto& a : tool_areas_) {
      if (a.path == kernel || !is_within(a.path, kernel) || !is_within(grant, a.path)) continue;
      for (const auto& inner : kernel_files_) {
        for (const fs::path* form : {&inner.path, &inner.resolved}) {
          if (!is_within(*form, grant)) continue;
          return fail(ErrorCode::Sandbox,
                      std::string("refusing the ") + field + " grant '" + grant.string() +
                          "' in the " + a.why + " '" + a.path.string() + "': it " +
                          (grant == *form ? "is" : "contains") + " the kernel's " + inner.why +
                          " '" + form->string() + "'");
        }
      }
      return &a;
    }
    return nullptr;
  }

  // `required` paths come from the user and must exist; system defaults are skipped when absent.
  Result<void> grant(const fs::path& path, std::uint64_t rights, bool required, const char* field) {
    if (!path.is_absolute()) {
      return fail(ErrorCode::Config,
                  std::string("sandbox.") + field + ": '" + path.string() + "' is not absolute");
    }
    std::error_code ec;
    fs::path canonical = fs::canonical(path, ec);
    if (ec) {
      if (!required) return {};
      return fail(ErrorCode::Config,
                  std::string("sandbox.") + field + ": '" + path.string() + "': " + ec.message());
    }
    if (auto r = check_protected(path.lexically_normal()); !r) return r;
    if (auto r = check_protected(canonical); !r) return r;
    if (auto r = check_kernel_files(canonical, rights, field); !r) return r;
    grants_.push_back({canonical, rights});
    return {};
  }

  Result<void> collect_grants() {
    SandboxProfile& p = state_->profile;
    const bool restricted_exec = !p.allowed_commands.empty();
    if (p.system_defaults) {
      for (const auto& dir : system_exec_paths()) {
        if (auto r =
                grant(dir, restricted_exec ? landlock::kRead : landlock::kExec, false, "system");
            !r)
          return r;
      }
      for (const auto& file : system_read_only_paths()) {
        if (auto r = grant(file, landlock::kRead, false, "system"); !r) return r;
      }
      for (const char* dev : {"/dev/null", "/dev/zero", "/dev/full"}) {
        if (auto r = grant(dev, landlock::kDevice, false, "system"); !r) return r;
      }
      for (const char* dev : {"/dev/urandom", "/dev/random"}) {
        if (auto r = grant(dev, LANDLOCK_ACCESS_FS_READ_FILE, false, "system"); !r) return r;
      }
    }
    for (const auto& path : p.read_only) {
      if (auto r = grant(path, landlock::kRead, true, "read_only"); !r) return r;
    }
    for (const auto& path : p.executable) {
      if (auto r = grant(path, landlock::kExec, true, "executable"); !r) return r;
    }
    for (const auto& path : p.read_write) {
      if (auto r = grant(path, landlock::kReadWrite, true, "read_write"); !r) return r;
    }
    if (p.workspace) {
      if (auto r = grant(*p.workspace, landlock::kReadWrite, true, "workspace"); !r) return r;
      p.workspace = grants_.back().path;
    }
    if (p.private_tmp) {
      const char* env_base = std::getenv("TMPDIR");
      const fs::path base = env_base != nullptr && env_base[0] == '/' ? env_base : "/tmp";
      reclaim_dead_private_tmps(base);
      // The owner's tag lets a later kernel tell a TMPDIR whose kernel died (even by SIGKILL) from
      // a live one.
      std::string tmpl =
          (base / (std::string(kPrivateTmpPrefix) + detail::owner_tag() + "-XXXXXX")).string();
      if (::mkdtemp(tmpl.data()) == nullptr) {
        return fail(ErrorCode::Io,
                    "cannot create the private TMPDIR '" + tmpl + "': " + std::strerror(errno));
      }
      state_->private_tmp = fs::canonical(tmpl);
      if (auto r = grant(state_->private_tmp, landlock::kReadWrite, true, "private_tmp"); !r)
        return r;
    }
    return {};
  }

  // Each entry names one program (check_executable: an ELF file, or a `#!` script run by a system
  // interpreter, nowhere a sandbox can write); the grant is EXECUTE on that file, its interpreter
  // and the loader, never on a directory. A missing program is a warning (it can't run); any other
  // entry is an error naming it.
  Result<void> resolve_allow_list() {
    SandboxProfile& p = state_->profile;
    if (p.allowed_commands.empty()) return {};
    std::vector<fs::path> writable;
    for (const auto& g : grants_) {
      if ((g.rights & LANDLOCK_ACCESS_FS_WRITE_FILE) != 0) writable.push_back(g.path);
    }
    std::vector<fs::path> exec_files;
    for (const auto& entry : p.allowed_commands) {
      std::optional<fs::path> found;
      if (entry.find('/') != std::string::npos) {
        if (entry.front() != '/') {
          return fail(ErrorCode::Config, "sandbox.allowed_commands: '" + entry +
                                             "' must be a bare name or an absolute path");
        }
        found = fs::path(entry).lexically_normal();
      } else {
        found = find_program(p.search_path, entry);
      }
      Result<ExecutableFile> program = fail(ErrorCode::Io, "not found");
      if (found) program = check_executable(*found, writable);
      if (!program && program.error().code == ErrorCode::Io) {
        state_->status.warnings.push_back("allowed command '" + entry +
                                          "' was not found; it can't run");
        continue;
      }
      if (!program)
        return fail(ErrorCode::Sandbox, "sandbox.allowed_commands: '" + entry + "'",
                    program.error());
      state_->allowed_executables.push_back(program->path);
      exec_files.push_back(program->path);
      if (program->interpreter) exec_files.push_back(*program->interpreter);
    }
    // Dynamically linked programs need their loader opened for execution as well.
    for (const char* loader :
         {"/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1", "/lib/ld-linux.so.2"}) {
      exec_files.emplace_back(loader);
    }
    for (const auto& file : exec_files) {
      if (auto r = grant(file, LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE, false,
                         "allowed_commands");
          !r)
        return r;
    }
    return {};
  }

  // Inside the policy's private mount namespace (mount_namespace.cpp): writable grants are noexec;
  // kernel files, `.git` and files that run code later outside the sandbox (shell and direnv rc
  // files) are kept read-only or masked inside them. Landlock can't carve these out (its rules are
  // a union), so a mount does; what no mount can keep is refused here with an error naming both
  // paths.
  Result<void> protect_inside_writable() {
    for (const auto& g : grants_) {
      if (g.rights == landlock::kReadWrite) writable_.push_back(g.path);
    }
    MountPlan plan;
    for (const auto& w : writable_) {
      if (auto r = plan.writable(w); !r) return r;
    }
    if (auto r = protect_kernel_files(plan); !r) return r;
    for (const auto& w : writable_) {
      if (w == state_->private_tmp) continue;
      if (auto r = protect_git(plan, w); !r) return r;
      for (const char* rc :
           {".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile", ".zshrc",
            ".zshenv", ".zprofile", ".zlogin", ".envrc", ".gitconfig", ".gitmodules"}) {
        if (auto r = plan.read_only(w / rc, false); !r) return r;
      }
    }
    for (const auto& path : state_->profile.keep_read_only) {
      if (!path.is_absolute()) {
        return fail(ErrorCode::Config,
                    "sandbox.keep_read_only: '" + path.string() + "' is not absolute");
      }
      std::error_code ec;
      const fs::path canonical = fs::canonical(path, ec);
      if (ec || !writable_containing(canonical))
        continue;  // nothing there, or nothing can write it
      if (auto r = plan.read_only(canonical, executable_overlaps(canonical)); !r) return r;
    }
    if (auto r = check_write_xor_execute(plan); !r) return r;
    if (const auto& o = state_->profile.workspace_overlay) {
      // redirect_dir=nofollow, not off: `off` means `follow` on kernels built with
      // OVERLAY_FS_REDIRECT_ALWAYS_FOLLOW, which userxattr (the user-namespace mount) refuses.
      const std::string data = "lowerdir=" + state_->profile.workspace->string() +
                               ",upperdir=" + o->upper.string() + ",workdir=" + o->work.string() +
                               ",redirect_dir=nofollow,metacopy=off,index=off,xino=off";
      plan.overlay(*state_->profile.workspace, data, data + ",userxattr");
    }
    state_->protected_mounts = plan.finish();
    state_->status.read_only_in_writable = plan.kept_paths();
    return {};
  }

  // The overlay's layers: kernel-owned directories on one filesystem that no grant reaches (a tool
  // that could write the upper layer directly would bypass the review), named in a form overlayfs
  // can parse. Without enforcement there is no namespace to mount it in: refused, not ignored.
  Result<void> check_overlay() {
    SandboxProfile& p = state_->profile;
    if (!p.workspace_overlay) return {};
    auto& o = *p.workspace_overlay;
    if (!p.workspace)
      return fail(ErrorCode::Config, "a workspace overlay needs a workspace to lie over");
    if (!p.enforce) {
      return fail(ErrorCode::Sandbox,
                  "a workspace overlay needs enforcement (enforce: false has no mount namespace, "
                  "so writes would reach the real tree)");
    }
    struct stat first {};
    for (auto* layer : {&o.upper, &o.work}) {
      struct stat st {};
      if (!layer->is_absolute() || ::lstat(layer->c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
        return fail(ErrorCode::Sandbox, "workspace overlay layer '" + layer->string() +
                                            "' is not an existing directory");
      }
      *layer = fs::canonical(*layer);
      if (layer == &o.upper) first = st;
      if (st.st_dev != first.st_dev) {
        return fail(ErrorCode::Sandbox, "workspace overlay: upper '" + o.upper.string() +
                                            "' and work '" + o.work.string() +
                                            "' must be on one filesystem");
      }
      if (layer->string().find_first_of(",:\\\n") != std::string::npos) {
        return fail(ErrorCode::Sandbox, "workspace overlay layer '" + layer->string() +
                                            "' holds a character overlayfs can't take in a path "
                                            "(',', ':', '\\' or a newline)");
      }
      for (const auto& g : grants_) {
        if (is_within(*layer, g.path) || is_within(g.path, *layer)) {
          return fail(ErrorCode::Sandbox, "workspace overlay layer '" + layer->string() +
                                              "' must be out of the sandbox's reach, but the " +
                                              "grant '" + g.path.string() + "' reaches it");
        }
      }
    }
    if (p.workspace->string().find_first_of(",:\\\n") != std::string::npos) {
      return fail(ErrorCode::Sandbox, "workspace '" + p.workspace->string() +
                                          "' holds a character overlayfs can't take in a path "
                                          "(',', ':', '\\' or a newline)");
    }
    return {};
  }

  std::optional<fs::path> writable_containing(const fs::path& path) const {
    for (const auto& w : writable_) {
      if (is_within(path, w)) return w;
    }
    return std::nullopt;
  }

  bool executable_overlaps(const fs::path& path) const {
    return std::any_of(grants_.begin(), grants_.end(), [&](const LandlockGrant& g) {
      return (g.rights & LANDLOCK_ACCESS_FS_EXECUTE) != 0 &&
             (is_within(g.path, path) || is_within(path, g.path));
    });
  }

  // Kernel files (kernex/kernel_files.hpp) inside a writable grant: read-only or masked, and every
  // directory between the grant and the file pinned, so neither the file nor a parent can be
  // renamed away and replaced. Hidden ones are masked inside any grant.
  Result<void> protect_kernel_files(MountPlan& plan) {
    for (const auto& k : kernel_files_) {
      if (auto r = refuse_swappable_symlinks(k); !r) return r;
      const auto w = writable_containing(k.resolved);
      const auto covering =
          std::find_if(grants_.begin(), grants_.end(),
                       [&](const LandlockGrant& g) { return is_within(k.resolved, g.path); });
      if (covering == grants_.end()) {
        if (auto r = mask_around_tool_area_grants(plan, k); !r) return r;
        continue;
      }
      if (auto r = refuse_grant_under_mount(k, covering->path); !r) return r;
      if (!k.exists) {
        if (auto r = make_missing_kernel_dir(k, w); !r) return r;
      }
      if (!w) {
        if (k.access == KernelFileAccess::Hidden) {
          if (auto r = plan.mask(k.resolved); !r) return r;
        }
        continue;
      }
      plan.pin_between(*w, k.resolved);
      auto r = k.access == KernelFileAccess::Hidden
                   ? plan.mask(k.resolved)
                   : plan.read_only(k.resolved, executable_overlaps(k.resolved));
      if (!r) return r;
    }
    return {};
  }

  // Landlock keeps the rest of a hidden kernel dir unreadable around the tool-area grants inside
  // it, but not unnamed: lstat, readlink, inotify and connect() to a socket file pass it. So the
  // dir is masked and only those grants are moved back over the mask: another session's workspace,
  // the keys file or the memory db are not there at all.
  Result<void> mask_around_tool_area_grants(MountPlan& plan, const ResolvedKernelFile& k) {
    if (k.access != KernelFileAccess::Hidden) return {};
    std::vector<fs::path> keep;
    for (const auto& a : area_grants_) {
      if (a.kernel_file == k.resolved) keep.push_back(a.grant);
    }
    if (keep.empty()) return {};
    std::error_code ec;
    if (!fs::is_directory(k.resolved, ec)) return {};
    return plan.mask_keeping(k.resolved, keep);
  }

  // A kernel file that a grant covers gets a mask or a read-only bind in the mount namespace, which
  // would cover a tool-area grant inside it too (hidden, or read-only): refused rather than run a
  // tool whose workspace is not what it was granted.
  Result<void> refuse_grant_under_mount(const ResolvedKernelFile& k,
                                        const fs::path& covering) const {
    for (const auto& a : area_grants_) {
      if (a.kernel_file != k.resolved) continue;
      return fail(ErrorCode::Sandbox,
                  "refusing the grant '" + a.grant.string() + "' in the " + a.why +
                      ": the grant '" + covering.string() + "' also covers the kernel's " + k.why +
                      " '" + k.resolved.string() + "', which would then be " +
                      (k.access == KernelFileAccess::Hidden ? "masked" : "kept read-only") +
                      " with the tool area inside it; grant the tool area without a path "
                      "that contains the " +
                      k.why);
    }
    return {};
  }

  // A kernel file created later inside a writable grant could be planted by a tool first, and one
  // created later inside any grant would be visible to a policy built now. Directories the kernel
  // keeps (the data dir, hidden) are made now so they can be masked; a named read-only file must
  // exist unless nothing can write where it will be.
  Result<void> make_missing_kernel_dir(const ResolvedKernelFile& k,
                                       const std::optional<fs::path>& writable) {
    if (k.access == KernelFileAccess::ReadOnly && !writable) return {};
    std::error_code ec;
    if (k.access == KernelFileAccess::ReadOnly || !fs::create_directories(k.resolved, ec) || ec) {
      return fail(ErrorCode::Sandbox,
                  "the kernel's " + k.why + " '" + k.path.string() +
                      "' does not exist yet and lies inside the " +
                      (writable ? "writable grant '" + writable->string() +
                                      "', where a sandboxed "
                                      "process could plant it"
                                : std::string("granted tree, where it could not be hidden")) +
                      "; create it first or move it out of the grant");
    }
    fs::permissions(k.resolved, fs::perms::owner_all, ec);
    return {};
  }

  // The kernel opens a kernel file by the path it was given; a symlink on that path in a writable
  // directory could be pointed elsewhere for the next run, and a mount can't pin a symlink.
  Result<void> refuse_swappable_symlinks(const ResolvedKernelFile& k) const {
    fs::path prefix = k.path.root_path();
    for (const auto& part : k.path.relative_path()) {
      prefix /= part;
      struct stat st {};
      if (::lstat(prefix.c_str(), &st) != 0) break;
      if (!S_ISLNK(st.st_mode)) continue;
      std::error_code ec;
      const fs::path parent = fs::weakly_canonical(prefix.parent_path(), ec);
      if (ec) continue;
      if (const auto w = writable_containing(parent)) {
        return fail(ErrorCode::Sandbox, "the kernel's " + k.why + " '" + k.path.string() +
                                            "' is named through the "
                                            "symlink '" +
                                            prefix.string() + "' inside the writable grant '" +
                                            w->string() +
                                            "', which a sandboxed process could point elsewhere; "
                                            "name it by its real path '" +
                                            k.resolved.string() + "'");
      }
    }
    return {};
  }

  // Every `.git` below a writable grant (bounded scan, see find_git_entries), and the gitdirs and
  // commondirs that `.git` files name inside writable grants.
  Result<void> protect_git(MountPlan& plan, const fs::path& root) {
    const GitEntries found = find_git_entries(root);
    if (found.truncated) {
      state_->status.warnings.push_back(
          "'" + root.string() + "' is too deep or too large to scan for every .git (" +
          std::to_string(kGitScanDepth) + " levels, " + std::to_string(kGitScanEntries) +
          " entries); .git below that stays writable");
    }
    for (const auto& dir : found.dirs) {
      if (auto r = protect_gitdir(plan, root, dir, 0); !r) return r;
      KERNEX_RETURN_IF_ERROR(protect_worktree_trust(plan, dir.parent_path(), dir));
    }
    for (const auto& file : found.files) {
      plan.pin_between(root, file);
      if (auto r = plan.read_only(file, false); !r) return r;
      if (auto target = gitfile_target(file)) {
        if (auto r = protect_named_gitdir(plan, *target); !r) return r;
        KERNEX_RETURN_IF_ERROR(protect_worktree_trust(plan, file.parent_path(), *target));
      }
    }
    for (const auto& link : found.links) {
      std::error_code ec;
      const fs::path target = fs::canonical(link, ec);
      if (!ec && fs::is_directory(target, ec)) {
        if (auto r = protect_named_gitdir(plan, target); !r) return r;
        KERNEX_RETURN_IF_ERROR(protect_worktree_trust(plan, link.parent_path(), target));
      }
    }
    return {};
  }

  // What a repository's worktree holds that its git trusts: the directories of submodules not
  // checked out (git_guard.hpp), and what its config names or its hooks link to, where a writable
  // grant holds it (git_config_paths.hpp).
  Result<void> protect_worktree_trust(MountPlan& plan, const fs::path& worktree,
                                      const fs::path& gitdir) {
    KERNEX_RETURN_IF_ERROR(guard_gitlinks(plan, worktree, gitdir, state_->status.warnings));
    std::vector<fs::path> trusted = git_trusted_paths(gitdir, worktree);
    if (auto common = git_commondir(gitdir)) {
      for (auto& p : git_trusted_paths(*common, worktree)) trusted.push_back(std::move(p));
    }
    for (const auto& p : trusted) {
      const auto w = writable_containing(p);
      if (!w) continue;
      if (p == *w) {
        return fail(ErrorCode::Sandbox,
                    "the git config of '" + gitdir.string() + "' names the writable grant '" +
                        w->string() +
                        "' itself as a hooks path, include or program, which a sandboxed process "
                        "could rewrite; point git elsewhere or grant a directory inside it");
      }
      plan.pin_between(*w, p);
      KERNEX_RETURN_IF_ERROR(plan.read_only(p, false));
    }
    return {};
  }

  Result<void> protect_named_gitdir(MountPlan& plan, const fs::path& gitdir) {
    if (const auto w = writable_containing(gitdir)) return protect_gitdir(plan, *w, gitdir, 0);
    return {};
  }

  // Inside a kernel file, and not in a tool area below it (a serve session's workspace lies in
  // the data dir's tool area).
  bool inside_kernel_file(const fs::path& p) const {
    return std::any_of(kernel_files_.begin(), kernel_files_.end(), [&](const auto& k) {
      for (const fs::path* form : {&k.path, &k.resolved}) {
        if (!is_within(p, *form)) continue;
        const bool in_area =
            std::any_of(tool_areas_.begin(), tool_areas_.end(), [&](const auto& a) {
              return is_within(p, a.path) && is_within(a.path, *form) && a.path != *form;
            });
        if (!in_area) return true;
      }
      return false;
    });
  }

  // Read-only as a whole, or with git_writes everything that can name a program or a directory,
  // whether it exists yet or not (git_guard.hpp); each submodule gitdir guarded the same way.
  Result<void> protect_gitdir(MountPlan& plan, const fs::path& root, const fs::path& gitdir,
                              int depth) {
    if (depth > 4 || !visited_gitdirs_.insert(gitdir).second) return {};
    plan.pin_between(root, gitdir);
    if (auto common = git_commondir(gitdir)) {
      if (auto r = protect_named_gitdir(plan, *common); !r) return r;
    }
    if (!state_->profile.git_writes) return plan.read_only(gitdir, false);
    KERNEX_ASSIGN_OR_RETURN(const auto modules, guard_writable_gitdir(plan, gitdir));
    for (const auto& m : modules) {
      if (depth + 1 > 4) continue;  // deeper ones stay read-only whole, inside modules/
      // Inside a kernel file (a trusted skill's own .git): read-only whole. A writable bind below
      // would make its parents the overlay's, not the real tree's, and a layer could then shadow
      // the skill the kernel trusted (mount_plan.cpp, finish()).
      if (inside_kernel_file(m)) continue;
      KERNEX_RETURN_IF_ERROR(plan.writable(m));
      if (auto r = protect_gitdir(plan, root, m, depth + 1); !r) return r;
    }
    return {};
  }

  // W^X: nothing a sandboxed process can write is executable, unless a read-only bind keeps it.
  Result<void> check_write_xor_execute(const MountPlan& plan) const {
    for (const auto& e : grants_) {
      if ((e.rights & LANDLOCK_ACCESS_FS_EXECUTE) == 0) continue;
      for (const auto& w : writable_) {
        const bool inside = is_within(e.path, w);
        if (inside && plan.kept_read_only(e.path)) continue;
        if (!inside && !is_within(w, e.path)) continue;
        return fail(ErrorCode::Sandbox,
                    "refusing the executable grant '" + e.path.string() + "': it " +
                        (e.path == w ? "is"
                         : inside    ? "lies inside"
                                     : "contains") +
                        " the writable grant '" + w.string() +
                        "', so a sandboxed process could write what it then runs; keep it "
                        "read-only (keep_read_only) or grant it apart from writable paths");
      }
    }
    return {};
  }

  Result<void> build_env() {
    const SandboxProfile& p = state_->profile;
    auto& env = state_->env;
    std::string path;
    for (const auto& dir : p.search_path) {
      if (!path.empty()) path += ':';
      path += dir.string();
    }
    env.emplace_back("PATH", path);
    if (!state_->private_tmp.empty()) env.emplace_back("TMPDIR", state_->private_tmp.string());
    auto put = [&](const std::string& name, const std::string& value) {
      set_env(env, name, value);
    };
    auto copy = [&](const std::string& name, const char* field) -> Result<void> {
      if (!valid_env_name(name))
        return fail(ErrorCode::Config,
                    std::string("sandbox.env.") + field + ": invalid name '" + name + "'");
      if (is_hijacking_env_name(name)) {
        return fail(ErrorCode::Sandbox, std::string("sandbox.env.") + field +
                                            ": refusing to pass '" + name +
                                            "': it can change what the sandboxed command executes");
      }
      if (const char* v = std::getenv(name.c_str())) put(name, v);
      return {};
    };
    for (const auto& name : p.env.base) {
      if (auto r = copy(name, "base"); !r) return r;
    }
    if (p.env.pass_locale) {
      for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
        std::string_view kv(*e);
        auto eq = kv.find('=');
        if (kv.starts_with("LC_") && eq != std::string_view::npos)
          put(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
      }
    }
    for (const auto& name : p.env.passthrough) {
      if (auto r = copy(name, "passthrough"); !r) return r;
    }
    for (const auto& [name, value] : p.env.set) {
      if (!valid_env_name(name))
        return fail(ErrorCode::Config, "sandbox.env.set: invalid name '" + name + "'");
      if (is_hijacking_env_name(name)) {
        return fail(ErrorCode::Sandbox, "sandbox.env.set: refusing to set '" + name +
                                            "': it can change what the sandboxed command executes");
      }
      if (value.find('\0') != std::string::npos)
        return fail(ErrorCode::Config, "sandbox.env.set." + name + ": contains NUL");
      put(name, value);
    }
    if (p.env.malloc_huge_pages) put("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1");
    return {};
  }

  Result<void> choose_working_dir() {
    const SandboxProfile& p = state_->profile;
    fs::path dir = p.working_dir ? *p.working_dir
                   : p.workspace ? *p.workspace
                                 : state_->private_tmp;
    if (dir.empty()) dir = "/";
    std::error_code ec;
    state_->working_dir = fs::canonical(dir, ec);
    if (ec || !fs::is_directory(state_->working_dir)) {
      return fail(ErrorCode::Config,
                  "sandbox.working_dir: '" + dir.string() + "' is not a directory");
    }
    return {};
  }

  // A PID namespace per spawn where the kernel may make one; limits.processes (256 by default) as a
  // pids cgroup, else RLIMIT_NPROC, which Linux doesn't apply to uid 0: refused there, naming
  // what's missing.
  Result<void> prepare_process_limits() {
    const SandboxProfile& p = state_->profile;
    PolicyStatus& st = state_->status;
    st.pid_namespace = detail::pid_namespaces_available();
    if (!st.pid_namespace) {
      st.warnings.push_back(
          "no PID namespace per spawn (it needs CAP_SYS_ADMIN; run the kernel as root): a process "
          "a command starts in the background can outlive a kernel that is killed");
    }
    if (!p.limits.processes) return {};
    state_->pids_cgroup = find_pids_cgroup_base();
    if (state_->pids_cgroup) {
      st.process_limit = "pids cgroup " + state_->pids_cgroup->string();
      return {};
    }
    const bool root = ::getuid() == 0 || ::geteuid() == 0;
    if (root && p.enforce) {
      return fail(ErrorCode::Sandbox, "limits.processes (" + std::to_string(*p.limits.processes) +
                                          ") can't be enforced: Linux exempts uid 0 from "
                                          "RLIMIT_NPROC and no writable pids cgroup was "
                                          "found (mount the cgroup v1 pids controller, or enable "
                                          "pids in the cgroup.subtree_control of "
                                          "this process's cgroup v2 parent)");
    }
    st.process_limit = "RLIMIT_NPROC";
    st.warnings.push_back(
        "limits.processes is RLIMIT_NPROC: no writable pids cgroup was found, so it counts every "
        "process of uid " +
        std::to_string(::getuid()) + ", not only the sandbox's");
    return {};
  }

  // With an overlay the namespace comes first: the Landlock rules of the workspace and the grants
  // inside it must name the overlay's inodes, so those paths are opened inside the namespace.
  Result<void> build_overlay_namespace() {
    const fs::path& ws = *state_->profile.workspace;
    std::vector<fs::path> inside;
    std::vector<std::size_t> which;
    for (std::size_t i = 0; i < grants_.size(); ++i) {
      if (!is_within(grants_[i].path, ws)) continue;
      inside.push_back(grants_[i].path);
      which.push_back(i);
    }
    std::vector<int> fds;
    if (auto r = build_mount_namespace(*state_, inside, &fds); !r) {
      return fail(ErrorCode::Sandbox,
                  "the workspace overlay over '" + ws.string() +
                      "' cannot be mounted (overlayfs in a private mount namespace, in a user "
                      "namespace when not root)",
                  r.error());
    }
    const auto missing = std::find(fds.begin(), fds.end(), -1);
    if (missing != fds.end()) {
      const fs::path& path = inside[static_cast<std::size_t>(missing - fds.begin())];
      for (int fd : fds) {
        if (fd >= 0) ::close(fd);
      }
      return fail(ErrorCode::Sandbox, "cannot open '" + path.string() +
                                          "' inside the workspace overlay for a Landlock rule");
    }
    for (std::size_t k = 0; k < which.size(); ++k) grants_[which[k]].fd = fds[k];
    return {};
  }

  Result<void> prepare_enforcement() {
    SandboxProfile& p = state_->profile;
    PolicyStatus& st = state_->status;
    st.landlock_abi = landlock_abi();
    if (auto r = prepare_process_limits(); !r) return r;
    if (!p.enforce) {
      st.warnings.push_back(
          "enforcement disabled by the profile (enforce: false): commands run unsandboxed");
      return {};
    }
    if (st.landlock_abi < 1) {
      return fail(ErrorCode::Sandbox,
                  "Landlock is not available on this kernel (landlock_create_ruleset reports no "
                  "ABI); refusing to "
                  "spawn without it. Set sandbox.enforce: false to run unsandboxed");
    }
    if (!p.network.tcp_connect_ports.empty() && st.landlock_abi < 4) {
      return fail(
          ErrorCode::Sandbox,
          "network.tcp_connect needs Landlock ABI 4 (TCP port rules); this kernel has ABI " +
              std::to_string(st.landlock_abi));
    }
    if (p.workspace_overlay) {
      KERNEX_RETURN_IF_ERROR(build_overlay_namespace());
    }
    auto ruleset = build_landlock_ruleset(st.landlock_abi, grants_, p.network);
    for (auto& g : grants_) {
      if (g.fd >= 0) ::close(std::exchange(g.fd, -1));
    }
    if (!ruleset) return std::unexpected(ruleset.error());
    state_->landlock_fd = *ruleset;
    KERNEX_ASSIGN_OR_RETURN(auto bpf, build_seccomp_filter(p, st));
    state_->seccomp_bpf = std::move(bpf);
    // Every enforced policy gets its namespace, for the read-only root if for nothing else. Without
    // anything to keep inside a grant, a kernel that can't make one still sandboxes (with a
    // warning).
    if (!p.workspace_overlay) {
      if (auto r = build_mount_namespace(*state_); !r) {
        if (!state_->protected_mounts.empty()) return r;
        st.warnings.push_back(r.error().describe());
      }
    }
    st.enforced = true;
    st.filesystem = true;
    st.seccomp = true;
    st.tcp = st.landlock_abi >= 4;
    st.signal_scope = st.abstract_unix_scope = st.landlock_abi >= 6;
    if (!st.signal_scope) {
      st.warnings.push_back("Landlock ABI " + std::to_string(st.landlock_abi) +
                            " has no signal scoping (needs 6): sandboxed commands can signal "
                            "processes of the same user");
    }
    for (const auto& w : st.warnings) kernex::log(LogLevel::Debug, "sandbox: " + w);
    return {};
  }

  std::shared_ptr<Policy::State> state_;
  std::vector<fs::path> protected_;
  std::vector<ResolvedKernelFile> kernel_files_;
  std::vector<ToolArea> tool_areas_;  // canonical
  struct AreaGrant {
    fs::path grant;        // canonical
    fs::path kernel_file;  // the kernel file it lies inside (resolved)
    std::string why;       // the tool area's
  };
  std::vector<AreaGrant> area_grants_;  // grants let inside a kernel file by a tool area
  std::vector<LandlockGrant> grants_;
  std::vector<fs::path> writable_;  // grants with write rights, canonical
  std::set<fs::path> visited_gitdirs_;
};

}  // namespace

Result<Policy> PolicyBuilder::Build() const { return Builder(profile_).build(); }

}  // namespace kernex::sandbox
