// API keys for `kernex serve` (kernex/server/keys.hpp): the keys file, lookups, revocation, reload.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "kernex/json.hpp"
#include "kernex/server/keys.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using namespace kernex::server;
using kernex::ErrorCode;

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

unsigned mode_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::stat(p.c_str(), &st), 0);
  return st.st_mode & 07777;
}

class ServeKeys : public ::testing::Test {
 protected:
  // Writes a keys file as the server would (mode 0600) with the given text.
  fs::path write_keys(const std::string& text) {
    auto p = dir_.write("keys.json", text);
    ::chmod(p.c_str(), 0600);
    return p;
  }
  std::string load_error(const std::string& text) {
    auto store = KeyStore::load(write_keys(text));
    if (store) return "(loaded)";
    EXPECT_EQ(store.error().code, ErrorCode::Config);
    return store.error().message;
  }

  kernex::testing::TempDir dir_;
  fs::path file_ = dir_ / "conf" / "keys.json";
};

constexpr const char* kDigest = "0000000000000000000000000000000000000000000000000000000000000000";

TEST_F(ServeKeys, AMissingFileIsAnEmptyStore) {
  auto store = KeyStore::load(file_);
  ASSERT_TRUE(store) << store.error().describe();
  EXPECT_TRUE(store->list().empty());
  EXPECT_FALSE(store->tenant_for("kx-anything"));
  EXPECT_FALSE(fs::exists(file_));  // loading never creates it
}

TEST_F(ServeKeys, AddStoresOnlyTheDigestInAPrivateFileAndTheKeyResolvesToItsTenant) {
  auto store = KeyStore::load(file_);
  ASSERT_TRUE(store);
  auto key = store->add("acme");
  ASSERT_TRUE(key) << key.error().describe();
  ASSERT_EQ(key->size(), 3u + 43u);  // "kx-" + 32 bytes in unpadded base64url
  EXPECT_TRUE(key->starts_with("kx-"));
  EXPECT_EQ(
      key->find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", 3),
      std::string::npos);

  EXPECT_EQ(mode_of(file_), 0600u);
  const std::string text = read_text(file_);
  EXPECT_EQ(text.find(key->substr(3)), std::string::npos) << "the key itself must never be stored";
  EXPECT_FALSE(fs::exists(file_.string() + ".tmp-" + std::to_string(::getpid())));

  auto entries = store->list();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].tenant, "acme");
  EXPECT_EQ(entries[0].sha256.size(), 64u);
  EXPECT_NE(text.find(entries[0].sha256), std::string::npos);
  EXPECT_EQ(entries[0].created.size(), 20u);  // 2025-01-31T12:00:00Z
  EXPECT_EQ(entries[0].created.back(), 'Z');
  EXPECT_FALSE(entries[0].revoked);

  EXPECT_EQ(store->tenant_for(*key), "acme");
  std::string altered = *key;
  altered.back() = altered.back() == 'A' ? 'B' : 'A';
  EXPECT_FALSE(store->tenant_for(altered));
  EXPECT_FALSE(store->tenant_for(""));
  EXPECT_FALSE(store->tenant_for(entries[0].sha256)) << "the digest is not a key";

  auto again = KeyStore::load(file_);
  ASSERT_TRUE(again) << again.error().describe();
  EXPECT_EQ(again->tenant_for(*key), "acme");
}

TEST_F(ServeKeys, EveryKeyIsDistinctAndResolvesToItsOwnTenant) {
  auto store = KeyStore::load(file_);
  ASSERT_TRUE(store);
  auto a1 = store->add("a"), a2 = store->add("a"), b = store->add("b");
  ASSERT_TRUE(a1 && a2 && b);
  EXPECT_NE(*a1, *a2);
  EXPECT_EQ(store->tenant_for(*a1), "a");
  EXPECT_EQ(store->tenant_for(*a2), "a");
  EXPECT_EQ(store->tenant_for(*b), "b");
  auto entries = store->list();
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_NE(entries[0].id, entries[1].id);
}

TEST_F(ServeKeys, RevokingATenantRevokesAllItsKeysAndOnlyThose) {
  auto store = KeyStore::load(file_);
  ASSERT_TRUE(store);
  auto a1 = store->add("a"), a2 = store->add("a"), b = store->add("b");
  ASSERT_TRUE(a1 && a2 && b);
  auto n = store->revoke("a");
  ASSERT_TRUE(n) << n.error().describe();
  EXPECT_EQ(*n, 2u);
  EXPECT_FALSE(store->tenant_for(*a1));
  EXPECT_FALSE(store->tenant_for(*a2));
  EXPECT_EQ(store->tenant_for(*b), "b");
  EXPECT_EQ(*store->revoke("a"), 0u);
  EXPECT_EQ(*store->revoke("nobody"), 0u);

  // Revocation is kept in the file: the entries stay, marked.
  auto reread = KeyStore::load(file_);
  ASSERT_TRUE(reread);
  EXPECT_FALSE(reread->tenant_for(*a1));
  int revoked = 0;
  for (const auto& e : reread->list()) revoked += e.revoked ? 1 : 0;
  EXPECT_EQ(revoked, 2);
}

TEST_F(ServeKeys, RevokeIdRevokesOneKey) {
  auto store = KeyStore::load(file_);
  ASSERT_TRUE(store);
  auto k1 = store->add("a"), k2 = store->add("a");
  ASSERT_TRUE(k1 && k2);
  const std::string id = store->list()[0].id;
  EXPECT_EQ(*store->revoke_id(id), 1u);
  EXPECT_EQ(*store->revoke_id(id), 0u);
  EXPECT_EQ(*store->revoke_id("nosuchid"), 0u);
  EXPECT_FALSE(store->tenant_for(*k1));
  EXPECT_EQ(store->tenant_for(*k2), "a");
  EXPECT_EQ(store->revoke_id("../x").error().code, ErrorCode::Usage);
}

TEST_F(ServeKeys, TenantNamesAreSafeDirectoryNames) {
  const std::vector<std::string> good = {"a", "acme-corp", "A_b.c-9", "...x", std::string(64, 'x')};
  for (const auto& ok : good) {
    EXPECT_TRUE(valid_tenant_name(ok)) << ok;
  }
  const std::vector<std::string> bad_names = {
      "", ".", "..", "a/b", "/", "a b", "a\nb", "é", std::string(65, 'x'), std::string("a\0b", 3)};
  for (const auto& bad : bad_names) {
    EXPECT_FALSE(valid_tenant_name(bad)) << bad;
    EXPECT_FALSE(check_tenant_name(bad));
  }
  auto store = KeyStore::load(file_);
  ASSERT_TRUE(store);
  auto refused = store->add("..");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::Usage);
  EXPECT_NE(refused.error().message.find("[A-Za-z0-9_.-]"), std::string::npos);
  EXPECT_FALSE(fs::exists(file_));
}

TEST_F(ServeKeys, AFileOthersCanReadIsRefusedNamingTheFileAndTheMode) {
  auto store = KeyStore::load(file_);
  ASSERT_TRUE(store && store->add("a"));
  ASSERT_EQ(::chmod(file_.c_str(), 0640), 0);
  auto refused = KeyStore::load(file_);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::Config);
  EXPECT_NE(refused.error().message.find(file_.string()), std::string::npos);
  EXPECT_NE(refused.error().message.find("0640"), std::string::npos);
  EXPECT_NE(refused.error().message.find("expected mode 0600"), std::string::npos);
  // Nor is it written to: adding must not silently keep a readable file of secrets.
  EXPECT_FALSE(store->add("b"));
  ASSERT_EQ(::chmod(file_.c_str(), 0604), 0);
  EXPECT_FALSE(KeyStore::load(file_));
}

TEST_F(ServeKeys, ASymlinkOrADirectoryIsRefused) {
  auto target = write_keys(R"({"version": 1, "keys": []})");
  fs::create_directories(file_.parent_path());
  fs::create_symlink(target, file_);
  auto link = KeyStore::load(file_);
  ASSERT_FALSE(link);
  EXPECT_EQ(link.error().code, ErrorCode::Config);
  EXPECT_NE(link.error().message.find("symlink"), std::string::npos);

  fs::create_directories(dir_ / "d");
  ::chmod((dir_ / "d").c_str(), 0700);
  auto d = KeyStore::load(dir_ / "d");
  ASSERT_FALSE(d);
  EXPECT_NE(d.error().message.find("regular file"), std::string::npos);
}

TEST_F(ServeKeys, MalformedFilesAreTypedErrorsNamingWhatWasExpected) {
  EXPECT_NE(load_error("not json").find("expected a JSON object"), std::string::npos);
  EXPECT_NE(load_error("[]").find("expected a JSON object"), std::string::npos);
  EXPECT_NE(load_error(R"({"keys": []})").find("version: expected 1"), std::string::npos);
  EXPECT_NE(load_error(R"({"version": 2, "keys": []})").find("version: expected 1"),
            std::string::npos);
  EXPECT_NE(load_error(R"({"version": 1})").find("keys: expected an array"), std::string::npos);
  EXPECT_NE(load_error(R"({"version": 1, "keys": [], "extra": 1})").find("unknown field 'extra'"),
            std::string::npos);
  EXPECT_NE(load_error(R"({"version": 1, "keys": [3]})").find("keys[0]: expected an object"),
            std::string::npos);

  auto entry = [](const std::string& fields) {
    return R"({"version": 1, "keys": [)" + fields + "]}";
  };
  const std::string good =
      std::string(R"("id": "k1", "tenant": "a", "sha256": ")") + kDigest + R"(", "created": "t")";
  EXPECT_EQ(load_error(entry("{" + good + "}")), "(loaded)");
  EXPECT_NE(load_error(entry("{" + good + R"(, "revoked": true})"))
                .find("keys[0]: revoked: expected a string"),
            std::string::npos);
  EXPECT_NE(load_error(entry("{" + good + R"(, "key": "kx-secret"})")).find("unknown field 'key'"),
            std::string::npos);
  EXPECT_NE(load_error(entry(R"({"id": "k1", "tenant": "a", "created": "t"})"))
                .find("sha256: expected a string"),
            std::string::npos);
  EXPECT_NE(load_error(entry(R"({"id": "k1", "tenant": "a", "sha256": "abc", "created": "t"})"))
                .find("sha256: expected 64 lower-case hex digits"),
            std::string::npos);
  EXPECT_NE(load_error(entry(R"({"id": 1, "tenant": "a", "sha256": "x", "created": "t"})"))
                .find("id: expected a string"),
            std::string::npos);
  std::string dotdot = good;
  dotdot.replace(dotdot.find("\"a\""), 3, "\"..\"");
  EXPECT_NE(load_error(entry("{" + dotdot + "}")).find("keys[0]: tenant: tenant name '..'"),
            std::string::npos);
  EXPECT_NE(load_error(entry("{" + good + "}, {" + good + "}")).find("keys[1].id: duplicate id"),
            std::string::npos);
  // Deeply nested input is refused rather than recursed into.
  EXPECT_NE(load_error(std::string(100000, '[')).find("expected a JSON object"), std::string::npos);
}

TEST_F(ServeKeys, ReloadIfChangedPicksUpKeysAddedAndRevokedElsewhere) {
  auto server = KeyStore::load(file_);
  ASSERT_TRUE(server);
  auto unchanged = server->reload_if_changed();
  ASSERT_TRUE(unchanged);
  EXPECT_FALSE(*unchanged);

  auto cli = KeyStore::load(file_);  // `kernex serve keys add` in another process
  ASSERT_TRUE(cli);
  auto key = cli->add("acme");
  ASSERT_TRUE(key);
  EXPECT_FALSE(server->tenant_for(*key));
  auto reloaded = server->reload_if_changed();
  ASSERT_TRUE(reloaded) << reloaded.error().describe();
  EXPECT_TRUE(*reloaded);
  EXPECT_EQ(server->tenant_for(*key), "acme");
  EXPECT_FALSE(*server->reload_if_changed());

  ASSERT_TRUE(KeyStore::load(file_)->revoke("acme"));
  EXPECT_TRUE(*server->reload_if_changed());
  EXPECT_FALSE(server->tenant_for(*key));

  // A broken file keeps the keys in force and reports why.
  auto key2 = cli->add("other");
  ASSERT_TRUE(server->reload_if_changed());
  ASSERT_EQ(::chmod(file_.c_str(), 0644), 0);
  std::ofstream(file_, std::ios::app) << "garbage";
  auto broken = server->reload_if_changed();
  ASSERT_FALSE(broken);
  EXPECT_EQ(server->tenant_for(*key2), "other");

  // A deleted file revokes everything.
  fs::remove(file_);
  EXPECT_TRUE(*server->reload_if_changed());
  EXPECT_FALSE(server->tenant_for(*key2));
}

TEST_F(ServeKeys, WritersWithAStaleViewDontLoseEachOthersKeys) {
  auto first = KeyStore::load(file_), second = KeyStore::load(file_);
  ASSERT_TRUE(first && second);
  auto k1 = first->add("a");
  auto k2 = second->add("b");  // `second` never saw k1; its write must keep it
  ASSERT_TRUE(k1 && k2);
  auto all = KeyStore::load(file_);
  ASSERT_TRUE(all);
  EXPECT_EQ(all->list().size(), 2u);
  EXPECT_EQ(all->tenant_for(*k1), "a");
  EXPECT_EQ(all->tenant_for(*k2), "b");
  EXPECT_EQ(second->tenant_for(*k1), "a");  // the writer's view is the merged file
}

// The actions of `kernex serve keys` (cli/ parses the arguments; tests/unit/cli_serve_admin_test
// runs the command line).
TEST_F(ServeKeys, TheKeysActionsAddListAndRevoke) {
  std::ostringstream out, err;
  ASSERT_TRUE(keys_add(file_, "acme", out, err));
  const std::string key = out.str().substr(0, out.str().find('\n'));
  EXPECT_TRUE(key.starts_with("kx-"));
  EXPECT_NE(err.str().find("only this once"), std::string::npos);
  EXPECT_EQ(KeyStore::load(file_)->tenant_for(key), "acme");

  out.str("");
  ASSERT_TRUE(keys_list(file_, out));
  EXPECT_NE(out.str().find("\tacme\t"), std::string::npos);
  EXPECT_NE(out.str().find("active"), std::string::npos);
  EXPECT_EQ(out.str().find(key.substr(3)), std::string::npos);

  out.str("");
  ASSERT_TRUE(keys_revoke(file_, "acme", out));
  EXPECT_EQ(out.str(), "revoked 1 key\n");
  EXPECT_FALSE(KeyStore::load(file_)->tenant_for(key));
  out.str("");
  ASSERT_TRUE(keys_list(file_, out));
  EXPECT_NE(out.str().find("revoked 20"), std::string::npos);

  ASSERT_TRUE(keys_add(file_, "acme", out, err));
  const std::string id = KeyStore::load(file_)->list().back().id;
  out.str("");
  ASSERT_TRUE(keys_revoke_id(file_, id, out));
  EXPECT_EQ(out.str(), "revoked 1 key\n");
}

TEST_F(ServeKeys, TheKeysActionsReportTypedErrors) {
  std::ostringstream out, err;
  auto bad_tenant = keys_add(file_, "../etc", out, err);
  ASSERT_FALSE(bad_tenant);
  EXPECT_EQ(bad_tenant.error().code, ErrorCode::Usage);
  EXPECT_TRUE(out.str().empty());
  EXPECT_FALSE(fs::exists(file_));

  auto bad = write_keys("{}");
  auto listed = keys_list(bad, out);
  ASSERT_FALSE(listed);
  EXPECT_EQ(listed.error().code, ErrorCode::Config);
  EXPECT_NE(listed.error().describe().find(bad.string()), std::string::npos);
}

}  // namespace
