#include "kernex/plugin_host.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "elf_symbols.hpp"
#include "env_guard.hpp"
#include "plugin_loading.hpp"
#include "temp_dir.hpp"

namespace kernex {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const fs::path kPluginDir = KERNEX_TEST_PLUGIN_DIR;

fs::path plugin_file(const std::string& stem) {
  return kPluginDir / ("libkernex-test-" + stem + ".so");
}

// Whether the dynamic loader currently has `path` mapped, without loading it.
bool is_loaded(const fs::path& path) {
  void* handle = dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
  if (handle == nullptr) return false;
  dlclose(handle);  // RTLD_NOLOAD still took a reference
  return true;
}

std::map<std::string, PluginInfo> by_file(const PluginHost& host) {
  std::map<std::string, PluginInfo> out;
  for (const PluginInfo& info : host.plugins()) out.emplace(info.path.filename().string(), info);
  return out;
}

// Sets an environment variable for one test and puts the old value back.
using kernex::test::EnvGuard;

TEST(PluginHost, DiscoveryListsGoodAndBrokenFilesWithTheirCause) {
  PluginHost host = PluginHost::discover({kPluginDir});
  auto files = by_file(host);

  for (const char* good :
       {"echo", "map-memory", "blocklist-hook", "reverse-toolbox", "throws", "null-factory"}) {
    const std::string file = plugin_file(good).filename().string();
    ASSERT_TRUE(files.contains(file)) << file;
    EXPECT_TRUE(files[file].ok()) << files[file].error->message;
    EXPECT_EQ(files[file].abi_version, kAbiVersion);
    EXPECT_EQ(files[file].version, "1.0.0");
  }
  EXPECT_EQ(files["libkernex-test-echo.so"].kind, PluginKind::Provider);
  EXPECT_EQ(files["libkernex-test-echo.so"].name, "echo");
  EXPECT_EQ(files["libkernex-test-echo.so"].description, "Echoes the current message");
  EXPECT_EQ(files["libkernex-test-map-memory.so"].kind, PluginKind::Memory);
  EXPECT_EQ(files["libkernex-test-blocklist-hook.so"].kind, PluginKind::Hook);
  EXPECT_EQ(files["libkernex-test-reverse-toolbox.so"].kind, PluginKind::Toolbox);

  const std::map<std::string, std::string> broken = {
      {"not-elf", "not a shared library"},
      {"no-descriptor", "no kernex_plugin_descriptor symbol"},
      {"abi-mismatch", "ABI version 999, this kernel speaks " + std::to_string(kAbiVersion)},
      {"unknown-kind", "unknown plugin kind 77"},
      {"empty-name", "descriptor has no name"},
      {"missing-factory",
       "provider plugin 'missing-factory' does not export kernex_create_Provider"},
      {"echo2",
       "duplicate provider plugin 'echo'; already loaded from " + plugin_file("echo").string()},
  };
  for (const auto& [stem, cause] : broken) {
    const fs::path path = plugin_file(stem);
    ASSERT_TRUE(files.contains(path.filename().string())) << path;
    const PluginInfo& info = files[path.filename().string()];
    ASSERT_FALSE(info.ok()) << path;
    EXPECT_EQ(info.error->code, ErrorCode::Plugin);
    EXPECT_THAT(info.error->message, HasSubstr(path.string() + ": ")) << stem;
    EXPECT_THAT(info.error->message, HasSubstr(cause)) << stem;
  }
  EXPECT_EQ(files.size(), 13u);
  EXPECT_EQ(files["libkernex-test-abi-mismatch.so"].abi_version, 999u);
  EXPECT_FALSE(files["libkernex-test-abi-mismatch.so"].kind.has_value());
}

TEST(PluginHost, ALibraryWithoutDescriptorIsNeverMapped) {
  EnvGuard env;
  env.unset("KERNEX_TEST_NO_DESCRIPTOR_LOADED");
  PluginHost host = PluginHost::discover({kPluginDir});
  EXPECT_EQ(std::getenv("KERNEX_TEST_NO_DESCRIPTOR_LOADED"), nullptr)
      << "its static constructor ran";
  EXPECT_FALSE(is_loaded(plugin_file("no-descriptor")));
  // Files rejected after loading (bad descriptor) are unloaded again; only good ones stay.
  EXPECT_FALSE(is_loaded(plugin_file("abi-mismatch")));
  EXPECT_FALSE(is_loaded(plugin_file("echo2")));
  EXPECT_TRUE(is_loaded(plugin_file("echo")));
}

TEST(PluginHost, GoodPluginsCreateWorkingObjectsNextToBrokenOnes) {
  PluginHost host = PluginHost::discover({kPluginDir});

  auto provider = host.create_provider("echo", Json::object());
  ASSERT_TRUE(provider) << provider.error().describe();
  EXPECT_EQ((*provider)->name(), "echo");
  std::string streamed;
  auto response = (*provider)->complete(Context("hello"), {},
                                        [&](const StreamEvent& e) { streamed += e.text; });
  ASSERT_TRUE(response) << response.error().describe();
  EXPECT_EQ(response->text, "hello");
  EXPECT_EQ(streamed, "hello");

  auto memory = host.create_memory("map", Json::object());
  ASSERT_TRUE(memory) << memory.error().describe();
  auto conversation = (*memory)->open_conversation(kernex::MemoryScope::local(),
                                                   {"cli", "alice", ""}, std::chrono::minutes(5));
  ASSERT_TRUE(conversation);
  ASSERT_TRUE(
      (*memory)->append_messages(kernex::MemoryScope::local(), *conversation,
                                 {ContextEntry::user("hi"), ContextEntry::assistant("yo")}));
  auto recent = (*memory)->recent_messages(kernex::MemoryScope::local(), *conversation, 1);
  ASSERT_TRUE(recent);
  ASSERT_EQ(recent->size(), 1u);
  EXPECT_EQ(recent->front().content, "yo");

  auto hook = host.create_hook("blocklist", Json{{"block", {"rm"}}});
  ASSERT_TRUE(hook) << hook.error().describe();
  ToolCall rm{"1", "rm", Json::object()}, ls{"2", "ls", Json::object()};
  EXPECT_TRUE((*hook)->pre_tool({}, rm).blocked);
  EXPECT_FALSE((*hook)->pre_tool({}, ls).blocked);

  auto toolbox = host.create_toolbox("reverse", Json::object());
  ASSERT_TRUE(toolbox) << toolbox.error().describe();
  auto tools = (*toolbox)->list_tools(Context());
  ASSERT_TRUE(tools);
  ASSERT_EQ(tools->size(), 1u);
  EXPECT_EQ(tools->front().name, "reverse");
  auto result = (*toolbox)->execute(Context(), {}, ToolCall{"3", "reverse", Json{{"text", "abc"}}});
  ASSERT_TRUE(result);
  EXPECT_EQ(result->content, "cba");
  EXPECT_FALSE(result->is_error);
}

TEST(PluginHost, FactoryConfigErrorNamesThePluginAndKeepsItsCause) {
  std::optional<Error> error;
  {
    PluginHost host = PluginHost::discover({kPluginDir});
    auto provider = host.create_provider("echo", Json{{"fail", true}});
    ASSERT_FALSE(provider);
    error = provider.error();
    auto hook = host.create_hook("blocklist", Json{{"block", "rm"}});
    ASSERT_FALSE(hook);
    EXPECT_THAT(hook.error().describe(), HasSubstr("'block' must be an array of strings"));
  }
  // The host and the plugin library are gone; the error must not depend on plugin code.
  EXPECT_FALSE(is_loaded(plugin_file("echo")));
  EXPECT_EQ(error->code, ErrorCode::Plugin);
  EXPECT_THAT(error->message, HasSubstr("provider plugin 'echo'"));
  EXPECT_THAT(error->message, HasSubstr(plugin_file("echo").string()));
  ASSERT_TRUE(error->cause);
  EXPECT_EQ(error->cause->code, ErrorCode::Config);
  EXPECT_EQ(error->cause->message, "echo: config key 'fail' is set");
  EXPECT_THAT(error->describe(),
              HasSubstr("echo: config key 'fail' is set: asked to fail by the test"));
}

TEST(PluginHost, ThrowingFactoryBecomesAnErrorNamingThePlugin) {
  PluginHost host = PluginHost::discover({kPluginDir});
  auto thrown = host.create_provider("throws", Json::object());
  ASSERT_FALSE(thrown);
  EXPECT_EQ(thrown.error().code, ErrorCode::Plugin);
  EXPECT_THAT(thrown.error().message,
              HasSubstr("provider plugin 'throws' (" + plugin_file("throws").string() + ")"));
  EXPECT_THAT(thrown.error().message, HasSubstr("factory threw: boom from the factory"));

  auto thrown_int = host.create_provider("throws", Json{{"int", true}});
  ASSERT_FALSE(thrown_int);
  EXPECT_THAT(thrown_int.error().message, HasSubstr("'throws'"));
  EXPECT_THAT(thrown_int.error().message, HasSubstr("non-standard exception"));
}

TEST(PluginHost, NullFromFactoryBecomesAnError) {
  PluginHost host = PluginHost::discover({kPluginDir});
  auto made = host.create_provider("null", Json::object());
  ASSERT_FALSE(made);
  EXPECT_EQ(made.error().code, ErrorCode::Plugin);
  EXPECT_THAT(made.error().message, HasSubstr("provider plugin 'null'"));
  EXPECT_THAT(made.error().message, HasSubstr("returned a null object"));
}

TEST(PluginHost, UnknownNameListsTheAvailablePluginsOfThatKind) {
  PluginHost host = PluginHost::discover({kPluginDir});
  auto provider = host.create_provider("nope", Json::object());
  ASSERT_FALSE(provider);
  EXPECT_EQ(provider.error().code, ErrorCode::Plugin);
  EXPECT_EQ(provider.error().message,
            "no provider plugin named 'nope'; available: echo, null, throws");
  auto memory = host.create_memory("echo", Json::object());
  ASSERT_FALSE(memory);
  EXPECT_EQ(memory.error().message, "no memory plugin named 'echo'; available: map");
  auto none = PluginHost().create_toolbox("reverse", Json::object());
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().message, "no toolbox plugin named 'reverse'; available: (none)");
}

TEST(PluginHost, CreatingABrokenPluginExplainsWhyItFailedToLoad) {
  PluginHost host = PluginHost::discover({kPluginDir});
  auto made = host.create_provider("missing-factory", Json::object());
  ASSERT_FALSE(made);
  EXPECT_THAT(made.error().describe(),
              HasSubstr("provider plugin 'missing-factory' failed to load"));
  EXPECT_THAT(made.error().describe(), HasSubstr("does not export kernex_create_Provider"));
}

TEST(PluginHost, FirstOfTwoDuplicatesWins) {
  PluginHost host = PluginHost::discover({kPluginDir});
  const PluginInfo* echo = host.find(PluginKind::Provider, "echo");
  ASSERT_NE(echo, nullptr);
  EXPECT_EQ(echo->path, plugin_file("echo"));
  EXPECT_EQ(echo->description, "Echoes the current message");
  EXPECT_EQ(host.find(PluginKind::Memory, "echo"), nullptr);
  EXPECT_EQ(host.find(PluginKind::Provider, "abi-mismatch"), nullptr);
}

TEST(PluginHost, AddFileReturnsTheErrorAndRecordsIt) {
  PluginHost host;
  auto bad = host.add_file(plugin_file("not-elf"));
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::Plugin);
  EXPECT_THAT(bad.error().message,
              HasSubstr(plugin_file("not-elf").string() + ": not a shared library"));
  auto missing = host.add_file(kPluginDir / "does-not-exist.so");
  ASSERT_FALSE(missing);
  EXPECT_THAT(missing.error().message, HasSubstr("does-not-exist.so: not a regular file"));
  auto good = host.add_file(plugin_file("reverse-toolbox"));
  ASSERT_TRUE(good) << good.error().describe();
  EXPECT_EQ(good->name, "reverse");
  ASSERT_EQ(host.plugins().size(), 3u);
  EXPECT_FALSE(host.plugins()[0].ok());
  EXPECT_TRUE(host.plugins()[2].ok());
}

TEST(PluginHost, MissingDirectoriesAreSkipped) {
  PluginHost host =
      PluginHost::discover({kPluginDir / "no-such-dir", kPluginDir / "libkernex-test-echo.so"});
  EXPECT_TRUE(host.plugins().empty());
}

TEST(PluginHost, ADirectoryListedTwiceIsReadOnce) {
  const std::size_t once = PluginHost::discover({kPluginDir}).plugins().size();
  PluginHost host = PluginHost::discover(
      {kPluginDir, kPluginDir / ".", kPluginDir / ".." / kPluginDir.filename()});
  EXPECT_EQ(host.plugins().size(), once);  // not twice as many, half of them "duplicate"
}

TEST(PluginHost, ObjectKeepsItsLibraryLoadedAfterTheHostIsDestroyed) {
  const fs::path echo = plugin_file("echo");
  ASSERT_FALSE(is_loaded(echo));
  std::shared_ptr<Provider> provider;
  {
    auto host = std::make_unique<PluginHost>();
    ASSERT_TRUE(host->add_file(echo));
    auto made = host->create_provider("echo", Json{{"prefix", "> "}});
    ASSERT_TRUE(made) << made.error().describe();
    provider = *made;
    host.reset();
  }
  ASSERT_TRUE(is_loaded(echo));
  auto copy = provider;  // a second owner; the library stays until the last one goes
  provider.reset();
  ASSERT_TRUE(is_loaded(echo));
  auto response = copy->complete(Context("still here"), {}, {});
  ASSERT_TRUE(response);
  EXPECT_EQ(response->text, "> still here");
  copy.reset();
  EXPECT_FALSE(is_loaded(echo));
}

// A FIFO put where a plugin file was checked (between the regular-file test and the symbol
// check) is refused at once: a blocking open would wait for a writer for ever.
TEST(PluginHost, SymbolCheckRefusesAFifoWithoutWaiting) {
  const fs::path fifo =
      fs::temp_directory_path() / ("kernex-fifo-" + std::to_string(::getpid()) + ".so");
  fs::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto problem = detail::exported_symbol_problem(fifo, "kernex_plugin_descriptor");
  fs::remove(fifo);
  ASSERT_TRUE(problem.has_value());
  EXPECT_THAT(*problem, ::testing::HasSubstr("not a regular file"));
}

TEST(PluginHost, HostWithoutObjectsUnloadsOnDestruction) {
  const fs::path map = plugin_file("map-memory");
  {
    PluginHost host;
    ASSERT_TRUE(host.add_file(map));
    EXPECT_TRUE(is_loaded(map));
    PluginHost moved = std::move(host);
    EXPECT_TRUE(moved.create_memory("map", Json::object()));
    EXPECT_TRUE(host.plugins().empty());  // NOLINT(bugprone-use-after-move): the moved-from state
  }
  EXPECT_FALSE(is_loaded(map));
}

// In a child process (what it pins stays pinned, and this suite checks unloading elsewhere):
// discovery as a host calls it (`deferred`: files mapped at first use, as Kernel::create does) or
// mapping every good file at once.
int stay_loaded_child(bool deferred) {
  ::alarm(60);  // a child that hangs dies, and the parent's check fails instead of waiting
  ::setenv("KERNEX_PLUGINS_STAY_LOADED", "1", 1);
  {
    std::optional<detail::DeferredPluginLoading> lazily;
    if (deferred) lazily.emplace();
    PluginHost host = PluginHost::discover({kPluginDir});
    if (!host.create_provider("echo", Json::object())) return 2;
  }
  // The accepted one stays mapped; the rejected ones (a bad descriptor) were unloaded anyway.
  if (!is_loaded(plugin_file("echo"))) return 3;
  if (is_loaded(plugin_file("abi-mismatch")) || is_loaded(plugin_file("echo2"))) return 4;
  return 0;
}

void expect_stay_loaded(bool deferred) {
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) _exit(stay_loaded_child(deferred));
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died (signal " << WTERMSIG(status) << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: no echo provider; 3: echo unloaded; 4: a rejected "
                                       "plugin stayed loaded";
}

TEST(PluginHost, WithKernexPluginsStayLoadedAcceptedPluginsOutliveTheirHost) {
  expect_stay_loaded(false);
}

TEST(PluginHost, WithKernexPluginsStayLoadedDeferredPluginsOutliveTheirHostToo) {
  expect_stay_loaded(true);
}

TEST(PluginHost, DefaultDirsStartWithKernexPluginPath) {
  EnvGuard env;
  env.set("KERNEX_PLUGIN_PATH", "/opt/a::/opt/b:");
  auto dirs = PluginHost::default_dirs();
  ASSERT_GE(dirs.size(), 2u);
  EXPECT_EQ(dirs[0], fs::path("/opt/a"));
  EXPECT_EQ(dirs[1], fs::path("/opt/b"));
  // Then the plugin dir beside the libkernex this test loaded: the build tree's.
  ASSERT_EQ(dirs.size(), 3u);
  EXPECT_TRUE(fs::equivalent(dirs[2], KERNEX_PLUGIN_BUILD_DIR)) << dirs[2];

  env.unset("KERNEX_PLUGIN_PATH");
  for (const fs::path& dir : PluginHost::default_dirs()) EXPECT_TRUE(fs::is_directory(dir)) << dir;
}

TEST(PluginHost, KindNamesRoundTrip) {
  for (PluginKind k :
       {PluginKind::Provider, PluginKind::Memory, PluginKind::Hook, PluginKind::Toolbox}) {
    EXPECT_EQ(plugin_kind_from_string(to_string(k)), k);
  }
  EXPECT_EQ(to_string(PluginKind::Toolbox), "toolbox");
  EXPECT_EQ(plugin_kind_from_string("Provider"), std::nullopt);
  EXPECT_EQ(plugin_kind_from_string(""), std::nullopt);
}

// Deferred discovery (plugin_loading.hpp) reads each descriptor from its file: what it reports
// must be exactly what loading every library reports, for good and broken files alike.
TEST(PluginHostDeferred, DiscoveryReportsWhatLoadingReports) {
  for (const fs::path& dir : {kPluginDir, fs::path(KERNEX_PLUGIN_BUILD_DIR)}) {
    const PluginHost eager = PluginHost::discover({dir});
    std::optional<PluginHost> deferred;
    {
      const detail::DeferredPluginLoading scope;
      deferred = PluginHost::discover({dir});
    }
    ASSERT_EQ(eager.plugins().size(), deferred->plugins().size()) << dir;
    ASSERT_FALSE(eager.plugins().empty()) << dir;
    for (std::size_t i = 0; i < eager.plugins().size(); ++i) {
      const PluginInfo& a = eager.plugins()[i];
      const PluginInfo& b = deferred->plugins()[i];
      SCOPED_TRACE(a.path.string());
      EXPECT_EQ(a.path, b.path);
      EXPECT_EQ(a.kind, b.kind);
      EXPECT_EQ(a.name, b.name);
      EXPECT_EQ(a.version, b.version);
      EXPECT_EQ(a.description, b.description);
      EXPECT_EQ(a.abi_version, b.abi_version);
      ASSERT_EQ(a.ok(), b.ok());
      if (!a.ok()) {
        EXPECT_EQ(a.error->message, b.error->message);
      }
    }
  }
}

TEST(PluginHostDeferred, ALibraryIsMappedByItsFirstObjectAndUnmappedAfterItsLast) {
  const fs::path echo = plugin_file("echo");
  ASSERT_FALSE(is_loaded(echo));
  {
    std::optional<PluginHost> host;
    {
      const detail::DeferredPluginLoading scope;
      host = PluginHost::discover({kPluginDir});
    }
    EXPECT_FALSE(is_loaded(echo)) << "mapped by discovery";
    EXPECT_FALSE(is_loaded(plugin_file("reverse-toolbox")));
    auto provider = host->create_provider("echo", Json::object());
    ASSERT_TRUE(provider) << provider.error().describe();
    EXPECT_TRUE(is_loaded(echo));
    EXPECT_FALSE(is_loaded(plugin_file("reverse-toolbox")));
    auto response = (*provider)->complete(Context("hi"), {}, {});
    ASSERT_TRUE(response) << response.error().describe();
    EXPECT_EQ(response->text, "hi");
    host.reset();
    EXPECT_TRUE(is_loaded(echo)) << "unmapped under a live object";
  }
  EXPECT_FALSE(is_loaded(echo));
}

// Copies a test plugin into `dir` under another file name.
fs::path copy_plugin(const std::string& stem, const fs::path& dir, const std::string& as) {
  const fs::path to = dir / as;
  fs::copy_file(plugin_file(stem), to, fs::copy_options::overwrite_existing);
  return to;
}

// The file discovery read is not the file the first object maps: replaced by another plugin,
// cut short, or removed. Each is a typed error naming the file, given again on a second try.
TEST(PluginHostDeferred, AFileChangedAfterDiscoveryIsRefusedAtFirstUse) {
  testing::TempDir dir;
  const fs::path replaced = copy_plugin("echo", dir.path(), "libkernex-a.so");
  std::optional<PluginHost> host;
  {
    const detail::DeferredPluginLoading scope;
    host = PluginHost::discover({dir.path()});
  }
  ASSERT_EQ(host->plugins().size(), 1u);
  ASSERT_TRUE(host->plugins()[0].ok());
  const fs::path staged = copy_plugin("reverse-toolbox", dir.path(), "staged");
  fs::rename(staged, replaced);
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto provider = host->create_provider("echo", Json::object());
    ASSERT_FALSE(provider);
    EXPECT_EQ(provider.error().code, ErrorCode::Plugin);
    EXPECT_THAT(provider.error().describe(), HasSubstr("provider plugin 'echo' failed to load"));
    EXPECT_THAT(provider.error().describe(), HasSubstr(replaced.string()));
    EXPECT_THAT(provider.error().describe(), HasSubstr("changed since it was discovered"));
  }

  const fs::path cut = copy_plugin("echo", dir.path(), "libkernex-a.so");
  {
    const detail::DeferredPluginLoading scope;
    host = PluginHost::discover({dir.path()});
  }
  // Cut short, the file would fault inside dlopen: it is read again first, and refused.
  fs::resize_file(cut, 64 * 1024);
  auto provider = host->create_provider("echo", Json::object());
  ASSERT_FALSE(provider);
  EXPECT_THAT(provider.error().describe(),
              HasSubstr("changed since it was discovered: no longer a plugin file"));
  fs::remove(cut);
  provider = host->create_provider("echo", Json::object());
  ASSERT_FALSE(provider);
  EXPECT_THAT(provider.error().describe(), HasSubstr("changed since it was discovered"));
}

TEST(PluginHostDeferred, ConcurrentFirstUsesAllGetWorkingObjects) {
  std::optional<PluginHost> host;
  {
    const detail::DeferredPluginLoading scope;
    host = PluginHost::discover({kPluginDir});
  }
  std::atomic<int> made{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      auto provider = host->create_provider("echo", Json::object());
      auto toolbox = host->create_toolbox("reverse", Json::object());
      if (provider && toolbox && (*provider)->name() == "echo") ++made;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(made.load(), 8);
}

// The reader runs on files nobody has vetted: every byte flipped and every length cut must give
// a descriptor or nullopt, never a read outside the file (ASan) or a crash.
TEST(PluginHostDeferred, ADamagedFileNeverCrashesTheReader) {
  testing::TempDir dir;
  const fs::path original = plugin_file("echo");
  std::ifstream in(original, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 4096u);
  const std::string_view factories[] = {"kernex_create_Provider"};
  const auto intact = detail::read_descriptor(original, kDescriptorSymbol, factories);
  ASSERT_TRUE(intact);
  EXPECT_EQ(intact->name, "echo");
  EXPECT_EQ(intact->exported, std::vector<bool>{true});
  const fs::path damaged = dir.path() / "damaged.so";
  fs::copy_file(original, damaged);
  const int fd = ::open(damaged.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  // Every byte of the ELF header and the first program headers, every fifth of the section
  // headers and .dynsym, then a sample of the rest (relocations, strings, code); one byte at a
  // time, flipped in place and put back.
  std::vector<std::size_t> offsets;
  for (std::size_t i = 0; i < 512; ++i) offsets.push_back(i);
  for (std::size_t i = 512; i < 0x1000; i += 5) offsets.push_back(i);
  for (std::size_t i = bytes.size() - 4096; i < bytes.size(); i += 5) offsets.push_back(i);
  for (std::size_t i = 0x1000; i < bytes.size() - 4096; i += bytes.size() / 997)
    offsets.push_back(i);
  for (std::size_t at : offsets) {
    for (unsigned char flip : {0xffu, 0x80u, 0x01u}) {
      if (flip != 0xffu && at >= 64) break;  // every bit pattern in the ELF header only
      const char changed = static_cast<char>(bytes[at] ^ flip);
      ASSERT_EQ(::pwrite(fd, &changed, 1, static_cast<off_t>(at)), 1);
      (void)detail::read_descriptor(damaged, kDescriptorSymbol, factories);
    }
    ASSERT_EQ(::pwrite(fd, &bytes[at], 1, static_cast<off_t>(at)), 1);
  }
  ::close(fd);
  auto write = [&](const std::string& content) {
    std::ofstream(damaged, std::ios::binary | std::ios::trunc) << content;
  };
  for (std::size_t length : {std::size_t{0}, std::size_t{1}, std::size_t{63}, std::size_t{64},
                             std::size_t{4096}, bytes.size() / 2, bytes.size() - 1}) {
    write(bytes.substr(0, length));
    EXPECT_FALSE(detail::read_descriptor(damaged, kDescriptorSymbol, factories) &&
                 length < bytes.size() / 2)
        << length;
  }
}

}  // namespace
}  // namespace kernex
