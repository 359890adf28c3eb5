#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <mutex>

#include "kernex/log.hpp"
#include "kernex/redact.hpp"
#include "random_bits.hpp"
#include "kernex/trajectory.hpp"

namespace kernex {
namespace {

std::int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

std::string new_run_id() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
  char suffix[8];
  std::snprintf(suffix, sizeof suffix, "%06x",
                static_cast<unsigned>(detail::random_u64() & 0xffffffu));
  return std::string(stamp) + "-" + suffix;
}

// Caps every string in an event, recursively, so one huge tool output can't bloat the file.
void cap_strings(Json& j, std::size_t cap) {
  if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    if (s.size() > cap) j = cap_field(s, cap);
  } else if (j.is_structured()) {
    for (auto& v : j) cap_strings(v, cap);
  }
}

class JsonlTrajectory final : public Trajectory {
 public:
  JsonlTrajectory(std::string run_id, std::filesystem::path path, std::size_t cap)
      : run_id_(std::move(run_id)), path_(std::move(path)), cap_(cap), out_(path_, std::ios::app) {}

  bool good() const { return out_.good(); }
  const std::string& run_id() const override { return run_id_; }

  void record(std::string_view type, Json fields) override {
    try {
      if (!fields.is_object()) fields = Json{{"value", std::move(fields)}};
      cap_strings(fields, cap_);
      std::lock_guard lock(mu_);
      Json event = {{"seq", seq_++}, {"ts_ms", now_ms()}, {"type", type}};
      event.update(fields);
      // Redacted last, after capping and JSON encoding, so no cut or escape hides a key piece.
      out_ << redact_secrets(event.dump(-1, ' ', false, Json::error_handler_t::replace)) << '\n';
      out_.flush();
      if (!out_ && !warned_) {
        warned_ = true;
        log(LogLevel::Warn,
            "trajectory " + path_.string() + ": write failed; later events are lost");
      }
    } catch (const std::exception& e) {
      log(LogLevel::Warn, std::string("trajectory: could not record an event: ") + e.what());
    }
  }

 private:
  std::string run_id_;
  std::filesystem::path path_;
  std::size_t cap_;
  std::mutex mu_;
  std::ofstream out_;
  std::uint64_t seq_ = 0;
  bool warned_ = false;
};

}  // namespace

std::string cap_field(std::string_view text, std::size_t cap) {
  if (text.size() <= cap) return std::string(text);
  std::size_t cut = cap;
  // Step back over UTF-8 continuation bytes so the kept part stays valid.
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return std::string(text.substr(0, cut)) + "…[truncated " + std::to_string(text.size() - cut) +
         " bytes]";
}

Result<std::shared_ptr<Trajectory>> open_trajectory(const std::filesystem::path& dir,
                                                    std::size_t field_cap) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return fail(ErrorCode::Io, "trajectory dir " + dir.string() + ": " + ec.message());
  // Ids are per second plus 24 random bits: two runs could draw the same one, and appending to
  // another run's file would mix their events, so the name is claimed with O_EXCL first.
  std::string id;
  std::filesystem::path path;
  for (int attempt = 0;; ++attempt) {
    id = new_run_id();
    path = dir / (id + ".jsonl");
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) {
      ::close(fd);
      break;
    }
    if (errno != EEXIST || attempt == 16) {
      return fail(ErrorCode::Io,
                  "trajectory " + path.string() + ": cannot create: " + std::strerror(errno));
    }
  }
  auto t = std::make_shared<JsonlTrajectory>(id, path, field_cap);
  if (!t->good())
    return fail(ErrorCode::Io, "trajectory " + path.string() + ": cannot open for writing");
  return t;
}

}  // namespace kernex
