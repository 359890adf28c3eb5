#include "kernex/plugin_host.hpp"

#include <algorithm>
#include <cstdlib>
#include <set>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <variant>

#include <dlfcn.h>

#include <boost/dll/shared_library.hpp>

#include "elf_symbols.hpp"
#include "install_layout.hpp"
#include "plugin_loading.hpp"

namespace kernex {

std::string_view to_string(PluginKind kind) noexcept {
  switch (kind) {
    case PluginKind::Provider:
      return "provider";
    case PluginKind::Memory:
      return "memory";
    case PluginKind::Hook:
      return "hook";
    case PluginKind::Toolbox:
      return "toolbox";
    case PluginKind::Channel:
      return "channel";
  }
  return "unknown";
}

std::optional<PluginKind> plugin_kind_from_string(std::string_view name) noexcept {
  for (PluginKind k : {PluginKind::Provider, PluginKind::Memory, PluginKind::Hook,
                       PluginKind::Toolbox, PluginKind::Channel}) {
    if (to_string(k) == name) return k;
  }
  return std::nullopt;
}

namespace {

namespace fs = std::filesystem;
using Library = std::shared_ptr<boost::dll::shared_library>;
using AnyFactory =
    std::variant<ProviderFactory*, MemoryFactory*, HookFactory*, ToolboxFactory*, ChannelFactory*>;

// A usable plugin: its library stays loaded while the host or any object it created lives.
// Discovered deferred (plugin_loading.hpp), the library is mapped by the first create, under
// the host's load mutex; a load that failed is kept so that it is not retried.
struct Loaded {
  std::size_t info_index;
  mutable Library library;
  mutable AnyFactory factory;
  mutable std::optional<Error> load_error;
};

thread_local bool loading_deferred = false;

// What a file's descriptor declares, read from the loaded library or from the file (only the
// latter fills `exported`).
using Declared = detail::FileDescriptor;

Declared declared_by(const PluginDescriptor& d) {
  auto text = [](const char* s) { return s ? std::optional<std::string>(s) : std::nullopt; };
  return {d.abi_version,       static_cast<std::uint32_t>(d.kind),
          text(d.name),        text(d.version),
          text(d.description), {}};
}

bool known_kind(PluginKind kind) {
  switch (kind) {
    case PluginKind::Provider:
    case PluginKind::Memory:
    case PluginKind::Hook:
    case PluginKind::Toolbox:
    case PluginKind::Channel:
      return true;
  }
  return false;
}

const char* factory_symbol(PluginKind kind) {
  switch (kind) {
    case PluginKind::Provider:
      return PluginTraits<PluginKind::Provider>::factory_symbol;
    case PluginKind::Memory:
      return PluginTraits<PluginKind::Memory>::factory_symbol;
    case PluginKind::Hook:
      return PluginTraits<PluginKind::Hook>::factory_symbol;
    case PluginKind::Toolbox:
      return PluginTraits<PluginKind::Toolbox>::factory_symbol;
    case PluginKind::Channel:
      return PluginTraits<PluginKind::Channel>::factory_symbol;
  }
  return "";
}

AnyFactory resolve_factory(const boost::dll::shared_library& lib, PluginKind kind) {
  const char* symbol = factory_symbol(kind);
  switch (kind) {
    case PluginKind::Provider:
      return &lib.get_alias<ProviderFactory>(symbol);
    case PluginKind::Memory:
      return &lib.get_alias<MemoryFactory>(symbol);
    case PluginKind::Hook:
      return &lib.get_alias<HookFactory>(symbol);
    case PluginKind::Toolbox:
      return &lib.get_alias<ToolboxFactory>(symbol);
    case PluginKind::Channel:
      return &lib.get_alias<ChannelFactory>(symbol);
  }
  throw std::logic_error("resolve_factory: unknown kind");  // known_kind() was checked before
}

Error plugin_error(const fs::path& path, const std::string& cause) {
  return Error(ErrorCode::Plugin, path.string() + ": " + cause);
}

// dlopen, lazy and local: one plugin's symbols never bind another's.
Result<Library> map_library(const fs::path& file) {
  try {
    return std::make_shared<boost::dll::shared_library>(
        file, boost::dll::load_mode::rtld_lazy | boost::dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    return std::unexpected(plugin_error(file, std::string("cannot load: ") + e.what()));
  }
}

// KERNEX_PLUGINS_STAY_LOADED=1: an accepted plugin stays mapped for the rest of the process
// (RTLD_NODELETE), for a host that creates and destroys kernels often: its next kernel finds the
// library loaded instead of mapping and relocating it again (~0.3 s a plugin in an ASan build,
// which a suite of kernel tests pays in every case). Objects hold their library as before; only
// the last unmapping is skipped. A rejected file is unloaded either way.
void stay_loaded_if_asked(const fs::path& file) {
  const char* asked = std::getenv("KERNEX_PLUGINS_STAY_LOADED");
  if (asked == nullptr || std::string_view(asked) != "1") return;
  // A reference taken and given back: what stays is the flag on the loaded library.
  if (void* handle = ::dlopen(file.c_str(), RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE))
    ::dlclose(handle);
}

std::string describe_kind(const PluginInfo& info) {
  return (info.kind ? std::string(to_string(*info.kind)) : std::string("plugin of no kind")) +
         " plugin '" + info.name + "'";
}

// A plugin-built Error may own a cause whose shared_ptr control block (and vtable) lives in the
// plugin's code; rebuild the chain in kernel code so the error can outlive the library.
Error detach(const Error& e) {
  Error copy(e.code, e.message);
  if (e.cause) copy.cause = std::make_shared<const Error>(detach(*e.cause));
  return copy;
}

std::string kind_list() { return "1=provider, 2=memory, 3=hook, 4=toolbox, 5=channel"; }

// Fills `info` from what the file declares; the problem that makes it unusable, if any.
std::optional<std::string> check_declared(const Declared& d, PluginInfo& info) {
  info.abi_version = d.abi_version;
  if (d.abi_version != kAbiVersion) {
    return "ABI version " + std::to_string(d.abi_version) + ", this kernel speaks " +
           std::to_string(kAbiVersion);
  }
  const auto kind = static_cast<PluginKind>(d.kind);
  if (!known_kind(kind))
    return "unknown plugin kind " + std::to_string(d.kind) + " (expected " + kind_list() + ")";
  info.kind = kind;
  if (!d.name || d.name->empty()) return "descriptor has no name";
  info.name = *d.name;
  if (!d.version || d.version->empty())
    return std::string(to_string(kind)) + " plugin '" + info.name + "' has no version";
  info.version = *d.version;
  if (d.description) info.description = *d.description;
  return std::nullopt;
}

// The file's descriptor read without loading it, for deferred discovery; nullopt when it must
// be loaded to be read. exported[k - 1]: whether it exports the factory of kind k (PluginKind).
std::optional<Declared> declared_in_file(const fs::path& file) {
  static constexpr std::string_view kFactories[] = {
      PluginTraits<PluginKind::Provider>::factory_symbol,
      PluginTraits<PluginKind::Memory>::factory_symbol,
      PluginTraits<PluginKind::Hook>::factory_symbol,
      PluginTraits<PluginKind::Toolbox>::factory_symbol,
      PluginTraits<PluginKind::Channel>::factory_symbol};
  return detail::read_descriptor(file, kDescriptorSymbol, kFactories);
}

}  // namespace

struct PluginHost::Impl {
  std::vector<PluginInfo> infos;
  std::vector<Loaded> loaded;
  mutable std::mutex load_mutex;

  const Loaded* find_loaded(PluginKind kind, std::string_view name) const {
    for (const Loaded& l : loaded) {
      const PluginInfo& info = infos[l.info_index];
      if (info.kind == kind && info.name == name) return &l;
    }
    return nullptr;
  }

  // A failed file that claimed this kind and name, so "not found" can say why.
  const PluginInfo* find_broken(PluginKind kind, std::string_view name) const {
    for (const PluginInfo& info : infos) {
      if (!info.ok() && info.kind == kind && info.name == name) return &info;
    }
    return nullptr;
  }

  // Why a file whose descriptor checked out still can't be used: a duplicate, or no factory.
  std::optional<std::string> unusable(const PluginInfo& info, bool has_factory) const {
    const std::string label = std::string(to_string(*info.kind)) + " plugin '" + info.name + "'";
    if (const Loaded* first = find_loaded(*info.kind, info.name))
      return "duplicate " + label + "; already loaded from " +
             infos[first->info_index].path.string();
    if (!has_factory) return label + " does not export " + factory_symbol(*info.kind);
    return std::nullopt;
  }

  Result<PluginInfo> add_loaded(PluginInfo info, Library library);
  Result<PluginInfo> add_deferred(PluginInfo info, const Declared& declared);
  Result<void> load(const Loaded& plugin) const;

  Result<PluginInfo> record(PluginInfo info, std::optional<Error> error) {
    info.error = std::move(error);
    infos.push_back(info);
    if (info.error) return std::unexpected(*info.error);
    return info;
  }

  template <PluginKind K>
  Result<std::shared_ptr<typename PluginTraits<K>::Interface>> create(std::string_view name,
                                                                      const Json& config) const;
};

namespace {

// Owns the object and, declared first so destroyed last, the library holding its code.
template <class I>
struct Pinned {
  Library library;
  std::shared_ptr<I> object;
};

template <class I>
std::shared_ptr<I> pin(Library library, std::shared_ptr<I> object) {
  auto holder = std::make_shared<Pinned<I>>(Pinned<I>{std::move(library), std::move(object)});
  I* raw = holder->object.get();
  return std::shared_ptr<I>(std::move(holder), raw);
}

}  // namespace

template <PluginKind K>
Result<std::shared_ptr<typename PluginTraits<K>::Interface>> PluginHost::Impl::create(
    std::string_view name, const Json& config) const {
  using I = typename PluginTraits<K>::Interface;
  const std::string kind_name(to_string(K));
  const Loaded* plugin = find_loaded(K, name);
  if (plugin == nullptr) {
    if (const PluginInfo* broken = find_broken(K, name)) {
      return fail(ErrorCode::Plugin,
                  kind_name + " plugin '" + std::string(name) + "' failed to load", *broken->error);
    }
    std::string available;
    for (const Loaded& l : loaded) {
      const PluginInfo& info = infos[l.info_index];
      if (info.kind != K) continue;
      if (!available.empty()) available += ", ";
      available += info.name;
    }
    if (available.empty()) available = "(none)";
    return fail(ErrorCode::Plugin, "no " + kind_name + " plugin named '" + std::string(name) +
                                       "'; available: " + available);
  }

  if (auto mapped = load(*plugin); !mapped) {
    return fail(ErrorCode::Plugin, kind_name + " plugin '" + std::string(name) + "' failed to load",
                mapped.error());
  }
  const PluginInfo& info = infos[plugin->info_index];
  const std::string who = kind_name + " plugin '" + info.name + "' (" + info.path.string() + ")";
  auto* factory = std::get<Result<std::shared_ptr<I>> (*)(const Json&)>(plugin->factory);
  Result<std::shared_ptr<I>> made = std::shared_ptr<I>();
  try {
    made = factory(config);
  } catch (const std::exception& e) {
    return fail(ErrorCode::Plugin, who + ": factory threw: " + e.what());
  } catch (...) {
    return fail(ErrorCode::Plugin, who + ": factory threw a non-standard exception");
  }
  if (!made) return fail(ErrorCode::Plugin, who + ": could not create", detach(made.error()));
  if (*made == nullptr) return fail(ErrorCode::Plugin, who + ": factory returned a null object");
  return pin<I>(plugin->library, std::move(*made));
}

namespace detail {

DeferredPluginLoading::DeferredPluginLoading() : previous_(loading_deferred) {
  loading_deferred = true;
}
DeferredPluginLoading::~DeferredPluginLoading() { loading_deferred = previous_; }

}  // namespace detail

PluginHost::PluginHost() : impl_(std::make_unique<Impl>()) {}
PluginHost::~PluginHost() = default;
PluginHost::PluginHost(PluginHost&&) noexcept = default;
PluginHost& PluginHost::operator=(PluginHost&&) noexcept = default;

std::vector<std::filesystem::path> PluginHost::default_dirs() {
  std::vector<fs::path> dirs;
  if (const char* env = std::getenv("KERNEX_PLUGIN_PATH")) {
    std::string_view rest(env);
    while (true) {
      const std::size_t colon = rest.find(':');
      std::string_view entry = rest.substr(0, colon);
      if (!entry.empty()) dirs.emplace_back(entry);
      if (colon == std::string_view::npos) break;
      rest.remove_prefix(colon + 1);
    }
  }
  // Beside the library itself, never a path fixed at build time: an installed kernel must not
  // load the plugins of the build tree it came from (or of an older build at the same path).
  const fs::path bundled = detail::bundled_plugin_dir();
  std::error_code ec;
  if (fs::is_directory(bundled, ec)) dirs.push_back(bundled);
  return dirs;
}

PluginHost PluginHost::discover(const std::vector<std::filesystem::path>& dirs) {
  PluginHost host;
  // A dir named twice (config and KERNEX_PLUGIN_PATH, or a symlink to it) is read once, so its
  // plugins aren't reported as duplicates of themselves.
  std::set<fs::path> seen;
  for (const fs::path& dir : dirs) {
    std::error_code ec;
    const fs::path real = fs::canonical(dir, ec);
    if (ec || !seen.insert(real).second) continue;
    std::vector<fs::path> files;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      std::error_code type_ec;
      if (it->path().extension() == ".so" && it->is_regular_file(type_ec))
        files.push_back(it->path());
    }
    // Sorted so which of two duplicates wins does not depend on the filesystem's order.
    std::sort(files.begin(), files.end(),
              [](const fs::path& a, const fs::path& b) { return a.filename() < b.filename(); });
    for (const fs::path& file : files) (void)host.add_file(file);
  }
  return host;
}

Result<PluginInfo> PluginHost::add_file(const std::filesystem::path& path) {
  if (!impl_) impl_ = std::make_unique<Impl>();
  PluginInfo info;
  std::error_code ec;
  const fs::path absolute = fs::absolute(path, ec);
  info.path = ec ? path : absolute.lexically_normal();
  const fs::path& file = info.path;

  if (!fs::is_regular_file(file, ec))
    return impl_->record(info, plugin_error(file, "not a regular file"));
  // Checked before dlopen, which runs the file's constructors: a stray non-plugin .so in a plugin
  // directory never gets its constructors run.
  if (auto problem = detail::exported_symbol_problem(file, kDescriptorSymbol))
    return impl_->record(info, plugin_error(file, *problem));

  if (loading_deferred) {
    if (auto declared = declared_in_file(file))
      return impl_->add_deferred(std::move(info), *declared);
  }
  auto library = map_library(file);
  if (!library) return impl_->record(info, library.error());
  try {
    return impl_->add_loaded(std::move(info), *library);
  } catch (const std::exception& e) {
    return impl_->record(info,
                         plugin_error(file, std::string("cannot read descriptor: ") + e.what()));
  }
}

// Only plain data is read here; no plugin function runs until a factory is called.
Result<PluginInfo> PluginHost::Impl::add_loaded(PluginInfo info, Library library) {
  const fs::path file = info.path;
  if (!library->has(kDescriptorSymbol))
    return record(info, plugin_error(file, std::string("no ") + kDescriptorSymbol + " symbol"));
  const auto& d = library->get_alias<const PluginDescriptor>(kDescriptorSymbol);
  if (auto problem = check_declared(declared_by(d), info))
    return record(info, plugin_error(file, *problem));
  if (auto problem = unusable(info, library->has(factory_symbol(*info.kind))))
    return record(info, plugin_error(file, *problem));
  AnyFactory factory = resolve_factory(*library, *info.kind);
  stay_loaded_if_asked(file);
  loaded.push_back(Loaded{infos.size(), std::move(library), factory, std::nullopt});
  return record(info, std::nullopt);
}

Result<PluginInfo> PluginHost::Impl::add_deferred(PluginInfo info, const Declared& declared) {
  if (auto problem = check_declared(declared, info))
    return record(info, plugin_error(info.path, *problem));
  const auto kind = static_cast<std::size_t>(*info.kind);  // 1-based, checked known above
  if (auto problem =
          unusable(info, kind <= declared.exported.size() && declared.exported[kind - 1]))
    return record(info, plugin_error(info.path, *problem));
  loaded.push_back(Loaded{infos.size(), nullptr, AnyFactory{}, std::nullopt});
  return record(info, std::nullopt);
}

namespace {

// Whether the file still declares what discovery read, checked before dlopen maps it: a file
// cut short since then would fault inside the dynamic loader instead of failing.
std::optional<Error> changed_since_discovery(const PluginInfo& info) {
  const auto declared = declared_in_file(info.path);
  PluginInfo now;
  std::string why;
  if (!declared)
    why = "no longer a plugin file this kernel can read";
  else if (check_declared(*declared, now) || now.kind != info.kind || now.name != info.name)
    why = "now a " + describe_kind(now);
  if (why.empty()) return std::nullopt;
  return plugin_error(info.path, "changed since it was discovered: " + why);
}

// The library of a deferred plugin, mapped, and its factory: what it declares once loaded must
// still be what discovery read.
std::optional<Error> map_deferred(const PluginInfo& info, Library& library, AnyFactory& factory) {
  if (auto changed = changed_since_discovery(info)) return changed;
  auto mapped = map_library(info.path);
  if (!mapped) return mapped.error();
  try {
    PluginInfo now;
    if (!(*mapped)->has(kDescriptorSymbol) ||
        check_declared(declared_by((*mapped)->get_alias<const PluginDescriptor>(kDescriptorSymbol)),
                       now) ||
        now.kind != info.kind || now.name != info.name) {
      return plugin_error(info.path, "changed since it was discovered");
    }
    if (!(*mapped)->has(factory_symbol(*info.kind)))
      return plugin_error(info.path,
                          std::string("no longer exports ") + factory_symbol(*info.kind));
    factory = resolve_factory(**mapped, *info.kind);
    library = std::move(*mapped);
    stay_loaded_if_asked(info.path);
    return std::nullopt;
  } catch (const std::exception& e) {
    return plugin_error(info.path, std::string("cannot read descriptor: ") + e.what());
  }
}

}  // namespace

// Maps a deferred plugin's library once; a failure is kept and given again, never retried.
Result<void> PluginHost::Impl::load(const Loaded& plugin) const {
  std::lock_guard lock(load_mutex);
  if (!plugin.library && !plugin.load_error)
    plugin.load_error = map_deferred(infos[plugin.info_index], plugin.library, plugin.factory);
  if (plugin.load_error) return std::unexpected(*plugin.load_error);
  return {};
}

const std::vector<PluginInfo>& PluginHost::plugins() const {
  static const std::vector<PluginInfo> none;
  return impl_ ? impl_->infos : none;
}

const PluginInfo* PluginHost::find(PluginKind kind, std::string_view name) const {
  if (!impl_) return nullptr;
  const Loaded* l = impl_->find_loaded(kind, name);
  return l ? &impl_->infos[l->info_index] : nullptr;
}

Result<std::shared_ptr<Provider>> PluginHost::create_provider(std::string_view name,
                                                              const Json& config) const {
  return impl_ ? impl_->create<PluginKind::Provider>(name, config)
               : Impl{}.create<PluginKind::Provider>(name, config);
}
Result<std::shared_ptr<MemoryStore>> PluginHost::create_memory(std::string_view name,
                                                               const Json& config) const {
  return impl_ ? impl_->create<PluginKind::Memory>(name, config)
               : Impl{}.create<PluginKind::Memory>(name, config);
}
Result<std::shared_ptr<HookRunner>> PluginHost::create_hook(std::string_view name,
                                                            const Json& config) const {
  return impl_ ? impl_->create<PluginKind::Hook>(name, config)
               : Impl{}.create<PluginKind::Hook>(name, config);
}
Result<std::shared_ptr<ToolExecutor>> PluginHost::create_toolbox(std::string_view name,
                                                                 const Json& config) const {
  return impl_ ? impl_->create<PluginKind::Toolbox>(name, config)
               : Impl{}.create<PluginKind::Toolbox>(name, config);
}
Result<std::shared_ptr<Channel>> PluginHost::create_channel(std::string_view name,
                                                            const Json& config) const {
  return impl_ ? impl_->create<PluginKind::Channel>(name, config)
               : Impl{}.create<PluginKind::Channel>(name, config);
}

}  // namespace kernex
