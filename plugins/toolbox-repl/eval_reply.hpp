// eval_code's hot path: the worker's reply becomes the tool's content without a JSON document in
// between. Parsing the reply into nlohmann's tree and writing it out again cost more (~3 µs) than
// the worker's whole turn at the Python end.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kernex::repl {

// The request line (with its '\n') that runs `code` in the worker.
std::string eval_request_line(std::string_view code);

struct EvalContent {
  std::string content;  // the value object, with wall_ms added
  bool is_error = false;
};

// The fields an eval answer's value may carry (the general path adds stdout_dropped and
// stderr_dropped, which the kernel turns into truncation markers); the kernel owns the rest.
bool is_eval_field(std::string_view key);

// Takes a reply of the usual shape, {"ok":true,"value":{...}} with the value's keys drawn from
// cpu_ms, peak_rss_kb, stdout, stderr, error and pending_queries (each once, each of its type;
// pending_queries a list of flat objects).
// One SAX pass checks that the whole line is that JSON (the worker runs the model's code, which can
// write anything to the protocol pipe); the value's text is then the content as sent. Any other
// reply (an error, a truncated stream, an unknown key, bad JSON) gives nullopt, and the caller
// parses it the general way, which reports what is wrong.
std::optional<EvalContent> eval_content(std::string_view reply, double wall_ms);

}  // namespace kernex::repl
