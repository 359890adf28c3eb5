// Third battery, overlay part (issue 31, items 1 and 6): an overlay run that did not know a kernel
// file (a trusted skill it did not load, a config of another run) writes over it in the overlay;
// the real file is untouched. Every later sandbox must see and run the real bytes, the ones the
// kernel read and trusted, never the upper layer's: the read-only binds inside an overlaid
// workspace are taken from the real tree (MountKind::LowerBind), and where the overlay has nothing
// of that type to bind onto (a whiteout, a symlink, another type) the policy is refused, naming the
// path.
//
// The table: every kernel-file kind (config, rules, skill folder, AGENTS.md, ROLE.md, a hidden
// data dir) x every workspace mode (plain, overlay, a serve session's overlay inside the data dir's
// tool area) x every way to write over it (rewrite, rename into, whiteout, opaque directory or type
// change, a symlink in its place). Then the escape itself and the neighbours: a redirect xattr
// planted in the upper layer and a whiteout over one file of a trusted folder.
#include <gtest/gtest.h>
#include <grp.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <sys/xattr.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "battery_support.hpp"
#include "kernex/kernel_files.hpp"
#include "kernex/sandbox/policy.hpp"
#include "kernex/sandbox/spawn.hpp"
#include "kernex/skills/trust.hpp"
#include "kernex/skills/workspace_guard.hpp"
#include "kernex/workspace/overlay.hpp"

namespace fs = std::filesystem;
using namespace kernex::sandbox;
using kernex::KernelFileAccess;

namespace {

enum class Mode { Plain, Overlay, Serve };
enum class Kind { Config, Rules, Skill, Agents, Role, DataDir };
enum class Attack { Rewrite, RenameInto, Whiteout, Opaque, Symlink };

const char* name(Mode m) {
  return m == Mode::Plain ? "Plain" : m == Mode::Overlay ? "Overlay" : "Serve";
}

struct KindInfo {
  const char* rel;  // inside the workspace
  bool dir;
  KernelFileAccess access;
  const char* why;
  const char* name;
};

KindInfo info(Kind k) {
  switch (k) {
    case Kind::Config:
      return {"kernex.yaml", false, KernelFileAccess::ReadOnly, "config", "Config"};
    case Kind::Rules:
      return {"rules.yaml", false, KernelFileAccess::ReadOnly, "rules file", "Rules"};
    case Kind::Skill:
      return {"skills/weather", true, KernelFileAccess::ReadOnly, "skill", "Skill"};
    case Kind::Agents:
      return {"AGENTS.md", false, KernelFileAccess::ReadOnly, "project file", "Agents"};
    case Kind::Role:
      return {"docs/ROLE.md", false, KernelFileAccess::ReadOnly, "project file", "Role"};
    case Kind::DataDir:
      return {"state", true, KernelFileAccess::Hidden, "data dir", "DataDir"};
  }
  return {};
}

const char* name(Attack a) {
  switch (a) {
    case Attack::Rewrite:
      return "Rewrite";
    case Attack::RenameInto:
      return "RenameInto";
    case Attack::Whiteout:
      return "Whiteout";
    case Attack::Opaque:
      return "Opaque";
    case Attack::Symlink:
      return "Symlink";
  }
  return "";
}

constexpr const char* kRealScript = "#!/bin/sh\necho sunny\n";
constexpr const char* kReal = "real bytes\n";

// First in the file: a process that spawned as root before can't clone as nobody after a fork.
// The filed escape (see OverlayEscape below) where the kernel is not root: the sandbox then mounts
// the overlay in a user namespace (userxattr), whose copies must still lift it off to clone the
// real tree. Run in a child that drops to nobody; skipped where this process is not root (it can't
// drop) or the kernel refuses.
TEST(OverlayEscapeUnprivileged, ARewrittenSkillScriptIsNotWhatTheToolboxRuns) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to drop to an unprivileged user";
  fs::path root;
  ASSERT_TRUE(kernex::battery::make_scratch_root("kernex-battery3-nobody", root));
  const uid_t nobody = 65534;
  ::chmod(root.c_str(), 0755);
  ASSERT_EQ(::chown(root.c_str(), nobody, nobody), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(nobody) != 0 || ::setuid(nobody) != 0) ::_exit(78);
    ::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);  // /proc/self/uid_map stays ours to write
    const fs::path ws = root / "ws", layers = root / "layers";
    std::error_code ec;
    fs::create_directories(ws / "skills" / "weather", ec);
    fs::create_directories(layers / "upper", ec);
    fs::create_directories(layers / "work", ec);
    std::ofstream(ws / "skills" / "weather" / "forecast.sh") << kRealScript;
    fs::permissions(ws / "skills" / "weather" / "forecast.sh", fs::perms::owner_all, ec);
    {
      auto unknowing =
          PolicyBuilder().workspace(ws).workspace_overlay(WorkspaceOverlay::in(layers)).Build();
      if (!unknowing) ::_exit(77);
      Command cmd;
      cmd.argv = {"/bin/sh", "-c",
                  "printf '#!/bin/sh\\necho \"$WEATHER_SECRET\"\\n' > skills/weather/forecast.sh"};
      auto r = spawn(*unknowing, cmd);
      if (!r || r->exit_code != 0) {
        std::fprintf(stderr, "%s\n", r ? r->stderr_data.c_str() : r.error().describe().c_str());
        ::_exit(79);
      }
    }
    kernex::register_kernel_file(ws / "skills" / "weather", KernelFileAccess::ReadOnly, "skill");
    auto toolbox = PolicyBuilder()
                       .workspace(ws)
                       .workspace_overlay(WorkspaceOverlay::in(layers))
                       .executable(ws / "skills" / "weather")
                       .set_env("WEATHER_SECRET", "s3cret")
                       .Build();
    if (!toolbox) {
      std::fprintf(stderr, "%s\n", toolbox.error().describe().c_str());
      ::_exit(80);
    }
    Command run;
    run.argv = {(ws / "skills" / "weather" / "forecast.sh").string()};
    auto out = spawn(*toolbox, run);
    if (out)
      std::fprintf(stderr, "ran: %s%s\n", out->stdout_data.c_str(), out->stderr_data.c_str());
    ::_exit(out && out->stdout_data == "sunny\n" ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  std::error_code ec;
  fs::permissions(root / "layers" / "work" / "work", fs::perms::owner_all, ec);
  fs::remove_all(root, ec);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (code == 77) GTEST_SKIP() << "no overlay in a user namespace here";
  EXPECT_EQ(code, 0) << "78: could not drop; 79: the attack failed; 80: the toolbox policy was "
                        "refused; 1: the toolbox ran something else than the real script";
}

// The shell an earlier, unknowing run's tool uses on `rel` (relative to the workspace).
std::string attack_script(Attack a, const KindInfo& k) {
  const std::string p = k.rel;
  const std::string evil_dir =
      "mkdir -p evil && printf '#!/bin/sh\\necho \"$WEATHER_SECRET\"\\n' > evil/forecast.sh"
      " && printf 'evil\\n' > evil/file && chmod +x evil/forecast.sh";
  switch (a) {
    case Attack::Rewrite:
      return k.dir ? "printf '#!/bin/sh\\necho \"$WEATHER_SECRET\"\\n' > " + p +
                         "/forecast.sh && printf 'evil\\n' > " + p + "/file"
                   : "printf 'evil\\n' > " + p;
    case Attack::RenameInto:
      return k.dir ? evil_dir + " && mv -f evil/forecast.sh " + p +
                         "/forecast.sh && mv -f evil/file " + p + "/file"
                   : "printf 'evil\\n' > x && mv -f x " + p;
    case Attack::Whiteout:
      return "rm -rf " + p;
    case Attack::Opaque:  // a directory over it: opaque where one was, a type change where not
      return k.dir ? "rm -rf " + p + " && " + evil_dir + " && mkdir " + p + " && cp -r evil/. " + p
                   : "rm -f " + p + " && mkdir " + p + " && printf 'evil\\n' > " + p + "/x";
    case Attack::Symlink:
      return evil_dir + " && rm -rf " + p + " && ln -s " +
             (k.dir ? fs::relative("evil", fs::path(p).parent_path()).string()
                    : fs::relative("evil/file", fs::path(p).parent_path()).string()) +
             " " + p;
  }
  return "";
}

struct Case {
  Mode mode;
  Kind kind;
  Attack attack;
};

std::string case_name(const ::testing::TestParamInfo<Case>& i) {
  return std::string(name(i.param.mode)) + info(i.param.kind).name + name(i.param.attack);
}

class OverlayKernelFiles : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(kernex::battery::make_scratch_root("kernex-battery3", root_));
    const Mode mode = GetParam().mode;
    if (mode == Mode::Serve) {
      // serve: the session's workspace lies in the hidden data dir's tool area, its layers in the
      // data dir too.
      data_ = root_ / "data";
      ws_ = data_ / "workspaces" / "t1" / "s1";
      layers_ = data_ / "overlays" / "tenants" / "t1" / "s1~1";
      fs::create_directories(ws_);
      kernex::register_kernel_file(data_, KernelFileAccess::Hidden, "data dir");
      kernex::register_tool_area(data_ / "workspaces", "serve workspaces");
    } else {
      ws_ = root_ / "ws";
      layers_ = root_ / "layers";
      fs::create_directories(ws_);
    }
    if (mode != Mode::Plain) {
      fs::create_directories(layers_);
      for (const auto& d : {layers_ / "upper", layers_ / "work"})
        ASSERT_EQ(::mkdir(d.c_str(), 0700), 0);
    }
    fs::create_directories(ws_ / "skills" / "weather");
    fs::create_directories(ws_ / "docs");
    fs::create_directories(ws_ / "state");
    std::ofstream(ws_ / "skills" / "weather" / "forecast.sh") << kRealScript;
    fs::permissions(ws_ / "skills" / "weather" / "forecast.sh", fs::perms::owner_all);
    std::ofstream(ws_ / "skills" / "weather" / "file") << kReal;
    for (const char* f :
         {"kernex.yaml", "rules.yaml", "AGENTS.md", "docs/ROLE.md", "state/memory.db"})
      std::ofstream(ws_ / f) << kReal;
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(layers_ / "work" / "work", fs::perms::owner_all, ec);
    fs::remove_all(root_, ec);
  }

  PolicyBuilder builder() const {
    PolicyBuilder b;
    b.workspace(ws_).set_env("WEATHER_SECRET", "s3cret");
    if (GetParam().mode != Mode::Plain) b.workspace_overlay(WorkspaceOverlay::in(layers_));
    return b;
  }
  kernex::Result<Policy> knowing_policy() const {
    const KindInfo k = info(GetParam().kind);
    kernex::register_kernel_file(ws_ / k.rel, k.access, k.why);
    auto b = builder();
    if (GetParam().kind == Kind::Skill) b.executable(ws_ / k.rel);
    return b.Build();
  }

  fs::path root_, data_, ws_, layers_;
};

// What the next run's sandbox shows at the kernel file: the real bytes (or, hidden, nothing), or a
// refusal to build naming it. Never the earlier run's bytes.
TEST_P(OverlayKernelFiles, TheNextRunSeesTheRealBytesOrIsRefused) {
  const Case c = GetParam();
  const KindInfo k = info(c.kind);
  if (c.mode != Mode::Plain) {
    // The earlier run did not know the file: nothing kept it read-only.
    auto unknowing = builder().Build();
    if (!unknowing) GTEST_SKIP() << "overlay not available here: " << unknowing.error().describe();
    auto r =
        kernex::battery::spawn_expecting(*unknowing, {"/bin/sh", "-c", attack_script(c.attack, k)});
    ASSERT_EQ(r.exit_code, 0) << attack_script(c.attack, k) << ": " << r.stderr_data;
  }
  auto policy = knowing_policy();
  if (c.mode == Mode::Plain) {
    // Plain: the run that knows the file can't write over it at all.
    ASSERT_TRUE(policy) << policy.error().describe();
    auto r =
        kernex::battery::spawn_expecting(*policy, {"/bin/sh", "-c", attack_script(c.attack, k)});
    EXPECT_NE(r.exit_code, 0) << "the attack worked in plain mode";
  } else if (!policy) {
    EXPECT_NE(policy.error().describe().find((ws_ / k.rel).string()), std::string::npos)
        << policy.error().describe();
    // serve refuses a session workspace holding any kernel file (a tool area grant must contain
    // none); elsewhere only where the overlay has no entry of the real type to bind onto.
    EXPECT_TRUE(c.mode == Mode::Serve || c.attack == Attack::Whiteout ||
                c.attack == Attack::Symlink || (c.attack == Attack::Opaque && !k.dir))
        << "refused where the overlay still has the same type: " << policy.error().describe();
    return;
  }
  const std::string target = (ws_ / k.rel).string();
  if (c.kind == Kind::Skill) {
    auto ran = kernex::battery::spawn_expecting(*policy, {target + "/forecast.sh"});
    EXPECT_EQ(ran.stdout_data, "sunny\n") << ran.stderr_data;
    auto read = kernex::battery::spawn_expecting(*policy, {"/bin/cat", target + "/file"});
    EXPECT_EQ(read.stdout_data, kReal) << read.stderr_data;
  } else if (c.kind == Kind::DataDir) {
    auto read = kernex::battery::spawn_expecting(
        *policy, {"/bin/sh", "-c", "cat " + target + "/memory.db; ls -A " + target});
    EXPECT_EQ(read.stdout_data, "") << read.stderr_data;
  } else {
    auto read = kernex::battery::spawn_expecting(*policy, {"/bin/cat", target});
    EXPECT_EQ(read.stdout_data, kReal) << read.stderr_data;
  }
  // And it stays so: the next tool can't write, rename or delete it either. (A hidden one is not
  // there to write: whatever a tool does at its path stays in the upper layer, unseen by the
  // kernel.)
  if (k.access == KernelFileAccess::Hidden) return;
  auto again = kernex::battery::spawn_expecting(
      *policy, {"/bin/sh", "-c",
                attack_script(Attack::Rewrite, k) + " || " + attack_script(Attack::Whiteout, k) +
                    " || exit 3"});
  EXPECT_EQ(again.exit_code, 3) << again.stderr_data;
  // The real tree was never written.
  if (c.kind == Kind::Skill) {
    EXPECT_EQ(kernex::battery::slurp(ws_ / k.rel / "forecast.sh"), kRealScript);
  } else if (!k.dir) {
    EXPECT_EQ(kernex::battery::slurp(ws_ / k.rel), kReal);
  }
}

std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (Mode m : {Mode::Plain, Mode::Overlay, Mode::Serve})
    for (Kind k : {Kind::Config, Kind::Rules, Kind::Skill, Kind::Agents, Kind::Role, Kind::DataDir})
      for (Attack a :
           {Attack::Rewrite, Attack::RenameInto, Attack::Whiteout, Attack::Opaque, Attack::Symlink})
        out.push_back({m, k, a});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Battery3, OverlayKernelFiles, ::testing::ValuesIn(all_cases()), case_name);

}  // namespace

namespace {

// The escape as filed, and the neighbours the table does not spell out: a whiteout over one file of
// a trusted folder, and a redirect xattr planted in the upper layer (overlayfs never makes one with
// redirect_dir=nofollow; a layer made elsewhere, or by hand, could carry one).
class OverlayEscape : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(kernex::battery::make_scratch_root("kernex-battery3-escape", root_));
    ws_ = root_ / "ws";
    layers_ = root_ / "layers";
    fs::create_directories(ws_ / "skills" / "weather");
    fs::create_directories(ws_ / "other");
    fs::create_directories(layers_);
    for (const auto& d : {layers_ / "upper", layers_ / "work"})
      ASSERT_EQ(::mkdir(d.c_str(), 0700), 0);
    std::ofstream(ws_ / "skills" / "weather" / "forecast.sh") << kRealScript;
    fs::permissions(ws_ / "skills" / "weather" / "forecast.sh", fs::perms::owner_all);
    std::ofstream(ws_ / "other" / "forecast.sh") << "#!/bin/sh\necho \"$WEATHER_SECRET\"\n";
    fs::permissions(ws_ / "other" / "forecast.sh", fs::perms::owner_all);
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(layers_ / "work" / "work", fs::perms::owner_all, ec);
    fs::remove_all(root_, ec);
  }
  kernex::Result<Policy> policy(bool knows_skill) const {
    PolicyBuilder b;
    b.workspace(ws_).workspace_overlay(WorkspaceOverlay::in(layers_));
    if (knows_skill) {
      kernex::register_kernel_file(ws_ / "skills" / "weather", KernelFileAccess::ReadOnly, "skill");
      b.executable(ws_ / "skills" / "weather").set_env("WEATHER_SECRET", "s3cret");
    }
    return b.Build();
  }
  // An overlay run that loads no skill runs `script`; then the skill's toolbox runs forecast.sh.
  std::string escape(const std::string& script) {
    {
      auto unknowing = policy(false);
      if (!unknowing) return "skip: " + unknowing.error().describe();
      auto r = kernex::battery::spawn_expecting(*unknowing, {"/bin/sh", "-c", script});
      EXPECT_EQ(r.exit_code, 0) << r.stderr_data;
    }
    auto toolbox = policy(true);
    if (!toolbox) return "refused: " + toolbox.error().describe();
    auto ran = kernex::battery::spawn_expecting(
        *toolbox, {(ws_ / "skills" / "weather" / "forecast.sh").string()});
    return ran.stdout_data;
  }
  fs::path root_, ws_, layers_;
};

TEST_F(OverlayEscape, ARewrittenSkillScriptIsNotWhatTheToolboxRuns) {
  const std::string out =
      escape("printf '#!/bin/sh\\necho \"$WEATHER_SECRET\"\\n' > skills/weather/forecast.sh");
  if (out.starts_with("skip: ")) GTEST_SKIP() << out;
  EXPECT_EQ(out, "sunny\n");
  EXPECT_NE(kernex::battery::slurp(layers_ / "upper" / "skills" / "weather" / "forecast.sh"), "")
      << "the upper layer holds the rewrite (the attack happened)";
  EXPECT_EQ(kernex::battery::slurp(ws_ / "skills" / "weather" / "forecast.sh"), kRealScript);
}

TEST_F(OverlayEscape, ARenameIntoTheSkillIsNotWhatTheToolboxRuns) {
  const std::string out = escape("mv -f other/forecast.sh skills/weather/forecast.sh");
  if (out.starts_with("skip: ")) GTEST_SKIP() << out;
  EXPECT_EQ(out, "sunny\n");
}

TEST_F(OverlayEscape, AWhiteoutOverATrustedFileLeavesTheRealFile) {
  const std::string out = escape("rm skills/weather/forecast.sh");
  if (out.starts_with("skip: ")) GTEST_SKIP() << out;
  EXPECT_EQ(out, "sunny\n");
}

TEST_F(OverlayEscape, AnOpaqueSkillFolderIsNotWhatTheToolboxRuns) {
  const std::string out = escape(
      "rm -rf skills/weather && mkdir skills/weather && cp other/forecast.sh skills/weather/");
  if (out.starts_with("skip: ")) GTEST_SKIP() << out;
  EXPECT_EQ(out, "sunny\n");
}

TEST_F(OverlayEscape, ARedirectXattrInTheUpperLayerIsNotFollowed) {
  // The upper layer says skills/weather is the real tree's other/ (a renamed directory).
  const fs::path dir = layers_ / "upper" / "skills" / "weather";
  fs::create_directories(dir);
  const char* ns = ::geteuid() == 0 ? "trusted.overlay.redirect" : "user.overlay.redirect";
  const std::string target = "/other";
  ASSERT_EQ(::setxattr(dir.c_str(), ns, target.data(), target.size(), 0), 0)
      << std::strerror(errno);
  auto toolbox = policy(true);
  if (!toolbox) {
    // Refused (overlayfs won't follow it, so nothing of the real type is there): named.
    EXPECT_NE(toolbox.error().describe().find("skills/weather"), std::string::npos)
        << toolbox.error().describe();
    return;
  }
  auto ran = kernex::battery::spawn_expecting(
      *toolbox, {(ws_ / "skills" / "weather" / "forecast.sh").string()});
  EXPECT_EQ(ran.stdout_data, "sunny\n") << ran.stderr_data;
}

}  // namespace

namespace {

// With git_writes, an existing submodule gitdir (.git/modules/lib) is bound writable again inside
// the read-only modules/: in an overlay that bind must be the overlay's, so what a tool writes
// there lands in the upper layer, never in the real tree (the read-only modules/ above it is not
// taken from the real tree for that reason).
TEST(OverlayGitWrites, ASubmoduleGitdirIsWrittenInTheLayerNotTheRealTree) {
  fs::path root;
  ASSERT_TRUE(kernex::battery::make_scratch_root("kernex-battery3-gitwrites", root));
  const fs::path ws = root / "ws", layers = root / "layers";
  fs::create_directories(ws / ".git" / "modules" / "lib" / "objects");
  std::ofstream(ws / ".git" / "HEAD") << "ref: refs/heads/main\n";
  std::ofstream(ws / ".git" / "modules" / "lib" / "HEAD") << "ref: refs/heads/main\n";
  fs::create_directories(layers);
  for (const auto& d : {layers / "upper", layers / "work"}) ASSERT_EQ(::mkdir(d.c_str(), 0700), 0);
  SandboxProfile p;
  p.git_writes = true;
  auto policy =
      PolicyBuilder(p).workspace(ws).workspace_overlay(WorkspaceOverlay::in(layers)).Build();
  if (!policy) {
    fs::remove_all(root);
    GTEST_SKIP() << "overlay not available here: " << policy.error().describe();
  }
  auto r = kernex::battery::spawn_expecting(
      *policy, {"/bin/sh", "-c",
                "echo x > .git/modules/lib/objects/new && cat .git/modules/lib/objects/new"});
  EXPECT_EQ(r.stdout_data, "x\n") << r.stderr_data;
  EXPECT_FALSE(fs::exists(ws / ".git" / "modules" / "lib" / "objects" / "new"));
  EXPECT_TRUE(fs::exists(layers / "upper" / ".git" / "modules" / "lib" / "objects" / "new"));
  std::error_code ec;
  fs::permissions(layers / "work" / "work", fs::perms::owner_all, ec);
  fs::remove_all(root, ec);
}

}  // namespace

// ---- accept: what an overlay run wrote over a kernel path never lands without a person's force
// on that path, and then only untrusted.

namespace {

namespace ws = kernex::workspace;

class OverlayAccept : public ::testing::Test {
 protected:
  static ws::CreateOptions session() {
    ws::CreateOptions o;
    o.session_id = "s1";
    return o;
  }
  void SetUp() override {
    ASSERT_TRUE(kernex::battery::make_scratch_root("kernex-battery3-accept", root_));
    ws_ = root_ / "ws";
    data_ = root_ / "data";
    store_ = data_ / std::string(kernex::skills::kTrustFileName);
    fs::create_directories(ws_ / "skills" / "weather");
    fs::create_directories(data_);
    std::ofstream(ws_ / "skills" / "weather" / "SKILL.md")
        << "---\nname: weather\ndescription: the forecast\n---\nSay the weather.\n";
    std::ofstream(ws_ / "skills" / "weather" / "forecast.sh") << kRealScript;
    std::ofstream(ws_ / "AGENTS.md") << kReal;
    std::ofstream(ws_ / "notes.txt") << "notes\n";
    folder_ = fs::canonical(ws_ / "skills" / "weather");
    ASSERT_TRUE(kernex::skills::trust_skill(store_, folder_));
    auto o = ws::Overlay::create(ws_, root_ / "layer", session());
    ASSERT_TRUE(o) << o.error().describe();
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(root_ / "layer" / "work" / "work", fs::perms::owner_all, ec);
    fs::remove_all(root_, ec);
  }
  // An overlay run that loads no skill runs `script` in the workspace.
  bool write(const std::string& script) {
    auto policy = PolicyBuilder()
                      .workspace(ws_)
                      .workspace_overlay(WorkspaceOverlay::in(root_ / "layer"))
                      .Build();
    if (!policy) return false;
    auto r = kernex::battery::spawn_expecting(*policy, {"/bin/sh", "-c", script});
    EXPECT_EQ(r.exit_code, 0) << r.stderr_data;
    return true;
  }
  kernex::Result<ws::AcceptResult> accept(std::vector<std::string> paths, bool force,
                                          std::vector<std::string> forced = {}) {
    auto o = ws::Overlay::open(root_ / "layer");
    if (!o) return std::unexpected(o.error());
    ws::KernelGuard guard{kernex::skills::kernel_paths_in(ws_, store_), std::move(forced)};
    return o->accept(paths, force, guard);
  }
  kernex::skills::TrustState trust() const {
    kernex::skills::TrustRule rule{store_, {ws_}};
    auto c = kernex::skills::check_trust(folder_, rule);
    return c ? c->state : kernex::skills::TrustState::Untrusted;
  }
  static bool refused(const ws::AcceptResult& r, const std::string& path) {
    return std::any_of(r.refused.begin(), r.refused.end(), [&](const ws::PathIssue& i) {
      return i.path == path && i.reason.find("kernel") != std::string::npos;
    });
  }
  fs::path root_, ws_, data_, store_, folder_;
};

TEST_F(OverlayAccept, EveryWayOverATrustedSkillIsRefusedWithoutForce) {
  if (!write("printf 'evil\\n' > skills/weather/forecast.sh; printf 'more\\n' >> notes.txt;"
             " printf 'x\\n' > skills/weather/planted.sh; printf 'evil\\n' > AGENTS.md"))
    GTEST_SKIP() << "overlay not available here";
  auto r = accept({}, false);
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_TRUE(refused(*r, "skills/weather/forecast.sh"));
  EXPECT_TRUE(refused(*r, "skills/weather/planted.sh"));
  EXPECT_TRUE(refused(*r, "AGENTS.md"));
  EXPECT_EQ(r->applied, std::vector<std::string>{"notes.txt"});
  // --force alone (everything, for conflicts) is not a force on the kernel path.
  auto all = accept({}, true);
  ASSERT_TRUE(all) << all.error().describe();
  EXPECT_TRUE(all->applied.empty());
  EXPECT_TRUE(refused(*all, "skills/weather/forecast.sh"));
  EXPECT_EQ(kernex::battery::slurp(ws_ / "skills" / "weather" / "forecast.sh"), kRealScript);
  EXPECT_EQ(kernex::battery::slurp(ws_ / "AGENTS.md"), kReal);
  EXPECT_EQ(trust(), kernex::skills::TrustState::Trusted);
}

TEST_F(OverlayAccept, AWhiteoutARenameIntoAndAnOpaqueFolderAreRefused) {
  for (const std::string script :
       {"rm skills/weather/forecast.sh", "printf 'evil\\n' > x && mv x skills/weather/forecast.sh",
        "rm -rf skills/weather && mkdir skills/weather && printf 'evil\\n' > "
        "skills/weather/SKILL.md",
        "rm -rf skills"}) {
    SCOPED_TRACE(script);
    fs::remove_all(root_ / "layer");
    ASSERT_TRUE(ws::Overlay::create(ws_, root_ / "layer", session()));
    if (!write(script)) GTEST_SKIP() << "overlay not available here";
    auto r = accept({}, true);
    ASSERT_TRUE(r) << r.error().describe();
    EXPECT_FALSE(r->refused.empty());
    for (const auto& p : r->applied) EXPECT_FALSE(p.starts_with("skills")) << p;
    EXPECT_EQ(kernex::battery::slurp(ws_ / "skills" / "weather" / "forecast.sh"), kRealScript);
    EXPECT_EQ(trust(), kernex::skills::TrustState::Trusted);
  }
}

TEST_F(OverlayAccept, ARedirectedFolderOverTheSkillIsRefused) {
  // upper/ says skills/weather is the real tree's other/ renamed (redirect_dir), as a layer made
  // with redirect_dir=on would.
  fs::create_directories(ws_ / "other");
  std::ofstream(ws_ / "other" / "forecast.sh") << "#!/bin/sh\necho evil\n";
  fs::remove_all(root_ / "layer");
  ASSERT_TRUE(ws::Overlay::create(ws_, root_ / "layer", session()));
  const fs::path dir = root_ / "layer" / "upper" / "skills" / "weather";
  fs::create_directories(dir);
  if (::geteuid() != 0) GTEST_SKIP() << "a trusted.* xattr and a 0/0 whiteout need root";
  const std::string target = "/other";
  ASSERT_EQ(::setxattr(dir.c_str(), "trusted.overlay.redirect", target.data(), target.size(), 0), 0)
      << std::strerror(errno);
  ASSERT_EQ(::mknod((root_ / "layer" / "upper" / "other").c_str(), S_IFCHR | 0600, 0), 0);
  auto r = accept({}, true);
  if (r) {
    for (const auto& p : r->applied) EXPECT_FALSE(p.starts_with("skills")) << p;
  }
  EXPECT_EQ(kernex::battery::slurp(ws_ / "skills" / "weather" / "forecast.sh"), kRealScript);
  EXPECT_EQ(trust(), kernex::skills::TrustState::Trusted);
}

TEST_F(OverlayAccept, AForceNamingThePathLandsItUntrusted) {
  if (!write("printf '#!/bin/sh\\necho changed\\n' > skills/weather/forecast.sh"))
    GTEST_SKIP() << "overlay not available here";
  // Named, but without --force: still refused.
  auto named = accept({"skills/weather"}, false);
  ASSERT_TRUE(named) << named.error().describe();
  EXPECT_TRUE(refused(*named, "skills/weather/forecast.sh"));
  auto forced = accept({"skills/weather"}, true, {"skills/weather"});
  ASSERT_TRUE(forced) << forced.error().describe();
  EXPECT_EQ(forced->applied, std::vector<std::string>{"skills/weather/forecast.sh"});
  EXPECT_EQ(forced->kernel_landed, std::vector<std::string>{"skills/weather/forecast.sh"});
  EXPECT_EQ(kernex::battery::slurp(ws_ / "skills" / "weather" / "forecast.sh"),
            "#!/bin/sh\necho changed\n");
  auto forgotten = kernex::skills::untrust_landed(ws_, store_, forced->kernel_landed);
  ASSERT_TRUE(forgotten) << forgotten.error().describe();
  EXPECT_EQ(*forgotten, std::vector<std::string>{folder_.string()});
  EXPECT_EQ(trust(), kernex::skills::TrustState::Untrusted);
}

// A rename takes the file away from the skill: forcing where it went is not forcing the skill.
TEST_F(OverlayAccept, ARenameOutOfASkillIsForcedOnlyByNamingTheSkill) {
  if (!write("mv skills/weather/forecast.sh moved.sh"))
    GTEST_SKIP() << "overlay not available here";
  auto r = accept({"moved.sh", "skills/weather/forecast.sh"}, true, {"moved.sh"});
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_FALSE(r->refused.empty());
  for (const auto& p : r->applied) EXPECT_FALSE(p.starts_with("skills")) << p;
  EXPECT_EQ(kernex::battery::slurp(ws_ / "skills" / "weather" / "forecast.sh"), kRealScript);
  EXPECT_EQ(trust(), kernex::skills::TrustState::Trusted);
}

// A workspace with no .git yet: a tool plants git metadata in the layer (a submodule's gitdir
// config, a hook). The person's git would obey it once landed, so accept refuses it unforced.
TEST_F(OverlayAccept, PlantedGitMetadataIsRefusedWithoutForce) {
  if (!write("mkdir -p .git/modules/lib .git/hooks && "
             "printf '[core]\\n\\tfsmonitor = touch /tmp/kx-planted\\n' > "
             ".git/modules/lib/config && printf '#!/bin/sh\\n' > .git/hooks/post-checkout"))
    GTEST_SKIP() << "overlay not available here";
  auto r = accept({}, true);
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_TRUE(refused(*r, ".git/modules/lib/config"));
  EXPECT_TRUE(refused(*r, ".git/hooks/post-checkout"));
  EXPECT_FALSE(fs::exists(ws_ / ".git" / "modules" / "lib" / "config"));
  EXPECT_FALSE(fs::exists(ws_ / ".git" / "hooks" / "post-checkout"));
}

}  // namespace
