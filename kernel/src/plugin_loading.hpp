// Deferred plugin loading: while a DeferredPluginLoading lives on a thread, PluginHost::discover
// and add_file on that thread read each plugin's descriptor from its file (elf_symbols.hpp) and
// map the library only when the first object is created from it. The kernel discovers this way:
// mapping every plugin of a directory cost more than the rest of booting it (about 1 s under
// ASan for 22 plugins), for the two or three a config names. `kernex plugins` and `kernex doctor`
// discover without it, so a plugin that cannot be loaded is reported there as before.
#pragma once

namespace kernex::detail {

class DeferredPluginLoading {
 public:
  DeferredPluginLoading();
  ~DeferredPluginLoading();
  DeferredPluginLoading(const DeferredPluginLoading&) = delete;
  DeferredPluginLoading& operator=(const DeferredPluginLoading&) = delete;

 private:
  bool previous_;
};

}  // namespace kernex::detail
