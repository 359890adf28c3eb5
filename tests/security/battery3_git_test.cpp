// Third battery, git part (issue 31 items 2 and 6): with `git_writes: true`, git metadata that
// holds configuration, hooks or other gitdirs must not be creatable by a sandboxed tool even where
// it doesn't exist yet, and the person's own git, run on the host afterwards, must not run anything
// a tool planted. Every case runs for real under Landlock + seccomp in the policy's mount
// namespace, against a repository made with the host's git; the host's view is what is checked.
// Skipped (with the reason) where git is not installed. tests/security/README.md lists the cases.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "battery_support.hpp"
#include "overlay_dirs.hpp"
#include "kernex/sandbox/policy.hpp"
#include "kernex/sandbox/spawn.hpp"

namespace fs = std::filesystem;
using namespace kernex::sandbox;
using kernex::battery::build_policy;
using kernex::battery::make_scratch_root;
using kernex::battery::slurp;
using kernex::battery::spawn_expecting;
using namespace std::chrono_literals;

namespace {

// What the host's git gets everywhere: no user or system config, file:// submodules allowed.
#define KERNEX_HOST_GIT_ARGS                                            \
  "git -c init.defaultBranch=main -c user.name=t -c user.email=t@e -c " \
  "protocol.file.allow=always"
constexpr const char* kHostGitArgs = KERNEX_HOST_GIT_ARGS;
constexpr const char* kHostGit = "GIT_CONFIG_NOSYSTEM=1 " KERNEX_HOST_GIT_ARGS;
// The same inside the sandbox (no ~/.gitconfig or /etc/gitconfig granted).
constexpr const char* kSandboxEnv =
    "export HOME=\"$PWD\" GIT_CONFIG_NOSYSTEM=1; G='git -c user.name=t -c user.email=t@e'; ";

bool exists_here(const fs::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0;
}

class GitBattery : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (std::system("git --version >/dev/null 2>&1") != 0) return;
    has_git_ = true;
    ASSERT_TRUE(make_scratch_root("kernex-battery3-git", root_));
    home_.set(root_);  // the host git of these cases reads no ~/.gitconfig of the person
    // lib.git: the bare repository a submodule is cloned from.
    host(root_, "init -q src");
    std::ofstream(root_ / "src" / "a") << "a\n";
    host(root_ / "src", "add a");
    host(root_ / "src", "commit -qm a");
    host(root_, "clone -q --bare src lib.git");
  }
  static void TearDownTestSuite() {
    if (!has_git_) return;
    home_.restore();
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  void SetUp() override {
    if (!has_git_) GTEST_SKIP() << "git is not installed: nothing to attack";
    ws_ = root_ / ("ws-" + std::to_string(++count_));
    fs::create_directories(ws_);
    host(ws_, "init -q .");
    std::ofstream(ws_ / "file.txt") << "x\n";
    host(ws_, "add file.txt");
    host(ws_, "commit -qm first");
  }

  static void host(const fs::path& dir, const std::string& args) {
    const std::string line =
        "cd '" + dir.string() + "' && " + kHostGit + " " + args + " >/dev/null 2>&1";
    ASSERT_EQ(std::system(line.c_str()), 0) << line;
  }
  // The host's git with its exit status (output dropped).
  static int host_status(const fs::path& dir, const std::string& args) {
    const std::string line =
        "cd '" + dir.string() + "' && " + kHostGit + " " + args + " >/dev/null 2>&1";
    return std::system(line.c_str());
  }

  Policy policy() const {
    SandboxProfile p;
    p.git_writes = true;
    return build_policy(PolicyBuilder(p).workspace(ws_).executable(KERNEX_ATTACK_DIR).timeout(30s));
  }
  SpawnResult sh(const std::string& line) const { return sh(policy(), line); }
  static SpawnResult sh(const Policy& policy, const std::string& line) {
    return spawn_expecting(policy, {"/bin/sh", "-c", std::string(kSandboxEnv) + line});
  }

  // Every way a tool makes a name: create (with missing parents), rename into place, symlink, hard
  // link. Each must fail and leave nothing at `rel` (relative to the workspace) on the host.
  void expect_uncreatable(const std::string& rel) {
    const fs::path target = ws_ / rel;
    ASSERT_FALSE(exists_here(target)) << rel << " exists before the attack";
    const std::string t = "'" + rel + "'";
    const std::string dir = "\"$(dirname " + t + ")\"";
    const std::vector<std::string> attacks = {
        "mkdir -p " + dir + " && printf '[core]\\n\\tfsmonitor = touch PWNED\\n' > " + t,
        "printf x > staged && mkdir -p " + dir + " ; mv staged " + t,
        "mkdir -p stagedir/hooks && mkdir -p " + dir + " ; mv stagedir " + t,
        "printf x > staged && ln -s \"$PWD/staged\" " + t,
        "printf x > staged && ln staged " + t,
    };
    const Policy built = policy();  // one mount namespace for every way
    for (const auto& a : attacks) {
      auto r = sh(built, a);
      EXPECT_FALSE(exists_here(target)) << rel << " was made by: " << a << "\n" << r.stderr_data;
      std::error_code ec;
      fs::remove_all(target, ec);
    }
    EXPECT_FALSE(exists_here(ws_ / "PWNED"));
  }

  static inline bool has_git_ = false;
  static inline fs::path root_;
  static inline kernex::battery::HomeOverride home_;
  static inline int count_ = 0;
  fs::path ws_;
};

// ---- metadata that doesn't exist yet ----------------------------------------------------------

TEST_F(GitBattery, PlantANewSubmoduleGitdir) {
  for (const char* rel :
       {".git/modules/lib/config", ".git/modules/lib/HEAD", ".git/modules/lib/hooks/post-checkout",
        ".git/modules/lib/info/attributes", ".git/modules/lib/config.worktree",
        ".git/modules/a/b/config", ".git/modules/lib"}) {
    expect_uncreatable(rel);
  }
}

TEST_F(GitBattery, PlantALinkedWorktree) {
  for (const char* rel :
       {".git/worktrees/evil/commondir", ".git/worktrees/evil/gitdir",
        ".git/worktrees/evil/config.worktree", ".git/worktrees/evil/HEAD", ".git/worktrees/evil"}) {
    expect_uncreatable(rel);
  }
  // git's own `worktree add` fails too, leaving no record behind.
  auto r = sh("$G worktree add -q ../wt-from-sandbox");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(fs::is_empty(ws_ / ".git" / "worktrees"));
}

TEST_F(GitBattery, PlantHooksAttributesAndAlternates) {
  for (const char* rel : {".git/hooks/pre-commit", ".git/hooks/post-checkout", ".git/hooks/x/y",
                          ".git/info/attributes", ".git/info/sparse-checkout",
                          ".git/objects/info/alternates", ".git/objects/info/http-alternates"}) {
    expect_uncreatable(rel);
  }
}

TEST_F(GitBattery, ConfigWorktreeIsAnEmptyReadOnlyPlaceholder) {
  policy();  // made at Build(): git reads an empty config.worktree as it reads none
  ASSERT_TRUE(fs::is_regular_file(ws_ / ".git" / "config.worktree"));
  auto r =
      sh("printf '[core]\\n\\tfsmonitor = touch PWNED\\n' >> .git/config.worktree; "
         "mv .git/config.worktree cw; rm -f .git/config.worktree; "
         "$G config --worktree core.hooksPath /tmp");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(fs::file_size(ws_ / ".git" / "config.worktree"), 0u);  // still there, still empty
  // With worktree config turned on by the person later, nothing planted is read.
  host(ws_, "config extensions.worktreeConfig true");
  host(ws_, "status");
  EXPECT_FALSE(exists_here(ws_ / "PWNED"));
}

TEST_F(GitBattery, MoveAGuardedDirectoryAwayAndPlantAnother) {
  for (const char* dir : {"modules", "worktrees", "hooks", "info", "objects"}) {
    const std::string d = std::string(".git/") + dir;
    auto r = sh("mv " + d + " " + d + "-old && mkdir -p " + d + "/lib && printf x > " + d +
                "/lib/config");
    EXPECT_NE(r.exit_code, 0) << dir;
    EXPECT_FALSE(exists_here(ws_ / (d + "-old"))) << dir;
    EXPECT_FALSE(exists_here(ws_ / d / "lib")) << dir;
  }
  auto r = sh("rm -rf .git/modules .git/worktrees .git/hooks; ls -d .git/modules .git/hooks");
  EXPECT_TRUE(fs::is_directory(ws_ / ".git" / "modules"));
  EXPECT_TRUE(fs::is_directory(ws_ / ".git" / "hooks"));
}

TEST_F(GitBattery, ASymlinkedGuardedNameIsRefused) {
  fs::remove_all(ws_ / ".git" / "hooks");
  fs::create_directory_symlink(ws_ / "elsewhere", ws_ / ".git" / "hooks");
  SandboxProfile p;
  p.git_writes = true;
  auto built = PolicyBuilder(p).workspace(ws_).Build();
  ASSERT_FALSE(built.has_value());
  EXPECT_NE(built.error().message.find("symlink"), std::string::npos) << built.error().message;
  EXPECT_NE(built.error().message.find(".git/hooks"), std::string::npos) << built.error().message;
}

// ---- git keeps working --------------------------------------------------------------------------

TEST_F(GitBattery, GitWritesStillCommitBranchAndCheckout) {
  auto r =
      sh("echo y > file.txt && $G add file.txt && $G commit -qm second && "
         "$G branch topic && $G checkout -q topic && echo z > new.txt && $G add new.txt && "
         "$G commit -qm third && $G checkout -q main && $G merge -q --ff-only topic && "
         "$G tag v1 && $G pack-refs --all && $G log --oneline | wc -l");
  EXPECT_TRUE(r.success()) << r.stderr_data;
  EXPECT_EQ(r.stdout_data, "3\n");
  // The host sees the same history.
  EXPECT_EQ(host_status(ws_, "rev-parse -q --verify refs/tags/v1"), 0);
  EXPECT_EQ(host_status(ws_, "fsck --no-progress"), 0);
}

TEST_F(GitBattery, AnInitializedSubmoduleStaysWritableButItsConfigDoesNot) {
  host(ws_, "submodule add -q file://" + (root_ / "lib.git").string() + " lib");
  host(ws_, "commit -qm lib");
  ASSERT_TRUE(fs::is_directory(ws_ / ".git" / "modules" / "lib"));
  auto r = sh("cd lib && $G commit -q --allow-empty -m in-submodule && $G log --oneline | wc -l");
  EXPECT_TRUE(r.success()) << r.stderr_data;
  EXPECT_EQ(r.stdout_data, "2\n");
  // Its config, hooks and its own modules/ are guarded like the superproject's.
  for (const char* rel :
       {".git/modules/lib/hooks/post-checkout", ".git/modules/lib/info/attributes",
        ".git/modules/lib/modules/inner/config", ".git/modules/lib/worktrees/w/gitdir",
        ".git/modules/lib2/config"}) {
    expect_uncreatable(rel);
  }
  r = sh("cd lib && $G config core.fsmonitor 'touch PWNED'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(slurp(ws_ / ".git" / "modules" / "lib" / "config").find("fsmonitor"),
            std::string::npos);
}

// ---- the escape of issue 31, end to end ---------------------------------------------------------

// What a tool plants for submodule `lib`: a gitdir whose config and hook both touch `marker`.
std::string plant_line(const fs::path& marker) {
  const std::string m = marker.string();
  return "d=.git/modules/lib; mkdir -p $d/hooks $d/objects $d/refs; "
         "echo 'ref: refs/heads/main' > $d/HEAD; "
         "printf '[core]\\n\\trepositoryformatversion = 0\\n\\tbare = false\\n\\tfsmonitor = "
         "\"touch " +
         m + "; false\"\\n' > $d/config; printf '#!/bin/sh\\ntouch " + m +
         "\\n' > $d/hooks/post-checkout; chmod +x $d/hooks/post-checkout; ";
}

// The tool registers submodule `lib` itself: .gitmodules and a gitlink in the index.
std::string register_line(const fs::path& lib, const std::string& sha) {
  return "printf '[submodule \"lib\"]\\n\\tpath = lib\\n\\turl = file://" + lib.string() +
         "\\n' > .gitmodules; $G update-index --add --cacheinfo 160000," + sha +
         ",lib; $G add .gitmodules; ";
}

std::string lib_head(const fs::path& root) {
  const std::string line = "git -C '" + (root / "lib.git").string() + "' rev-parse HEAD";
  FILE* f = ::popen(line.c_str(), "r");
  char buf[64] = {};
  const bool ok = f != nullptr && std::fgets(buf, sizeof buf, f) != nullptr;
  if (f != nullptr) ::pclose(f);
  std::string sha = ok ? buf : "";
  while (!sha.empty() && sha.back() == '\n') sha.pop_back();
  return sha;
}

TEST_F(GitBattery, PlantedSubmoduleViaGitmodulesDoesNotRunOnTheHost) {
  const std::string sha = lib_head(root_);
  ASSERT_EQ(sha.size(), 40u);
  // The control: the same plant made on the host (no sandbox) runs the payload on `submodule
  // update --init`, so this git is one the attack works against.
  const fs::path control = root_ / ("control-" + std::to_string(count_));
  const fs::path control_marker = root_ / ("control-marker-" + std::to_string(count_));
  fs::create_directories(control);
  host(control, "init -q .");
  const std::string control_line =
      "cd '" + control.string() + "' && export GIT_CONFIG_NOSYSTEM=1 && G='" + kHostGitArgs +
      "' && " + register_line(root_ / "lib.git", sha) + plant_line(control_marker);
  ASSERT_EQ(std::system(control_line.c_str()), 0) << control_line;
  host_status(control, "submodule update --init");
  ASSERT_TRUE(exists_here(control_marker)) << "the attack does not work against this git";

  // The attack, by a sandboxed tool.
  const fs::path marker = root_ / ("marker-" + std::to_string(count_));
  auto r = sh(register_line(root_ / "lib.git", sha) + plant_line(marker));
  EXPECT_FALSE(exists_here(ws_ / ".git" / "modules" / "lib")) << r.stderr_data;
  EXPECT_TRUE(fs::is_regular_file(ws_ / ".gitmodules"));  // the tool did change .gitmodules
  // The person's usual next step, on the host.
  EXPECT_EQ(host_status(ws_, "submodule update --init"), 0);
  EXPECT_TRUE(fs::is_regular_file(ws_ / "lib" / "a"));  // a real clone of lib.git
  EXPECT_EQ(host_status(ws_, "status"), 0);
  EXPECT_FALSE(exists_here(marker)) << "the planted submodule ran its payload on the host";
}

TEST_F(GitBattery, PlantedGitdirOfAnUninitializedSubmoduleDoesNotRunOnTheHost) {
  // A superproject cloned without its submodule: .gitmodules and the gitlink are there, the gitdir
  // under .git/modules is not.
  const fs::path super = root_ / ("super-" + std::to_string(count_));
  fs::create_directories(super);
  host(super, "init -q .");
  host(super, "submodule add -q file://" + (root_ / "lib.git").string() + " lib");
  host(super, "commit -qm lib");
  fs::remove_all(ws_);
  host(root_, "clone -q '" + super.string() + "' '" + ws_.string() + "'");
  ASSERT_FALSE(exists_here(ws_ / ".git" / "modules" / "lib"));

  const fs::path marker = root_ / ("marker-" + std::to_string(count_));
  auto r = sh(plant_line(marker) + " git -c user.name=t -c user.email=t@e submodule update --init");
  EXPECT_NE(r.exit_code, 0);  // cloning into .git/modules is refused inside the sandbox too
  EXPECT_FALSE(exists_here(ws_ / ".git" / "modules" / "lib")) << r.stderr_data;
  EXPECT_EQ(host_status(ws_, "submodule update --init"), 0);
  EXPECT_TRUE(fs::is_regular_file(ws_ / "lib" / "a"));
  EXPECT_EQ(host_status(ws_, "status"), 0);
  EXPECT_FALSE(exists_here(marker)) << "the planted submodule ran its payload on the host";
}

// A submodule not checked out is an empty directory; a `.git` planted there makes the person's
// `git status` in the superproject run a git inside it. Without git_writes too (the default).
TEST_F(GitBattery, DotGitPlantedInASubmoduleNotCheckedOutDoesNotRunOnTheHost) {
  const fs::path super = root_ / ("super-" + std::to_string(count_));
  fs::create_directories(super);
  host(super, "init -q .");
  host(super, "submodule add -q file://" + (root_ / "lib.git").string() + " deps/lib");
  host(super, "commit -qm lib");
  fs::remove_all(ws_);
  host(root_, "clone -q '" + super.string() + "' '" + ws_.string() + "'");
  ASSERT_TRUE(fs::is_empty(ws_ / "deps" / "lib"));
  const fs::path marker = root_ / ("marker-" + std::to_string(count_));
  const std::string plant =
      "d=deps/lib/.git; mkdir -p $d/objects $d/refs && echo 'ref: refs/heads/main' > $d/HEAD && "
      "printf '[core]\\n\\trepositoryformatversion = 0\\n\\tfsmonitor = \"touch " +
      marker.string() + "; false\"\\n' > $d/config";
  const std::string swap = "mv deps/lib deps/lib-old; rmdir deps/lib; mkdir -p deps/lib/.git";
  for (bool git_writes : {false, true}) {
    SandboxProfile p;
    p.git_writes = git_writes;
    auto policy =
        build_policy(PolicyBuilder(p).workspace(ws_).executable(KERNEX_ATTACK_DIR).timeout(30s));
    for (const std::string& line : {plant, swap, std::string("ln -s \"$PWD\" deps/lib/.git")}) {
      auto r = spawn_expecting(policy, {"/bin/sh", "-c", line});
      EXPECT_NE(r.exit_code, 0) << line;
      EXPECT_TRUE(fs::is_empty(ws_ / "deps" / "lib")) << line << "\n" << r.stderr_data;
    }
    // The rest of the worktree stays writable.
    auto ok = spawn_expecting(policy, {"/bin/sh", "-c", "echo y > file.txt && mkdir -p deps/x"});
    EXPECT_TRUE(ok.success()) << ok.stderr_data;
  }
  EXPECT_EQ(host_status(ws_, "status"), 0);
  EXPECT_FALSE(exists_here(marker)) << "the planted .git ran its payload on the host";
  // The control: the same plant on the host does run on `git status`.
  const std::string control = "cd '" + ws_.string() + "' && " + plant;
  ASSERT_EQ(std::system(control.c_str()), 0);
  host_status(ws_, "status");
  EXPECT_TRUE(exists_here(marker)) << "the attack does not work against this git";
}

// A missing submodule directory is made (as checkout makes it) so that it can be kept.
TEST_F(GitBattery, AMissingSubmoduleDirectoryIsMadeAndKept) {
  const std::string sha = lib_head(root_);
  host(ws_, "update-index --add --cacheinfo 160000," + sha + ",gone/lib");
  ASSERT_FALSE(exists_here(ws_ / "gone"));
  auto r = sh("mkdir -p gone/lib/.git && echo x > gone/lib/.git/config");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(fs::is_directory(ws_ / "gone" / "lib"));
  EXPECT_TRUE(fs::is_empty(ws_ / "gone" / "lib"));
}

// An overlay run (the workspace an overlayfs whose upper layer the kernel keeps): the placeholders
// are made in the real tree, seen through the overlay, and bound read-only over it; nothing lands
// in the upper layer either.
TEST_F(GitBattery, OverlayRunsGuardTheSameMetadata) {
  kernex::testing::OverlayDirs dirs;
  if (auto why = dirs.overlay_unavailable(); !why.empty()) GTEST_SKIP() << why;
  host(dirs.ws(), "init -q .");
  std::ofstream(dirs.ws() / "file.txt") << "x\n";
  host(dirs.ws(), "add file.txt");
  host(dirs.ws(), "commit -qm first");
  SandboxProfile p;
  p.git_writes = true;
  auto policy = build_policy(PolicyBuilder(p)
                                 .workspace(dirs.ws())
                                 .workspace_overlay(WorkspaceOverlay::in(dirs.layers()))
                                 .timeout(30s));
  auto r = spawn_expecting(
      policy, {"/bin/sh", "-c",
               std::string(kSandboxEnv) +
                   "mkdir -p .git/modules/lib/hooks; printf x > .git/modules/lib/config; "
                   "mkdir -p .git/worktrees/e; printf x > .git/hooks/post-checkout; "
                   "printf x >> .git/config.worktree; printf x >> .git/config; "
                   "$G commit -q --allow-empty -m in-overlay && $G log --oneline | wc -l"});
  EXPECT_EQ(r.stdout_data, "2\n") << r.stderr_data;
  for (const auto& base : {dirs.ws(), dirs.upper()}) {
    for (const char* rel : {".git/modules/lib", ".git/worktrees/e", ".git/hooks/post-checkout"}) {
      EXPECT_FALSE(exists_here(base / rel)) << base / rel;
    }
  }
  EXPECT_FALSE(exists_here(dirs.upper() / ".git" / "config.worktree"));
  EXPECT_FALSE(exists_here(dirs.upper() / ".git" / "config"));
  EXPECT_EQ(fs::file_size(dirs.ws() / ".git" / "config.worktree"), 0u);
}

// What the repository's config names, or its hooks link to, inside the workspace: rewriting it
// would run on the person's next commit, checkout or diff. Kept read-only with and without
// git_writes.
TEST_F(GitBattery, WhatTheConfigNamesInTheWorkspaceIsKept) {
  fs::create_directories(ws_ / ".githooks");
  fs::create_directories(ws_ / "scripts");
  fs::create_directories(ws_ / "tools");
  std::ofstream(ws_ / ".githooks" / "pre-commit") << "#!/bin/sh\nexit 0\n";
  std::ofstream(ws_ / "scripts" / "post-checkout") << "#!/bin/sh\nexit 0\n";
  std::ofstream(ws_ / "tools" / "clean.sh") << "#!/bin/sh\ncat\n";
  std::ofstream(ws_ / "project.gitconfig") << "[core]\n";
  host(ws_, "config core.hooksPath .githooks");
  host(ws_, "config include.path ../project.gitconfig");
  host(ws_, "config filter.x.clean './tools/clean.sh --quiet'");
  host(ws_, "config diff.x.textconv 'sh scripts/conv.sh'");  // a script after an interpreter
  std::ofstream(ws_ / "scripts" / "conv.sh") << "cat \"$1\"\n";
  fs::create_symlink("../../scripts/post-checkout", ws_ / ".git" / "hooks" / "post-checkout");
  const std::vector<std::string> kept = {".githooks/pre-commit", "scripts/post-checkout",
                                         "tools/clean.sh", "project.gitconfig", "scripts/conv.sh"};
  for (bool git_writes : {false, true}) {
    SandboxProfile p;
    p.git_writes = git_writes;
    auto policy =
        build_policy(PolicyBuilder(p).workspace(ws_).executable(KERNEX_ATTACK_DIR).timeout(30s));
    for (const auto& rel : kept) {
      auto r = spawn_expecting(policy, {"/bin/sh", "-c", "echo 'touch PWNED' >> " + rel});
      EXPECT_NE(r.exit_code, 0) << rel;
      EXPECT_EQ(slurp(ws_ / rel).find("PWNED"), std::string::npos) << rel;
    }
    auto r = spawn_expecting(policy, {"/bin/sh", "-c", "echo x > .githooks/post-commit"});
    EXPECT_FALSE(exists_here(ws_ / ".githooks" / "post-commit"));
    // The rest of the workspace stays writable.
    r = spawn_expecting(policy, {"/bin/sh", "-c", "echo y > file.txt && echo z > scripts/other"});
    EXPECT_TRUE(r.success()) << r.stderr_data;
  }
}

// A config that names the writable grant itself (core.hooksPath = .) can't be kept without making
// the whole workspace read-only: Build() says so.
TEST_F(GitBattery, AConfigNamingTheWholeWorkspaceIsRefused) {
  host(ws_, "config core.hooksPath .");
  auto built = PolicyBuilder().workspace(ws_).Build();
  ASSERT_FALSE(built.has_value());
  EXPECT_NE(built.error().message.find("names the writable grant"), std::string::npos)
      << built.error().message;
}

// The gitlinks are read from every index git writes: versions 2, 3 (extended flags) and 4 (paths
// prefix-compressed), and a split index whose gitlink is in the shared part.
TEST_F(GitBattery, GitlinksAreReadFromEveryIndexFormat) {
  const std::string sha = lib_head(root_);
  host(ws_, "update-index --add --cacheinfo 160000," + sha + ",mods/a/lib");
  host(ws_, "update-index --add --cacheinfo 160000," + sha + ",mods/b/lib");
  std::ofstream(ws_ / "later.txt") << "x\n";
  const std::vector<std::string> setups = {
      "update-index --index-version 2", "add -N later.txt",  // intent-to-add: extended flags
      "update-index --index-version 4", "update-index --index-version 2",
      "update-index --split-index"};
  for (const auto& setup : setups) {
    host(ws_, setup);
    auto built = PolicyBuilder().workspace(ws_).Build();
    ASSERT_TRUE(built.has_value()) << setup << ": " << built.error().describe();
    const auto& kept = built->status().read_only_in_writable;
    for (const char* rel : {"mods/a/lib", "mods/b/lib"}) {
      EXPECT_NE(std::find(kept.begin(), kept.end(), ws_ / rel), kept.end()) << setup << " " << rel;
    }
    EXPECT_TRUE(built->status().warnings.empty() ||
                std::none_of(built->status().warnings.begin(), built->status().warnings.end(),
                             [](const std::string& w) { return w.find("index") != w.npos; }))
        << setup;
  }
  bool shared = false;
  for (const auto& e : fs::directory_iterator(ws_ / ".git"))
    shared = shared || e.path().filename().string().starts_with("sharedindex.");
  EXPECT_TRUE(shared) << "no split index was made: the last case tested nothing new";
}

}  // namespace
