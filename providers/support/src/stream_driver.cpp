// The streaming driver shared by the network providers (see stream_driver.hpp).
#include "kernex/providers/stream_driver.hpp"

#include <optional>

#include "kernex/http/sse.hpp"

namespace kernex::providers {

namespace {

constexpr std::size_t kRawCap = 1u << 20;  // a body sent whole instead of streamed

bool success(const http::Response& response) {
  return response.status >= 200 && response.status < 300;
}

// The state of one streamed call: the framing, the first failure, and the body kept until the
// first event (for servers that ignore the request to stream).
class Driver {
 public:
  Driver(const CommonOptions& options, Framing framing, StreamMapping& mapping,
         const StreamSink& sink)
      : o_(options), framing_(framing), mapping_(mapping), emit_(sink) {}

  Result<Response> run(http::Client& client, const http::Request& request) {
    auto response = client.stream(request, [&](std::string_view chunk) { return feed(chunk); });
    if (framing_ == Framing::Ndjson && !failure_ && response && success(*response) &&
        lines_.has_partial()) {
      const std::string rest = lines_.take_rest();  // a last line without its newline
      event({}, rest);
    }
    if (failure_) return report(*failure_);
    if (!response) return report(transport_error(o_, response.error()));
    if (!success(*response)) return report(http_error(o_, *response));
    const StreamEnd end{framing_ == Framing::Sse && sse_.has_partial(), any_event_, raw_};
    auto whole = mapping_.finish(end, emit_);
    if (!whole) return report(whole.error());
    emit_.usage(whole->usage, whole->stop_reason);
    emit_.done();
    return whole;
  }

 private:
  bool feed(std::string_view chunk) {
    if (!any_event_ && raw_.size() < kRawCap) raw_.append(chunk);
    const auto fed =
        framing_ == Framing::Sse
            ? sse_.feed(chunk, [&](const http::SseEvent& ev) { event(ev.event, ev.data); })
            : lines_.feed(chunk, [&](std::string_view line) { event({}, line); });
    if (!fed && !failure_)
      failure_ = Error(ErrorCode::Provider, o_.name + ": " + fed.error().message);
    return !failure_;
  }

  void event(std::string_view name, std::string_view data) {
    if (failure_ || mapping_.stopped()) return;
    any_event_ = true;
    if (mapping_.on_marker(data)) return;
    WireEvent ev{name, data, parse_untrusted(data)};
    if (ev.json.is_discarded() || !ev.json.is_object()) {
      failure_ = malformed_event(o_, std::string(framing_ == Framing::Sse ? "data" : "a line") +
                                         " is not a JSON object: " + excerpt(data, 256));
      return;
    }
    if (auto ok = mapping_.on_event(ev, emit_); !ok) failure_ = ok.error();
  }

  Result<Response> report(Error e) const {
    emit_.error(e.message);
    return std::unexpected(std::move(e));
  }

  const CommonOptions& o_;
  Framing framing_;
  StreamMapping& mapping_;
  Emitter emit_;
  http::SseParser sse_;
  http::LineSplitter lines_;
  std::optional<Error> failure_;
  bool any_event_ = false;
  std::string raw_;
};

}  // namespace

Result<Response> drive_stream(http::Client& client, const http::Request& request,
                              const CommonOptions& options, Framing framing, StreamMapping& mapping,
                              const StreamSink& sink) {
  return Driver(options, framing, mapping, sink).run(client, request);
}

Error malformed_event(const CommonOptions& options, std::string_view what) {
  return Error(ErrorCode::Provider, options.name + ": malformed stream event from " +
                                        options.url.authority() + ": " + std::string(what));
}

Error stream_cut(const CommonOptions& options, std::string_view what) {
  return Error(ErrorCode::Provider, options.name + ": the stream from " + options.url.authority() +
                                        " ended before " + std::string(what));
}

}  // namespace kernex::providers
