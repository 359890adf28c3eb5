// A provider that echoes the API key in its error body: no 8-byte piece of the key may reach any
// output or file of the run (stdout, stderr, the data dir with its trajectory and store), however
// the body is cut, escaped or repeated on its way there.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cli_runner.hpp"
#include "fake_http_server.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;

namespace {

const std::string kKey = "sk-proj-Zq8vX2mN4bR7tY1wK9pL3sD6fG0hJ5cVxQeTuIoAaBb";
constexpr std::size_t kPiece = 8;

class CliRedaction : public ::testing::Test {
 protected:
  void SetUp() override {
    env_ = kernex::testing::clean_environment();
    env_["KERNEX_DATA_DIR"] = (dir_ / "data").string();
    env_["OPENAI_API_KEY"] = kKey;
  }

  // Runs `kernex run` against a server answering every request with `status` and `body`.
  kernex::testing::CliOutcome run_against(int status, const std::string& body, bool json) {
    kernex::test::FakeHttpServer server;
    for (int i = 0; i < 4; ++i) server.push(kernex::test::FakeHttpServer::json(status, body));
    std::vector<std::string> args{"run",
                                  "--provider",
                                  "openai",
                                  "--provider-opt",
                                  "base_url=" + server.url("/v1"),
                                  "--provider-opt",
                                  "max_retries=0",
                                  "hello"};
    if (json) args.insert(args.begin() + 1, "--json");
    return kernex::testing::run_cli(dir_.path(), env_, args);
  }

  // Every 8-byte piece of the key found in the run's outputs or in any file under the test dir.
  std::vector<std::string> leaks(const kernex::testing::CliOutcome& o) const {
    std::vector<std::pair<std::string, std::string>> texts{{"stdout", o.out}, {"stderr", o.err}};
    for (const auto& e : fs::recursive_directory_iterator(dir_.path())) {
      if (e.is_regular_file()) texts.emplace_back(e.path().string(), kernex::testing::slurp(e));
    }
    std::vector<std::string> found;
    for (const auto& [where, text] : texts) {
      for (std::size_t i = 0; i + kPiece <= kKey.size(); ++i) {
        const std::string piece = kKey.substr(i, kPiece);
        if (text.find(piece) != std::string::npos) found.push_back(where + ": " + piece);
      }
    }
    return found;
  }

  kernex::testing::TempDir dir_;
  std::map<std::string, std::string> env_;
};

std::string pad(std::size_t n) { return std::string(n, 'x'); }

// The provider's message is cut at 1024 bytes and the body at 2048: a key across each cut.
std::string key_across_the_cuts() {
  const std::string head = R"({"error":{"message":")";
  std::string message = pad(1024 - 20) + kKey + " invalid";
  std::string body = head + message + "\",\"param\":\"";
  body += pad(2048 - 20 - body.size()) + kKey + "\"}}";
  return body;
}

TEST_F(CliRedaction, KeySplitByTheExcerptCutsLeavesNoPiece) {
  for (bool json : {false, true}) {
    auto o = run_against(401, key_across_the_cuts(), json);
    EXPECT_NE(o.exit_code, 0);
    EXPECT_NE(o.err.find("HTTP 401"), std::string::npos) << o.err;
    const auto found = leaks(o);
    EXPECT_TRUE(found.empty()) << "json=" << json << ": " << found.size()
                               << " pieces, first: " << (found.empty() ? "" : found.front());
  }
}

TEST_F(CliRedaction, KeyAtTheEndEscapedOrRepeatedLeavesNoPiece) {
  const std::vector<std::string> bodies = {
      // Not JSON, the key as its very last bytes, past the cut.
      "<html>" + pad(3000) + kKey,
      // The key JSON-escaped: \u escapes inside it, decoded whole by the error's detail.
      R"({"error":{"message":"bad key \u0073k-proj-Zq8vX2mN4bR7tY1w\u004b9pL3sD6fG0hJ5cVxQeTuIoAaBb"}})",
      // Repeated, back to back and separated, across both cuts.
      R"({"error":{"message":")" +
          [] {
            std::string s;
            for (int i = 0; i < 80; ++i) s += kKey + (i % 3 ? "" : " ");
            return s;
          }() +
          "\"}}",
  };
  for (const auto& body : bodies) {
    auto o = run_against(400, body, false);
    EXPECT_NE(o.exit_code, 0);
    const auto found = leaks(o);
    EXPECT_TRUE(found.empty()) << body.substr(0, 60) << ": " << found.size()
                               << " pieces, first: " << (found.empty() ? "" : found.front());
  }
}

}  // namespace
