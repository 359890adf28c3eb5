// The overlay workspace's review side on real overlayfs layers: a child mounts the overlay in its
// own mount namespace and runs every kind of write there (tests/support/overlay_mount.hpp); the
// suite then checks status, diff, accept and reject on what landed in upper/.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "kernex/workspace/overlay.hpp"
#include "overlay_mount.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using kernex::ErrorCode;
using kernex::testing::OverlayMountOptions;
using kernex::testing::TempDir;
using namespace kernex::workspace;

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write(const fs::path& p, const std::string& text, fs::perms mode = fs::perms(0644)) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary | std::ios::trunc) << text;
  fs::permissions(p, mode);
}

CreateOptions session(const std::string& id) {
  CreateOptions o;
  o.session_id = id;
  return o;
}

OverlayMountOptions mount_with(const std::string& extra, bool user_namespace = false) {
  OverlayMountOptions o;
  o.extra = extra;
  o.user_namespace = user_namespace;
  return o;
}

// "kind path" per change ("renamed from -> to").
std::vector<std::string> lines_of(const Status& s) {
  std::vector<std::string> out;
  for (const Change& c : s.changes) {
    std::string line = std::string(to_string(c.kind)) + " ";
    if (c.kind == ChangeKind::Renamed) line += c.from + " -> ";
    out.push_back(line + c.path);
  }
  return out;
}

// Every entry below `root`: path -> type, mode and content (or symlink target).
std::map<std::string, std::string> snapshot(const fs::path& root) {
  std::map<std::string, std::string> out;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator();
       ++it) {
    const auto st = it->symlink_status();
    const std::string rel = fs::relative(it->path(), root).string();
    const auto mode = std::to_string(static_cast<unsigned>(st.permissions()));
    if (fs::is_symlink(st))
      out[rel] = "link " + fs::read_symlink(it->path()).string();
    else if (fs::is_directory(st))
      out[rel] = "dir " + mode;
    else
      out[rel] = "file " + mode + " " + read(it->path());
  }
  return out;
}

// Runs `script` in the overlay of `real` and `layer` at `mnt`; skips when the kernel refuses.
#define RUN_SESSION_WITH(script, options)                                                 \
  do {                                                                                    \
    const auto run_ = kernex::testing::run_in_overlay(real, layer, mnt, script, options); \
    if (!run_.mounted) GTEST_SKIP() << run_.skip_reason;                                  \
    ASSERT_EQ(run_.exit_code, 0) << run_.output;                                          \
  } while (false)
#define RUN_SESSION(script) RUN_SESSION_WITH(script, OverlayMountOptions{})

class WorkspaceOverlay : public ::testing::Test {
 protected:
  void SetUp() override {
    ::umask(022);
    write(real / "a.txt", "alpha\n");
    write(real / "b.txt", "bravo bravo\n");
    write(real / "del.txt", "delete me please\n");
    write(real / "mv.txt", "move me\n");
    write(real / "chmod.sh", "#!/bin/sh\necho hi\n");
    write(real / "trunc.txt", "text to cut\n");
    write(real / "dir/x", "x file\n");
    write(real / "dir/y", "y file content\n");
    write(real / "olddir/f", "f in old dir\n");
    fs::create_directories(real / "rmdir_me");
  }

  Overlay create() {
    auto o = Overlay::create(real, layer, session("s1"));
    EXPECT_TRUE(o) << o.error().describe();
    return std::move(*o);
  }

  Status status_of(const Overlay& o) {
    auto s = o.status();
    EXPECT_TRUE(s) << s.error().describe();
    return s ? *s : Status{};
  }

  static constexpr const char* kEveryWrite =
      "echo new > added.txt\n"
      "echo more >> a.txt\n"
      "rm del.txt\n"
      "mv mv.txt moved.txt\n"
      "chmod 755 chmod.sh\n"
      "ln -s a.txt link\n"
      "ln b.txt hard\n"
      "mkdir newdir && echo z > newdir/z\n"
      "rmdir rmdir_me\n"
      "truncate -s 0 trunc.txt\n"
      "mv olddir newdir2\n"
      "rm -r dir && mkdir dir && echo q > dir/q\n";

  TempDir tmp;
  fs::path real = tmp / "real";
  fs::path layer = tmp / "layers/s1";
  fs::path mnt = tmp / "mnt";
};

const std::vector<std::string> kEveryWriteStatus = {"modified a.txt",
                                                    "added added.txt",
                                                    "mode_changed chmod.sh",
                                                    "deleted del.txt",
                                                    "added dir/q",
                                                    "deleted dir/x",
                                                    "deleted dir/y",
                                                    "added hard",
                                                    "added link",
                                                    "renamed mv.txt -> moved.txt",
                                                    "added newdir",
                                                    "added newdir/z",
                                                    "added newdir2",
                                                    "renamed olddir/f -> newdir2/f",
                                                    "deleted olddir",
                                                    "deleted rmdir_me",
                                                    "modified trunc.txt"};

TEST_F(WorkspaceOverlay, EveryWritePathShowsInStatusAndNoneReachesTheRealTree) {
  const Overlay o = create();
  const auto before = snapshot(real);
  RUN_SESSION(kEveryWrite);
  EXPECT_EQ(snapshot(real), before);
  EXPECT_EQ(lines_of(status_of(o)), kEveryWriteStatus);
  const Status s = status_of(o);
  EXPECT_EQ(s.changes[2].old_mode, 0644u);
  EXPECT_EQ(s.changes[2].new_mode, 0755u);
  EXPECT_EQ(s.changes[8].new_type, EntryType::Symlink);
  const auto json = to_json(s);
  EXPECT_EQ(json["changes"][9], (kernex::Json{{"path", "moved.txt"},
                                              {"kind", "renamed"},
                                              {"from", "mv.txt"},
                                              {"old_type", "file"},
                                              {"old_mode", 0644},
                                              {"new_type", "file"},
                                              {"new_mode", 0644}}));
}

TEST_F(WorkspaceOverlay, DiffIsExactInGitsFormat) {
  write(real / "bin.dat", std::string("\0\1\2", 3));
  const Overlay o = create();
  RUN_SESSION(std::string(kEveryWrite) + "printf '\\0\\3' > bin.dat\n");
  auto diff = o.diff(
      {"a.txt", "added.txt", "del.txt", "chmod.sh", "link", "moved.txt", "bin.dat", "trunc.txt"});
  ASSERT_TRUE(diff) << diff.error().describe();
  EXPECT_EQ(*diff,
            "diff --git a/a.txt b/a.txt\n"
            "--- a/a.txt\n"
            "+++ b/a.txt\n"
            "@@ -1 +1,2 @@\n"
            " alpha\n"
            "+more\n"
            "diff --git a/added.txt b/added.txt\n"
            "new file mode 100644\n"
            "--- /dev/null\n"
            "+++ b/added.txt\n"
            "@@ -0,0 +1 @@\n"
            "+new\n"
            "diff --git a/bin.dat b/bin.dat\n"
            "Binary files a/bin.dat and b/bin.dat differ\n"
            "diff --git a/chmod.sh b/chmod.sh\n"
            "old mode 100644\n"
            "new mode 100755\n"
            "diff --git a/del.txt b/del.txt\n"
            "deleted file mode 100644\n"
            "--- a/del.txt\n"
            "+++ /dev/null\n"
            "@@ -1 +0,0 @@\n"
            "-delete me please\n"
            "diff --git a/link b/link\n"
            "new file mode 120000\n"
            "--- /dev/null\n"
            "+++ b/link\n"
            "@@ -0,0 +1 @@\n"
            "+a.txt\n"
            "\\ No newline at end of file\n"
            "diff --git a/mv.txt b/moved.txt\n"
            "similarity index 100%\n"
            "rename from mv.txt\n"
            "rename to moved.txt\n"
            "diff --git a/trunc.txt b/trunc.txt\n"
            "--- a/trunc.txt\n"
            "+++ b/trunc.txt\n"
            "@@ -1 +0,0 @@\n"
            "-text to cut\n");
}

// Files only (git tracks no directories): path -> type, mode and content.
std::map<std::string, std::string> files_of(const fs::path& root) {
  auto all = snapshot(root);
  std::erase_if(all, [](const auto& e) { return e.second.starts_with("dir "); });
  return all;
}

// The diff is exactly what accept applies: `git apply` of it on a copy of the real tree gives
// the files accept writes.
TEST_F(WorkspaceOverlay, GitApplyOfTheDiffGivesWhatAcceptWrites) {
  Overlay o = create();
  RUN_SESSION(kEveryWrite);
  auto diff = o.diff();
  ASSERT_TRUE(diff) << diff.error().describe();
  const fs::path copy = tmp / "copy";
  fs::copy(real, copy, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  write(tmp / "all.patch", *diff);
  const std::string cmd = "cd '" + copy.string() + "' && git apply --whitespace=nowarn '" +
                          (tmp / "all.patch").string() + "' 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
  ASSERT_EQ(::pclose(pipe), 0) << out << "\n" << *diff;
  auto accepted = o.accept();
  ASSERT_TRUE(accepted) << accepted.error().describe();
  EXPECT_EQ(files_of(copy), files_of(real));
}

TEST_F(WorkspaceOverlay, AcceptAllMakesTheRealTreeWhatTheSessionSaw) {
  Overlay o = create();
  RUN_SESSION(kEveryWrite);
  // What the session saw, read through a second mount afterwards.
  RUN_SESSION("true");
  auto accepted = o.accept();
  ASSERT_TRUE(accepted) << accepted.error().describe();
  EXPECT_TRUE(accepted->conflicts.empty());
  EXPECT_TRUE(accepted->refused.empty()) << to_json(*accepted).dump();
  EXPECT_EQ(accepted->applied.size(), kEveryWriteStatus.size());
  EXPECT_EQ(read(real / "a.txt"), "alpha\nmore\n");
  EXPECT_EQ(read(real / "moved.txt"), "move me\n");
  EXPECT_FALSE(fs::exists(real / "mv.txt"));
  EXPECT_FALSE(fs::exists(real / "del.txt"));
  EXPECT_FALSE(fs::exists(real / "olddir"));
  EXPECT_FALSE(fs::exists(real / "rmdir_me"));
  EXPECT_FALSE(fs::exists(real / "dir/x"));
  EXPECT_EQ(read(real / "dir/q"), "q\n");
  EXPECT_EQ(read(real / "newdir2/f"), "f in old dir\n");
  EXPECT_EQ(read(real / "trunc.txt"), "");
  EXPECT_EQ(fs::read_symlink(real / "link"), "a.txt");
  EXPECT_EQ(fs::status(real / "chmod.sh").permissions(), fs::perms(0755));
  EXPECT_EQ(read(real / "hard"), "bravo bravo\n");
  EXPECT_EQ(fs::hard_link_count(real / "hard"), 1u);  // a copy, not a link to b.txt
  EXPECT_TRUE(status_of(o).changes.empty());
  EXPECT_TRUE(fs::is_empty(layer / "upper"));
  // A later mount shows the accepted tree unchanged, and a fresh Overlay agrees.
  auto reopened = Overlay::open(layer);
  ASSERT_TRUE(reopened) << reopened.error().describe();
  EXPECT_TRUE(status_of(*reopened).changes.empty());
}

TEST_F(WorkspaceOverlay, ConflictsAreSkippedUnlessForced) {
  Overlay o = create();
  RUN_SESSION("echo session >> a.txt; echo session >> b.txt; echo new > added.txt");
  write(real / "a.txt", "edited by a person\n");
  write(real / "added.txt", "also made by a person\n");
  auto accepted = o.accept();
  ASSERT_TRUE(accepted) << accepted.error().describe();
  EXPECT_EQ(accepted->applied, std::vector<std::string>{"b.txt"});
  ASSERT_EQ(accepted->conflicts.size(), 2u);
  EXPECT_EQ(accepted->conflicts[0].path, "a.txt");
  EXPECT_EQ(accepted->conflicts[0].reason,
            "it changed in the real tree (size or modification time)");
  EXPECT_EQ(accepted->conflicts[1].path, "added.txt");
  EXPECT_EQ(accepted->conflicts[1].reason,
            "it appeared in the real tree after the session started");
  EXPECT_EQ(read(real / "a.txt"), "edited by a person\n");
  EXPECT_EQ(read(real / "b.txt"), "bravo bravo\nsession\n");
  EXPECT_EQ(lines_of(status_of(o)),
            (std::vector<std::string>{"modified a.txt", "added added.txt"}));

  auto forced = o.accept({"a.txt"}, true);
  ASSERT_TRUE(forced) << forced.error().describe();
  EXPECT_EQ(forced->applied, std::vector<std::string>{"a.txt"});
  EXPECT_EQ(read(real / "a.txt"), "alpha\nsession\n");
  EXPECT_EQ(read(real / "added.txt"), "also made by a person\n");
}

TEST_F(WorkspaceOverlay, AcceptOfNamedPathsLeavesTheRest) {
  Overlay o = create();
  RUN_SESSION(kEveryWrite);
  auto accepted = o.accept({"newdir/z", "moved.txt", "./dir/"});
  ASSERT_TRUE(accepted) << accepted.error().describe();
  EXPECT_TRUE(accepted->conflicts.empty());
  EXPECT_TRUE(accepted->refused.empty()) << to_json(*accepted).dump();
  EXPECT_EQ(accepted->applied, (std::vector<std::string>{"dir/q", "dir/x", "dir/y", "moved.txt",
                                                         "newdir", "newdir/z"}));
  EXPECT_EQ(read(real / "newdir/z"), "z\n");
  EXPECT_EQ(read(real / "moved.txt"), "move me\n");
  EXPECT_FALSE(fs::exists(real / "mv.txt"));
  EXPECT_EQ(snapshot(real / "dir"), (std::map<std::string, std::string>{{"q", "file 420 q\n"}}));
  EXPECT_EQ(read(real / "a.txt"), "alpha\n");
  std::vector<std::string> rest;
  for (const auto& line : kEveryWriteStatus)
    if (!line.contains("newdir/z") && !line.contains("moved.txt") && line != "added newdir" &&
        !line.contains(" dir/"))
      rest.push_back(line);
  EXPECT_EQ(lines_of(status_of(o)), rest);
  // The rest still lands afterwards.
  auto later = o.accept();
  ASSERT_TRUE(later) << later.error().describe();
  EXPECT_TRUE(later->conflicts.empty());
  EXPECT_TRUE(status_of(o).changes.empty());
  EXPECT_FALSE(o.accept({"../etc"}));
}

TEST_F(WorkspaceOverlay, SymlinksThatEscapeAreRefused) {
  Overlay o = create();
  RUN_SESSION(
      "ln -s /etc/passwd absolute\n"
      "mkdir sub && ln -s ../../outside sub/climbs\n"
      "ln -s ../a.txt sub/inside\n"
      "ln -s dir/../a.txt fine\n");
  auto accepted = o.accept();
  ASSERT_TRUE(accepted) << accepted.error().describe();
  ASSERT_EQ(accepted->refused.size(), 2u) << to_json(*accepted).dump();
  EXPECT_EQ(accepted->refused[0].path, "absolute");
  EXPECT_TRUE(accepted->refused[0].reason.contains("absolute")) << accepted->refused[0].reason;
  EXPECT_EQ(accepted->refused[1].path, "sub/climbs");
  EXPECT_TRUE(accepted->refused[1].reason.contains("climbs out")) << accepted->refused[1].reason;
  EXPECT_FALSE(fs::is_symlink(real / "absolute"));
  EXPECT_FALSE(fs::is_symlink(real / "sub/climbs"));
  EXPECT_EQ(fs::read_symlink(real / "sub/inside"), "../a.txt");
  EXPECT_EQ(fs::read_symlink(real / "fine"), "dir/../a.txt");
  EXPECT_EQ(lines_of(status_of(o)),
            (std::vector<std::string>{"added absolute", "added sub/climbs"}));
}

TEST_F(WorkspaceOverlay, ASymlinkInTheRealTreeNeverLeadsAWriteOutside) {
  write(real / "sub/keep.txt", "keep\n");
  const fs::path outside = tmp / "outside";
  fs::create_directories(outside);
  Overlay o = create();
  RUN_SESSION("echo planted > sub/new.txt; echo changed > sub/keep.txt");
  // After the session, someone swaps the directory for a symlink to elsewhere.
  fs::rename(real / "sub", tmp / "sub-moved");
  fs::create_directory_symlink(outside, real / "sub");
  for (const bool force : {false, true}) {
    auto accepted = o.accept({}, force);
    ASSERT_TRUE(accepted) << accepted.error().describe();
    EXPECT_TRUE(accepted->applied.empty()) << to_json(*accepted).dump();
    EXPECT_TRUE(fs::is_empty(outside));
  }
  auto accepted = o.accept();
  ASSERT_TRUE(accepted);
  // keep.txt: the manifest's entry is gone from where it was (a conflict); new.txt: refused as
  // its parent is now a symlink.
  ASSERT_EQ(accepted->conflicts.size(), 1u) << to_json(*accepted).dump();
  EXPECT_EQ(accepted->conflicts[0].path, "sub/keep.txt");
  ASSERT_EQ(accepted->refused.size(), 1u) << to_json(*accepted).dump();
  EXPECT_EQ(accepted->refused[0].path, "sub/new.txt");
  EXPECT_TRUE(accepted->refused[0].reason.contains("is a symbolic link, not a directory"))
      << accepted->refused[0].reason;
}

TEST_F(WorkspaceOverlay, AFifoInTheUpperLayerNeverBlocks) {
  Overlay o = create();
  RUN_SESSION("mkfifo pipe; echo changed > a.txt; echo changed > b.txt");
  // Planted straight into upper/, over a file the session changed.
  fs::remove(layer / "upper/b.txt");
  ASSERT_EQ(::mkfifo((layer / "upper/b.txt").c_str(), 0644), 0);
  EXPECT_EQ(lines_of(status_of(o)),
            (std::vector<std::string>{"modified a.txt", "type_changed b.txt", "added pipe"}));
  auto diff = o.diff();
  ASSERT_TRUE(diff) << diff.error().describe();
  EXPECT_TRUE(diff->contains("+changed")) << *diff;
  auto accepted = o.accept();
  ASSERT_TRUE(accepted) << accepted.error().describe();
  EXPECT_EQ(accepted->applied, std::vector<std::string>{"a.txt"});
  ASSERT_EQ(accepted->refused.size(), 2u);
  EXPECT_TRUE(accepted->refused[0].reason.contains("FIFO"));
  EXPECT_EQ(read(real / "b.txt"), "bravo bravo\n");
  EXPECT_FALSE(fs::exists(real / "pipe"));
  // A FIFO for the manifest: opening the overlay fails, naming it, and does not block.
  fs::remove(layer / "manifest");
  ASSERT_EQ(::mkfifo((layer / "manifest").c_str(), 0644), 0);
  auto reopened = Overlay::open(layer);
  ASSERT_FALSE(reopened);
  EXPECT_TRUE(reopened.error().message.contains("manifest")) << reopened.error().message;
  EXPECT_TRUE(reopened.error().message.contains("FIFO")) << reopened.error().message;
}

TEST_F(WorkspaceOverlay, TheLayerSurvivesACrashAndIsFoundAgain) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    auto o = Overlay::create(real, layer, session("crashing"));
    if (!o) ::_exit(1);
    std::abort();  // no destructor, no cleanup
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status));
  RUN_SESSION("echo more >> a.txt; rm del.txt");
  auto o = Overlay::open(layer);
  ASSERT_TRUE(o) << o.error().describe();
  EXPECT_EQ(o->session_id(), "crashing");
  EXPECT_EQ(o->lower(), fs::canonical(real));
  EXPECT_EQ(lines_of(status_of(*o)),
            (std::vector<std::string>{"modified a.txt", "deleted del.txt"}));
  auto accepted = o->accept();
  ASSERT_TRUE(accepted) << accepted.error().describe();
  EXPECT_EQ(accepted->applied.size(), 2u);
  EXPECT_FALSE(fs::exists(real / "del.txt"));
}

TEST_F(WorkspaceOverlay, RejectRemovesTheLayerAndNothingElse) {
  const fs::path outside = tmp / "outside";
  write(outside / "precious", "precious\n");
  Overlay o = create();
  RUN_SESSION("echo x > a.txt; mkdir -p deep/er; echo y > deep/er/z; ln -s " + outside.string() +
              " escape");
  ASSERT_TRUE(fs::exists(layer / "work/work"));  // left by overlayfs, mode 000
  // A directory without any access, planted in upper/.
  fs::create_directories(layer / "upper/locked/inner");
  fs::permissions(layer / "upper/locked", fs::perms::none);
  const auto before = snapshot(real);
  ASSERT_TRUE(o.reject());
  EXPECT_FALSE(fs::exists(layer));
  EXPECT_EQ(read(outside / "precious"), "precious\n");
  EXPECT_EQ(snapshot(real), before);
  EXPECT_FALSE(Overlay::open(layer));
}

TEST_F(WorkspaceOverlay, RenamedDirectoryWithRedirectDir) {
  Overlay o = create();
  RUN_SESSION_WITH("mv olddir newdir2; echo added > newdir2/g", mount_with("redirect_dir=on"));
  EXPECT_EQ(lines_of(status_of(o)),
            (std::vector<std::string>{"added newdir2", "renamed olddir/f -> newdir2/f",
                                      "added newdir2/g", "deleted olddir"}));
  // Naming one path of the renamed directory lands all of it.
  auto accepted = o.accept({"newdir2/g"});
  ASSERT_TRUE(accepted) << accepted.error().describe();
  EXPECT_EQ(accepted->applied.size(), 4u) << to_json(*accepted).dump();
  EXPECT_EQ(read(real / "newdir2/f"), "f in old dir\n");
  EXPECT_EQ(read(real / "newdir2/g"), "added\n");
  EXPECT_FALSE(fs::exists(real / "olddir"));
  EXPECT_TRUE(status_of(o).changes.empty());
  EXPECT_TRUE(fs::is_empty(layer / "upper"));
}

TEST_F(WorkspaceOverlay, UserNamespaceLayersUseUserXattrs) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to hand the tree to another user";
  fs::permissions(tmp.path(), fs::perms(0755));
  for (const auto& e : fs::recursive_directory_iterator(real))
    ASSERT_EQ(::lchown(e.path().c_str(), 65534, 65534), 0);
  ASSERT_EQ(::chown(real.c_str(), 65534, 65534), 0);
  auto o = Overlay::create(real, layer, [] {
    CreateOptions user;
    user.xattr = XattrNamespace::User;
    return user;
  }());
  ASSERT_TRUE(o) << o.error().describe();
  for (const char* d : {"", "upper", "work"})
    ASSERT_EQ(::chown((layer / d).c_str(), 65534, 65534), 0);
  fs::create_directories(mnt);
  ASSERT_EQ(::chown(mnt.c_str(), 65534, 65534), 0);
  RUN_SESSION_WITH("rm -r dir && mkdir dir && echo q > dir/q; rm del.txt", mount_with("", true));
  EXPECT_EQ(lines_of(status_of(*o)), (std::vector<std::string>{"deleted del.txt", "added dir/q",
                                                               "deleted dir/x", "deleted dir/y"}));
  auto reopened = Overlay::open(layer);
  ASSERT_TRUE(reopened);
  EXPECT_EQ(reopened->xattr_namespace(), XattrNamespace::User);
}

TEST_F(WorkspaceOverlay, MalformedLayerFilesAreTypedErrors) {
  Overlay o = create();
  write(layer / ".kernex-overlay.json", "{\"version\": 1, \"lower\": 7}");
  auto bad_meta = Overlay::open(layer);
  ASSERT_FALSE(bad_meta);
  EXPECT_EQ(bad_meta.error().code, ErrorCode::Parse);
  EXPECT_TRUE(bad_meta.error().message.contains(".kernex-overlay.json"));
  fs::remove(layer / ".kernex-overlay.json");
  fs::create_symlink(real / "a.txt", layer / ".kernex-overlay.json");
  EXPECT_FALSE(Overlay::open(layer));

  Overlay fresh = [&] {
    fs::remove_all(layer);
    return create();
  }();
  const std::string manifest = read(layer / "manifest");
  write(layer / "manifest", manifest + "f 644 x 1 2 broken\n");
  auto bad_manifest = Overlay::open(layer);
  ASSERT_FALSE(bad_manifest);
  EXPECT_EQ(bad_manifest.error().code, ErrorCode::Parse);
  EXPECT_TRUE(bad_manifest.error().message.contains("line")) << bad_manifest.error().message;
  write(layer / "manifest", manifest + "f 644 1 1 2 ../escape\n");
  EXPECT_FALSE(Overlay::open(layer));

  // A directory in upper/ replaced by a symlink to elsewhere is never walked into.
  write(layer / "manifest", manifest);
  fs::create_directory_symlink(tmp / "real", layer / "upper/dir");
  auto reopened = Overlay::open(layer);
  ASSERT_TRUE(reopened);
  EXPECT_EQ(lines_of(status_of(*reopened)),
            (std::vector<std::string>{"type_changed dir", "deleted dir/x", "deleted dir/y"}));
}

// Whatever xattrs the session set (and overlayfs' own) stay out of the real tree, whether the
// upper file itself lands (same filesystem) or is copied (a layer on another one).
TEST_F(WorkspaceOverlay, AcceptedFilesCarryNoXattrsOnEitherPath) {
  std::string shm_pattern = "/dev/shm/kernex-test-XXXXXX";
  const bool have_shm = fs::is_directory("/dev/shm") && ::mkdtemp(shm_pattern.data()) != nullptr;
  std::vector<fs::path> layers = {layer};
  if (have_shm) layers.push_back(fs::path(shm_pattern) / "layer");
  for (const fs::path& where : layers) {
    SCOPED_TRACE(where.string());
    layer = where;
    Overlay o = create();
    RUN_SESSION("echo changed on " + where.string() +
                " > a.txt\n"
                "python3 -c \"import os; os.setxattr('a.txt', 'user.kernex_test', b'1')\"\n"
                "echo new > fresh.txt\n");
    auto accepted = o.accept();
    ASSERT_TRUE(accepted) << accepted.error().describe();
    EXPECT_EQ(accepted->applied, (std::vector<std::string>{"a.txt", "fresh.txt"}));
    EXPECT_EQ(read(real / "a.txt"), "changed on " + where.string() + "\n");
    EXPECT_EQ(read(real / "fresh.txt"), "new\n");
    char names[256];
    EXPECT_EQ(::llistxattr((real / "a.txt").c_str(), names, sizeof names), 0);
    EXPECT_TRUE(fs::is_empty(layer / "upper"));
    ASSERT_TRUE(o.reject());
    fs::remove(real / "fresh.txt");
  }
  if (have_shm) fs::remove_all(shm_pattern);
}

TEST_F(WorkspaceOverlay, TheManifestKeepsAnyFileName) {
  for (const std::string name :
       {"new\nline", "back\\slash", "tab\tand space", "\x7f\x01", "caf\xc3\xa9", "bad\xff-utf8"})
    write(real / "odd" / name, name);
  Overlay o = create();
  auto reopened = Overlay::open(layer);
  ASSERT_TRUE(reopened) << reopened.error().describe();
  EXPECT_TRUE(status_of(*reopened).changes.empty());
  RUN_SESSION("rm odd/*");
  const Status s = status_of(*reopened);
  ASSERT_EQ(s.changes.size(), 6u);
  EXPECT_EQ(s.changes[0].path, "odd/back\\slash");
  EXPECT_EQ(s.changes[5].path, "odd/\x7f\x01");
  auto diff = reopened->diff({"odd"});
  ASSERT_TRUE(diff);
  EXPECT_TRUE(diff->contains("diff --git \"a/odd/new\\nline\" \"b/odd/new\\nline\"\n")) << *diff;
  EXPECT_TRUE(to_json(s).dump().contains("bad\xef\xbf\xbd-utf8"));  // U+FFFD in JSON
  auto accepted = reopened->accept();
  ASSERT_TRUE(accepted) << accepted.error().describe();
  EXPECT_EQ(accepted->applied.size(), 6u);
  EXPECT_TRUE(fs::is_empty(real / "odd"));
}

// The layer directory's own entries, besides upper/ and work/.
std::vector<std::string> layer_extras(const fs::path& layer) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(layer)) {
    const std::string name = e.path().filename().string();
    if (name != "upper" && name != "work" && name != "manifest" && name != ".kernex-overlay.json")
      out.push_back(name);
  }
  return out;
}

// Written straight into upper/ as overlayfs leaves a modified file (no mount needed): what accept
// replaces or deletes goes to a trash in the layer directory, gone once the Overlay is.
TEST_F(WorkspaceOverlay, WhatAcceptReplacesLeavesWithTheTrash) {
  const fs::path outside = tmp / "outside";
  write(outside / "precious", "precious\n");
  {
    Overlay o = create();
    write(layer / "upper/a.txt", "alpha\nmore\n", fs::perms(0600));
    write(layer / "upper/dir/x", "x file changed\n");
    write(layer / "upper/del.txt", "");  // a whiteout, in the form an unprivileged mount makes
    const std::string ns = o.xattr_namespace() == XattrNamespace::Trusted ? "trusted" : "user";
    ASSERT_EQ(
        ::setxattr((layer / "upper/del.txt").c_str(), (ns + ".overlay.whiteout").c_str(), "", 0, 0),
        0);
    auto accepted = o.accept();
    ASSERT_TRUE(accepted) << accepted.error().describe();
    EXPECT_EQ(accepted->applied.size(), 3u) << to_json(*accepted).dump();
    EXPECT_EQ(read(real / "a.txt"), "alpha\nmore\n");
    EXPECT_EQ(fs::status(real / "a.txt").permissions(), fs::perms(0600));
    EXPECT_EQ(read(real / "dir/x"), "x file changed\n");
    EXPECT_FALSE(fs::exists(real / "del.txt"));
    EXPECT_TRUE(fs::is_empty(layer / "upper"));
    EXPECT_TRUE(status_of(o).changes.empty());
  }
  EXPECT_EQ(layer_extras(layer), std::vector<std::string>{});
  // A trash left by a process that died is removed once the layer is opened again; a symlink
  // in it is removed, never followed.
  const fs::path left = layer / ".trash.kernex-0123456789abcdef";
  write(left / "0", "old\n");
  fs::create_directories(left / "1/locked");
  fs::create_directory_symlink(outside, left / "2");
  fs::permissions(left / "1", fs::perms::none);
  {
    auto reopened = Overlay::open(layer);
    ASSERT_TRUE(reopened) << reopened.error().describe();
  }
  EXPECT_EQ(layer_extras(layer), std::vector<std::string>{});
  EXPECT_EQ(read(outside / "precious"), "precious\n");
}

TEST_F(WorkspaceOverlay, CreateRefusesALayerInsideTheTreeAndTooManyEntries) {
  auto inside = Overlay::create(real, real / "layer");
  ASSERT_FALSE(inside);
  EXPECT_EQ(inside.error().code, ErrorCode::Usage);
  CreateOptions small;
  small.limits.max_entries = 5;
  auto too_many = Overlay::create(real, layer, small);
  ASSERT_FALSE(too_many);
  EXPECT_EQ(too_many.error().code, ErrorCode::Limit);
  EXPECT_TRUE(too_many.error().message.contains("more than 5 entries")) << too_many.error().message;
}

}  // namespace
