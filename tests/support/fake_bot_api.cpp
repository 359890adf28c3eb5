// The fake Bot API's server: one thread accepts, one thread per connection reads requests and
// answers them (a long poll blocks only its own connection).
#include "fake_bot_api.hpp"

#include <sys/socket.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace kernex::test {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

std::size_t utf16_length(const std::string& s) {
  std::size_t units = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte
    units += c >= 0xF0 ? 2 : 1;
  }
  return units;
}

Json error(int code, const std::string& description) {
  return Json{{"ok", false}, {"error_code", code}, {"description", description}};
}

}  // namespace

struct FakeBotApi::Impl {
  Options options;
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
  std::thread accept_thread;
  std::atomic<bool> stopping{false};

  mutable std::mutex mutex;
  mutable std::condition_variable changed;
  std::vector<std::thread> connections;
  std::set<int> open_fds;
  std::deque<Json> updates;  // unconfirmed, in order
  std::set<std::int64_t> confirmed;
  std::int64_t next_update = 1;
  std::int64_t offset = 0;
  std::map<std::int64_t, std::int64_t> next_message_id;
  std::map<std::int64_t, std::vector<Message>> messages;  // the bot's, by chat
  std::map<std::int64_t, Clock::time_point> last_edit, banned_until;
  std::map<std::int64_t, std::pair<int, int>> forced;  // chat -> {count, retry_after}
  std::map<std::string, std::string> files;            // file_path -> content
  std::vector<std::string> answers;
  Stats stats;
  std::uint64_t generation = 0;  // bumped with every change, for wait_until

  std::int64_t message_id(std::int64_t chat) { return ++next_message_id[chat]; }

  std::int64_t push(Json update) {
    std::lock_guard lock(mutex);
    const std::int64_t id = next_update++;
    update["update_id"] = id;
    updates.push_back(std::move(update));
    ++generation;
    changed.notify_all();
    return id;
  }

  Json get_updates(const Json& p) {
    std::unique_lock lock(mutex);
    ++stats.get_updates;
    const std::int64_t asked = p.value("offset", std::int64_t{0});
    offset = asked;
    while (!updates.empty() && updates.front()["update_id"].get<std::int64_t>() < asked) {
      confirmed.insert(updates.front()["update_id"].get<std::int64_t>());
      updates.pop_front();
    }
    const auto deadline = Clock::now() + std::chrono::seconds(p.value("timeout", 0));
    changed.wait_until(lock, deadline, [&] { return stopping || !updates.empty(); });
    Json result = Json::array();
    for (const auto& u : updates) {
      if (u["update_id"].get<std::int64_t>() < asked) continue;
      if (confirmed.contains(u["update_id"].get<std::int64_t>())) ++stats.redelivered;
      result.push_back(u);
      if (result.size() == 100) break;
    }
    return Json{{"ok", true}, {"result", result}};
  }

  // Telegram's per-chat limits: a call inside a retry_after wait, or an edit too soon.
  std::optional<Json> limited(std::int64_t chat, bool edit) {
    const auto now = Clock::now();
    if (auto b = banned_until.find(chat); b != banned_until.end() && now < b->second) {
      ++stats.early_retries;
      ++stats.rate_limited;
      return too_many(chat, options.retry_after_s);
    }
    if (!edit) return std::nullopt;
    if (auto f = forced.find(chat); f != forced.end() && f->second.first > 0) {
      --f->second.first;
      ++stats.rate_limited;
      return too_many(chat, f->second.second);
    }
    if (auto l = last_edit.find(chat);
        l != last_edit.end() && now - l->second < options.edit_interval) {
      ++stats.rate_limited;
      return too_many(chat, options.retry_after_s);
    }
    last_edit[chat] = now;
    return std::nullopt;
  }

  Json too_many(std::int64_t chat, int retry_after) {
    banned_until[chat] = Clock::now() + std::chrono::seconds(retry_after);
    Json e = error(429, "Too Many Requests: retry after " + std::to_string(retry_after));
    e["parameters"] = Json{{"retry_after", retry_after}};
    return e;
  }

  Json send_message(const Json& p) {
    std::lock_guard lock(mutex);
    const auto chat = p.at("chat_id").get<std::int64_t>();
    const std::string text = p.at("text").get<std::string>();
    if (auto e = limited(chat, false)) return *e;
    if (text.empty() || utf16_length(text) > 4096) {
      ++stats.too_long;
      return error(400, "Bad Request: message is too long");
    }
    ++stats.sends;
    Message m{chat, message_id(chat), text, p.value("reply_markup", Json()), 0};
    messages[chat].push_back(m);
    return Json{{"ok", true},
                {"result", {{"message_id", m.id}, {"chat", {{"id", chat}}}, {"text", text}}}};
  }

  Json edit_message(const Json& p) {
    std::lock_guard lock(mutex);
    const auto chat = p.at("chat_id").get<std::int64_t>();
    const auto id = p.at("message_id").get<std::int64_t>();
    const std::string text = p.at("text").get<std::string>();
    auto& list = messages[chat];
    auto it = std::find_if(list.begin(), list.end(), [&](const Message& m) { return m.id == id; });
    if (it == list.end()) return error(400, "Bad Request: message to edit not found");
    if (auto e = limited(chat, true)) return *e;
    if (text.empty() || utf16_length(text) > 4096) {
      ++stats.too_long;
      return error(400, "Bad Request: message is too long");
    }
    if (it->text == text) {
      ++stats.not_modified;
      return error(400, "Bad Request: message is not modified");
    }
    ++stats.edits;
    it->text = text;
    ++it->edits;
    return Json{{"ok", true}, {"result", {{"message_id", id}, {"text", text}}}};
  }

  Json dispatch(const std::string& method, const Json& p) {
    try {
      if (method == "getUpdates") return get_updates(p);
      if (method == "sendMessage") return send_message(p);
      if (method == "editMessageText") return edit_message(p);
      std::lock_guard lock(mutex);
      if (method == "answerCallbackQuery") {
        answers.push_back(p.value("text", ""));
        return Json{{"ok", true}, {"result", true}};
      }
      if (method == "getFile") {
        const std::string path = "documents/" + p.at("file_id").get<std::string>();
        if (!files.contains(path)) return error(400, "Bad Request: invalid file_id");
        return Json{{"ok", true},
                    {"result",
                     {{"file_id", p.at("file_id")},
                      {"file_path", path},
                      {"file_size", files[path].size()}}}};
      }
    } catch (const std::exception& e) {
      return error(400, std::string("Bad Request: ") + e.what());
    }
    return error(404, "Not Found: method not found");
  }

  http::response<http::string_body> answer(const http::request<http::string_body>& req) {
    http::response<http::string_body> res{http::status::ok, req.version()};
    res.keep_alive(req.keep_alive());
    const std::string target(req.target());
    const std::string bot = "/bot" + options.token + "/";
    const std::string file = "/file/bot" + options.token + "/";
    Json body;
    if (target.starts_with(file)) {
      std::lock_guard lock(mutex);
      auto f = files.find(target.substr(file.size()));
      if (f == files.end()) {
        res.result(http::status::not_found);
      } else {
        res.body() = f->second;
      }
      res.prepare_payload();
      return res;
    }
    if (!target.starts_with(bot)) {
      body = error(401, "Unauthorized");
    } else {
      Json params = req.body().empty() ? Json::object() : Json::parse(req.body(), nullptr, false);
      if (params.is_discarded() || !params.is_object())
        body = error(400, "Bad Request: expected a JSON object");
      else
        body = dispatch(target.substr(bot.size()), params);
    }
    if (body.value("ok", false) == false) res.result(body.value("error_code", 400));
    res.set(http::field::content_type, "application/json");
    res.body() = body.dump();
    res.prepare_payload();
    {
      std::lock_guard lock(mutex);
      ++generation;
      changed.notify_all();
    }
    return res;
  }

  void serve_connection(tcp::socket socket) {
    beast::flat_buffer buffer;
    beast::error_code ec;
    while (!stopping) {
      http::request<http::string_body> req;
      http::read(socket, buffer, req, ec);
      if (ec) break;
      auto res = answer(req);
      http::write(socket, res, ec);
      if (ec || !res.keep_alive()) break;
    }
    std::lock_guard lock(mutex);
    open_fds.erase(socket.native_handle());
  }

  void accept_loop() {
    while (!stopping) {
      beast::error_code ec;
      tcp::socket socket(ioc);
      acceptor.accept(socket, ec);
      if (ec || stopping) break;
      std::lock_guard lock(mutex);
      open_fds.insert(socket.native_handle());
      connections.emplace_back(
          [this, s = std::move(socket)]() mutable { serve_connection(std::move(s)); });
    }
  }
};

FakeBotApi::FakeBotApi() : FakeBotApi(Options{}) {}

FakeBotApi::FakeBotApi(Options options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  tcp::endpoint endpoint(asio::ip::make_address("127.0.0.1"), 0);
  impl_->acceptor.open(endpoint.protocol());
  impl_->acceptor.set_option(asio::socket_base::reuse_address(true));
  impl_->acceptor.bind(endpoint);
  impl_->acceptor.listen();
  impl_->accept_thread = std::thread([this] { impl_->accept_loop(); });
}

FakeBotApi::~FakeBotApi() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stopping = true;
    impl_->changed.notify_all();
    for (int fd : impl_->open_fds) ::shutdown(fd, SHUT_RDWR);
  }
  ::shutdown(impl_->acceptor.native_handle(), SHUT_RDWR);
  impl_->accept_thread.join();
  std::vector<std::thread> connections;
  {
    std::lock_guard lock(impl_->mutex);
    connections.swap(impl_->connections);
  }
  for (auto& t : connections) t.join();
}

std::string FakeBotApi::base_url() const {
  return "http://127.0.0.1:" + std::to_string(impl_->acceptor.local_endpoint().port());
}

const std::string& FakeBotApi::token() const { return impl_->options.token; }

std::int64_t FakeBotApi::send_text(std::int64_t chat, std::int64_t user, const std::string& text,
                                   const std::string& chat_type) {
  std::int64_t id;
  {
    std::lock_guard lock(impl_->mutex);
    id = impl_->message_id(chat);
  }
  return impl_->push(Json{{"message",
                           {{"message_id", id},
                            {"from", {{"id", user}, {"is_bot", false}, {"first_name", "U"}}},
                            {"chat", {{"id", chat}, {"type", chat_type}}},
                            {"date", 0},
                            {"text", text}}}});
}

std::int64_t FakeBotApi::send_document(std::int64_t chat, std::int64_t user,
                                       const std::string& file_name, const std::string& content,
                                       const std::string& caption) {
  std::int64_t id;
  std::string file_id;
  {
    std::lock_guard lock(impl_->mutex);
    id = impl_->message_id(chat);
    file_id = "file" + std::to_string(impl_->files.size() + 1);
    impl_->files["documents/" + file_id] = content;
  }
  return impl_->push(Json{{"message",
                           {{"message_id", id},
                            {"from", {{"id", user}, {"is_bot", false}, {"first_name", "U"}}},
                            {"chat", {{"id", chat}, {"type", "private"}}},
                            {"date", 0},
                            {"caption", caption},
                            {"document",
                             {{"file_id", file_id},
                              {"file_unique_id", file_id},
                              {"file_name", file_name},
                              {"file_size", content.size()}}}}}});
}

std::int64_t FakeBotApi::press_button(std::int64_t chat, std::int64_t user, std::int64_t message_id,
                                      const std::string& data) {
  return impl_->push(Json{
      {"callback_query",
       {{"id", "cq" + std::to_string(message_id)},
        {"from", {{"id", user}, {"is_bot", false}, {"first_name", "U"}}},
        {"message", {{"message_id", message_id}, {"chat", {{"id", chat}, {"type", "private"}}}}},
        {"data", data}}}});
}

void FakeBotApi::force_rate_limit(std::int64_t chat, int count, int retry_after_s) {
  std::lock_guard lock(impl_->mutex);
  impl_->forced[chat] = {count, retry_after_s};
}

std::vector<FakeBotApi::Message> FakeBotApi::messages(std::int64_t chat) const {
  std::lock_guard lock(impl_->mutex);
  auto it = impl_->messages.find(chat);
  return it == impl_->messages.end() ? std::vector<Message>{} : it->second;
}

std::vector<std::string> FakeBotApi::callback_answers() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->answers;
}

std::int64_t FakeBotApi::last_offset() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->offset;
}

FakeBotApi::Stats FakeBotApi::stats() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->stats;
}

bool FakeBotApi::wait_until(const std::function<bool()>& done,
                            std::chrono::milliseconds timeout) const {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    std::uint64_t seen;
    {
      std::lock_guard lock(impl_->mutex);
      seen = impl_->generation;
    }
    if (done()) return true;  // checked unlocked: it reads through this object
    std::unique_lock lock(impl_->mutex);
    if (!impl_->changed.wait_until(lock, deadline, [&] { return impl_->generation != seen; }))
      return done();
  }
}

std::string joined_texts(const std::vector<FakeBotApi::Message>& messages, std::int64_t after) {
  std::string out;
  for (const auto& m : messages)
    if (m.id > after && m.reply_markup.is_null()) out += m.text;
  return out;
}

}  // namespace kernex::test
