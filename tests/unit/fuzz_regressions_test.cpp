// Replays every committed fuzz input (fuzz/corpus/<target>: seeds; fuzz/regressions/<target>:
// inputs that once crashed, leaked or hung) through the same harnesses libFuzzer runs, so a
// finding stays fixed in the ordinary ASan + UBSan test run. One test per target.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "fuzz.hpp"

namespace fs = std::filesystem;

namespace kernex::fuzz {

std::map<std::string, Target, std::less<>>& targets() {
  static std::map<std::string, Target, std::less<>> all;
  return all;
}

bool register_target(std::string_view name, Target target) {
  targets().emplace(std::string(name), target);
  return true;
}

}  // namespace kernex::fuzz

namespace {

std::vector<fs::path> inputs_of(const std::string& target) {
  std::vector<fs::path> files;
  for (const char* kind : {"corpus", "regressions"}) {
    const fs::path dir = fs::path(KERNEX_FUZZ_DIR) / kind / target;
    if (!fs::is_directory(dir)) continue;
    for (const auto& entry : fs::directory_iterator(dir))
      if (entry.is_regular_file()) files.push_back(entry.path());
  }
  return files;
}

std::string slurp(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class Replay : public testing::Test {
 public:
  Replay(std::string name, kernex::fuzz::Target target) : name_(std::move(name)), target_(target) {}
  void TestBody() override {
    const auto files = inputs_of(name_);
    // Every target ships seeds: an empty corpus means a target whose inputs went missing.
    ASSERT_FALSE(files.empty()) << "no inputs under fuzz/corpus/" << name_;
    for (const auto& file : files) {
      SCOPED_TRACE(file.string());
      const std::string bytes = slurp(file);
      EXPECT_EQ(target_(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()), 0);
    }
  }

 private:
  std::string name_;
  kernex::fuzz::Target target_;
};

}  // namespace

// Harnesses register themselves from static initialisers in other files, whose order against this
// file's is unspecified: the tests are made from the registry only once main runs.
int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  for (const auto& [name, target] : kernex::fuzz::targets()) {
    testing::RegisterTest(
        "FuzzRegressions", name.c_str(), nullptr, nullptr, __FILE__, __LINE__,
        [name = name, target = target]() -> testing::Test* { return new Replay(name, target); });
  }
  return RUN_ALL_TESTS();
}
