// The second escape battery, metadata class: Landlock has no right for chmod, chown or utimensat,
// and seccomp can't tell paths apart, so without the read-only root of the policy's mount namespace
// a command could change the mode, group and times of any file it owns and can name (as root: every
// system file). Each case attacks victim files this test creates, owned by the test's uid with mode
// 0600, outside every writable grant: in the throwaway $HOME's ~/.ssh (not granted), in a directory
// beside the workspace (not granted) and in a directory granted read-only, on both spawn paths (a
// policy without any writable grant, and one with a workspace and a private TMPDIR), and checks
// both what the attack reported and that the file is unchanged. Positive cases: the writable grants
// keep working. tests/security/README.md lists the cases.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "kernex/sandbox/policy.hpp"
#include "kernex/sandbox/spawn.hpp"

namespace fs = std::filesystem;
using namespace kernex::sandbox;
using namespace std::chrono_literals;

namespace {

const std::string kMeta = KERNEX_ATTACK_DIR "/meta";

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

// What an attack may change on a victim.
struct Meta {
  mode_t mode = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  off_t size = 0;
  timespec mtime{};
  timespec ctime{};
  nlink_t links = 0;
};

Meta meta_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
  return {st.st_mode, st.st_uid, st.st_gid, st.st_size, st.st_mtim, st.st_ctim, st.st_nlink};
}

bool same(const timespec& a, const timespec& b) {
  return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

enum class Path { NoWritable, Workspace };

class MetadataBattery : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    std::string tmpl = (fs::temp_directory_path() / "kernex-battery2-meta-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    root_ = fs::canonical(tmpl);
    home_ = root_ / "home";
    ws_ = root_ / "ws";
    beside_ = root_ / "beside";
    ro_ = root_ / "ro";
    for (const auto& d : {home_ / ".ssh", ws_, beside_, ro_}) fs::create_directories(d);
    if (const char* h = std::getenv("HOME")) saved_home_ = h;
    ::setenv("HOME", home_.c_str(), 1);
  }
  static void TearDownTestSuite() {
    if (!saved_home_.empty()) ::setenv("HOME", saved_home_.c_str(), 1);
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  // Fresh victims for every case: content, mode 0600, old times.
  void SetUp() override {
    for (const auto& v : victims()) {
      std::error_code ec;
      fs::remove(fs::path(v.string() + ".link"), ec);
      std::ofstream(v, std::ios::trunc) << "VICTIM\n";
      ASSERT_EQ(::chmod(v.c_str(), 0600), 0);
      const timespec old[2] = {{1'000'000, 0}, {1'000'000, 0}};
      ASSERT_EQ(::utimensat(AT_FDCWD, v.c_str(), old, 0), 0);
    }
  }

  static std::vector<fs::path> victims() {
    return {home_ / ".ssh" / "id_rsa", beside_ / "victim", ro_ / "victim"};
  }

  // No writable grant at all (no workspace, no private TMPDIR): before the fix, no mount namespace.
  static PolicyBuilder no_writable() {
    SandboxProfile p;
    p.private_tmp = false;
    return PolicyBuilder(p).executable(KERNEX_ATTACK_DIR).read_only(ro_).timeout(10s);
  }
  static PolicyBuilder with_workspace() {
    return PolicyBuilder().workspace(ws_).executable(KERNEX_ATTACK_DIR).read_only(ro_).timeout(10s);
  }
  static PolicyBuilder builder(Path path) {
    return path == Path::NoWritable ? no_writable() : with_workspace();
  }

  static Policy build(const PolicyBuilder& b) {
    auto p = b.Build();
    EXPECT_TRUE(p.has_value()) << (p ? "" : p.error().describe());
    if (!p) throw std::runtime_error("policy build failed");
    return *p;
  }
  static SpawnResult run(const Policy& policy, std::vector<std::string> argv) {
    Command cmd;
    cmd.argv = std::move(argv);
    auto r = spawn(policy, cmd);
    EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().describe());
    if (!r) return {};
    EXPECT_EQ(r->exit_code, 0) << r->stderr_data;
    return *r;
  }
  static std::string meta(const Policy& policy, const std::string& what, const fs::path& path,
                          const std::string& mode = "666") {
    return first_line(run(policy, {kMeta, what, path.string(), mode}).stdout_data);
  }

  static inline fs::path root_, home_, ws_, beside_, ro_;
  static inline std::string saved_home_;
};

class SecurityBattery2Metadata
    : public MetadataBattery,
      public ::testing::WithParamInterface<std::tuple<std::string, Path>> {};

// Every attack, against every victim: refused (not "OK"), and the victim's mode, owner, size, times
// and link count are what they were.
TEST_P(SecurityBattery2Metadata, ChangesNothingOutsideWritableGrants) {
  const auto& [what, path] = GetParam();
  const Policy policy = build(builder(path));
  EXPECT_TRUE(policy.status().read_only_root)
      << "mount_setattr missing? warnings: " << policy.status().warnings.size();
  for (const auto& v : victims()) {
    const Meta before = meta_of(v);
    const std::string out = meta(policy, what, v);
    EXPECT_FALSE(out.empty()) << what << " " << v;
    EXPECT_FALSE(out.starts_with("OK")) << what << " changed " << v;
    const Meta after = meta_of(v);
    EXPECT_EQ(after.mode, before.mode) << what << " " << v << ": " << out;
    EXPECT_EQ(after.uid, before.uid) << what << " " << v;
    EXPECT_EQ(after.gid, before.gid) << what << " " << v;
    EXPECT_EQ(after.size, before.size) << what << " " << v;
    EXPECT_EQ(after.links, before.links) << what << " " << v;
    EXPECT_TRUE(same(after.mtime, before.mtime)) << what << " touched " << v;
    EXPECT_TRUE(same(after.ctime, before.ctime))
        << what << " changed the ctime of " << v << ": " << out;
  }
}

std::string case_name(const ::testing::TestParamInfo<std::tuple<std::string, Path>>& info) {
  std::string name = std::get<0>(info.param);
  for (char& c : name) {
    if (c == '-') c = '_';
  }
  return name + (std::get<1>(info.param) == Path::NoWritable ? "_NoWritable" : "_Workspace");
}

const std::vector<std::string> kAttacks = {
    "chmod",
    "fchmodat",
    "fchmodat2-nofollow",
    "fchmodat2-empty-opath",
    "procfd-chmod-opath",
    "fchmod-rdonly",
    "chown-group",
    "lchown-group",
    "fchownat-group",
    "fchownat-empty-opath",
    "fchown-rdonly",
    "utimensat-now",
    "utimensat-epoch",
    "utimes",
    "procfd-utimensat-opath",
    "futimens-rdonly",
    "truncate",
    "open-trunc",
    "rename-self",
    "link-beside",
};

INSTANTIATE_TEST_SUITE_P(Attacks, SecurityBattery2Metadata,
                         ::testing::Combine(::testing::ValuesIn(kAttacks),
                                            ::testing::Values(Path::NoWritable, Path::Workspace)),
                         case_name);

// chmod, chown and utimensat, by path, O_PATH fd or /proc/self/fd link, reach the mount check
// only: EROFS is the read-only root at work (not an unreadable path or a seccomp refusal).
class SecurityBattery2MetadataErofs : public SecurityBattery2Metadata {};

TEST_P(SecurityBattery2MetadataErofs, FailsAtTheReadOnlyMount) {
  const auto& [what, path] = GetParam();
  const Policy policy = build(builder(path));
  for (const auto& v : victims())
    EXPECT_TRUE(meta(policy, what, v).ends_with("EROFS")) << what << " " << v;
}

const std::vector<std::string> kByName = {
    "chmod",
    "fchmodat",
    "fchmodat2-nofollow",
    "fchmodat2-empty-opath",
    "procfd-chmod-opath",
    "chown-group",
    "lchown-group",
    "fchownat-group",
    "fchownat-empty-opath",
    "utimensat-now",
    "utimensat-epoch",
    "utimes",
    "procfd-utimensat-opath",
};

INSTANTIATE_TEST_SUITE_P(Attacks, SecurityBattery2MetadataErofs,
                         ::testing::Combine(::testing::ValuesIn(kByName),
                                            ::testing::Values(Path::NoWritable, Path::Workspace)),
                         case_name);

// What must keep working: the writable grants are writable again, file metadata included.
class SecurityBattery2MetadataGrants : public MetadataBattery {};

TEST_F(SecurityBattery2MetadataGrants, ChmodChownTouchTruncateInWorkspace) {
  const Policy policy = build(with_workspace());
  const fs::path f = ws_ / "mine";
  for (const char* what :
       {"fchmodat", "chown-group", "utimensat-epoch", "fchmod-rdonly", "truncate", "chmod"}) {
    std::ofstream(f, std::ios::trunc) << "x\n";
    ::chmod(f.c_str(), 0600);
    EXPECT_EQ(meta(policy, what, f, "640"), "OK") << what;
  }
  EXPECT_EQ(meta_of(f).mode & 07777, 0640U);
}

TEST_F(SecurityBattery2MetadataGrants, ChmodAndTouchInPrivateTmp) {
  const Policy policy = build(with_workspace());
  ASSERT_FALSE(policy.private_tmp().empty());
  const fs::path f = policy.private_tmp() / "scratch";
  std::ofstream(f) << "x\n";
  EXPECT_EQ(meta(policy, "chmod", f, "700"), "OK");
  EXPECT_EQ(meta(policy, "utimensat-now", f), "OK");
  EXPECT_EQ(meta_of(f).mode & 07777, 0700U);
}

TEST_F(SecurityBattery2MetadataGrants, NewFilesInWorkspaceAndDevNullWrites) {
  const Policy policy = build(with_workspace());
  auto r = run(policy, {"/bin/sh", "-c",
                        "echo data > new && chmod 755 new && touch new && echo x > /dev/null && "
                        "cat new"});
  EXPECT_EQ(r.exit_code, 0) << r.stderr_data;
  EXPECT_EQ(r.stdout_data, "data\n");
  EXPECT_EQ(meta_of(ws_ / "new").mode & 07777, 0755U);
}

TEST_F(SecurityBattery2MetadataGrants, DevNullWritableWithoutAnyWritableGrant) {
  const Policy policy = build(no_writable());
  auto r = run(policy, {"/bin/sh", "-c", "echo x > /dev/null && echo ok"});
  EXPECT_EQ(r.stdout_data, "ok\n") << r.stderr_data;
}

// A read-only bind inside the workspace (its .git) stays read-only under the writable workspace
// bind: clearing read-only on the workspace bind did not reach the binds below it.
TEST_F(SecurityBattery2MetadataGrants, GitInsideWorkspaceStaysReadOnly) {
  fs::create_directories(ws_ / ".git" / "hooks");
  std::ofstream(ws_ / ".git" / "config") << "[core]\n";
  ::chmod((ws_ / ".git" / "config").c_str(), 0600);
  const Policy policy = build(with_workspace());
  EXPECT_TRUE(meta(policy, "chmod", ws_ / ".git" / "config", "777").ends_with("EROFS"));
  EXPECT_EQ(meta_of(ws_ / ".git" / "config").mode & 07777, 0600U);
  std::error_code ec;
  fs::remove_all(ws_ / ".git", ec);
}

}  // namespace
