#include <algorithm>
#include <array>
#include <cctype>
#include <string>

#include "kernex/sandbox/profile.hpp"

namespace kernex::sandbox {
namespace {

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// Variables that make a loader, shell or interpreter run other code than the command named.
constexpr std::array kHijackingNames = {
    "PATH",
    "BASH_ENV",
    "ENV",
    "SHELLOPTS",
    "BASHOPTS",
    "PS4",
    "PROMPT_COMMAND",
    "IFS",
    "CDPATH",
    "ZDOTDIR",
    "PYTHONSTARTUP",
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONINSPECT",
    "PYTHONUSERBASE",
    "PYTHONEXECUTABLE",
    "NODE_OPTIONS",
    "NODE_PATH",
    "PERL5OPT",
    "PERL5LIB",
    "PERLLIB",
    "PERL5DB",
    "RUBYOPT",
    "RUBYLIB",
    "LUA_INIT",
    "LUA_PATH",
    "LUA_CPATH",
    "TCLLIBPATH",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "CLASSPATH",
    "GLIBC_TUNABLES",
    "GCONV_PATH",
    "HOSTALIASES",
    "LOCPATH",
    "NLSPATH",
    "MALLOC_CHECK_",
    "RESOLV_HOST_CONF",
    "RES_OPTIONS",
    "LOCALDOMAIN",
    "OPENSSL_CONF",
    "OPENSSL_ENGINES",
    "TMPDIR",
    "EDITOR",
    "VISUAL",
    "PAGER",
    "GIT_PAGER",
    "LESSOPEN",
    "LESSCLOSE",
    "MANPAGER",
    "BROWSER",
};
constexpr std::array kHijackingPrefixes = {"LD_", "DYLD_", "GIT_", "BASH_FUNC_"};

}  // namespace

bool is_hijacking_env_name(std::string_view name) {
  const std::string u = upper(name);
  if (std::find(kHijackingNames.begin(), kHijackingNames.end(), u) != kHijackingNames.end())
    return true;
  return std::any_of(kHijackingPrefixes.begin(), kHijackingPrefixes.end(),
                     [&](std::string_view p) { return u.starts_with(p); });
}

std::vector<std::filesystem::path> default_protected_paths(const std::filesystem::path& home) {
  std::vector<std::filesystem::path> out;
  if (home.empty()) return out;
  for (const char* rel : {".ssh", ".aws", ".gnupg", ".netrc", ".kube", ".docker", ".config/gh",
                          ".config/gcloud", ".azure", ".git-credentials", ".password-store",
                          ".pgpass", ".npmrc", ".pypirc", ".config/google-chrome", ".mozilla"}) {
    out.push_back(home / rel);
  }
  return out;
}

std::vector<std::filesystem::path> system_exec_paths() {
  return {"/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"};
}

std::vector<std::filesystem::path> system_read_only_paths() {
  // Loader, locale, time zone, name service and TLS trust configuration.
  return {"/etc/ld.so.cache",
          "/etc/ld.so.conf",
          "/etc/ld.so.conf.d",
          "/etc/locale.alias",
          "/etc/locale.conf",
          "/etc/localtime",
          "/etc/timezone",
          "/etc/nsswitch.conf",
          "/etc/passwd",
          "/etc/group",
          "/etc/hosts",
          "/etc/host.conf",
          "/etc/resolv.conf",
          "/etc/services",
          "/etc/protocols",
          "/etc/mime.types",
          "/etc/magic",
          "/etc/os-release",
          "/etc/debian_version",
          "/etc/alternatives",
          "/etc/ssl/certs",
          "/etc/ca-certificates",
          "/etc/ca-certificates.conf",
          "/etc/terminfo",
          "/etc/inputrc",
          "/etc/python3",
          "/etc/mailcap",
          "/etc/gai.conf"};
}

}  // namespace kernex::sandbox
