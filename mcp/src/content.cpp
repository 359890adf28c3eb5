#include "kernex/mcp/content.hpp"

namespace kernex::mcp {
namespace {

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string str(const Json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::string binary(const Json& item, const std::string& kind, const RenderOptions& opts) {
  const std::string mime = str(item, "mimeType");
  const std::string data = str(item, "data");
  std::string out = "[" + kind + " " + (mime.empty() ? "application/octet-stream" : mime) + ", " +
                    std::to_string(data.size()) + " bytes base64";
  if (data.size() <= opts.inline_binary_cap) {
    out += ": data:" + mime + ";base64," + data + "]";
  } else {
    out += ", omitted]";
  }
  return out;
}

std::string resource_link(const Json& item) {
  std::string out = "[resource link: " + str(item, "name") + " <" + str(item, "uri") + ">";
  if (auto mime = str(item, "mimeType"); !mime.empty()) out += " (" + mime + ")";
  if (auto desc = str(item, "description"); !desc.empty()) out += ": " + desc;
  return out + "]";
}

std::string embedded(const Json& item) {
  auto r = item.find("resource");
  if (r == item.end() || !r->is_object()) return dump(item);
  std::string out = "[resource " + str(*r, "uri");
  if (auto mime = str(*r, "mimeType"); !mime.empty()) out += " (" + mime + ")";
  out += "]";
  if (r->contains("text") && (*r)["text"].is_string())
    return out + "\n" + (*r)["text"].get<std::string>();
  if (r->contains("blob") && (*r)["blob"].is_string()) {
    return out + " " + std::to_string((*r)["blob"].get_ref<const std::string&>().size()) +
           " bytes base64";
  }
  return out;
}

// Whether a text item already carries the structured content: as its JSON, or as one of its
// top-level strings (a text tool's {"content": text}), so the model is not sent it twice.
bool says_the_same(const std::string& text, const Json& structured) {
  if (structured.is_object()) {
    for (const auto& [key, value] : structured.items()) {
      if (value.is_string() && value.get_ref<const std::string&>() == text) return true;
    }
  }
  Json parsed = parse_untrusted(text);
  return !parsed.is_discarded() && parsed == structured;
}

}  // namespace

RenderedResult render_call_result(const Json& result, const RenderOptions& opts) {
  RenderedResult out;
  if (!result.is_object()) {
    out.text = dump(result);
    return out;
  }
  if (auto e = result.find("isError"); e != result.end() && e->is_boolean())
    out.is_error = e->get<bool>();
  std::string text;
  auto add = [&](const std::string& block) {
    if (!text.empty()) text += '\n';
    text += block;
  };
  bool structured_shown = false;
  const auto structured = result.find("structuredContent");
  if (auto content = result.find("content"); content != result.end() && content->is_array()) {
    for (const auto& item : *content) {
      const std::string type = item.is_object() ? str(item, "type") : std::string();
      if (type == "text" && item.contains("text") && item["text"].is_string()) {
        const auto& t = item["text"].get_ref<const std::string&>();
        add(t);
        if (structured != result.end() && !structured_shown)
          structured_shown = says_the_same(t, *structured);
      } else if (type == "image" || type == "audio") {
        add(binary(item, type, opts));
      } else if (type == "resource_link") {
        add(resource_link(item));
      } else if (type == "resource") {
        add(embedded(item));
      } else {
        add(dump(item));
      }
    }
  }
  if (structured != result.end() && !structured->is_null() && !structured_shown) {
    add("[structured content] " + dump(*structured));
  }
  if (structured != result.end()) out.structured = *structured;
  out.text = std::move(text);
  return out;
}

}  // namespace kernex::mcp
