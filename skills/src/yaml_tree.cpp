// YAML -> Node through yaml-cpp's event interface: unlike YAML::Node it reports the style,
// tag and anchor of every node with its position, which StrictYAML emulation and line numbers
// in errors need.
#include <cstddef>
#include <map>
#include <sstream>
#include <string>
#include <unordered_set>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>

#include "node.hpp"
#include "text.hpp"

namespace kernex::skills::detail {
namespace {

// Aliases copy their anchored node, and so does defining an anchor. Nodes are bounded in number
// (nested aliases: "billion laughs") and the copies in bytes too (one long anchored string
// aliased ten thousand times is as large, with no nesting at all).
constexpr std::size_t kMaxNodes = 100000;
constexpr std::size_t kMaxCopiedBytes = 4 * 1024 * 1024;

struct Stop {
  ParseFailure failure;
};

class TreeBuilder : public YAML::EventHandler {
 public:
  TreeBuilder(std::string_view text, bool strict, int first_line)
      : text_(text), strict_(strict), first_line_(first_line) {}

  std::optional<Node> root;

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    check_anchor(mark, anchor);
    Node n = make(mark);
    if (strict_) {
      // StrictYAML reads null as the string it was written as ("" for an empty value).
      n.kind = Node::Kind::Scalar;
      n.text = null_spelling(mark);
    }
    deliver(std::move(n), anchor);
  }

  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    auto it = anchors_.find(anchor);
    if (strict_ || it == anchors_.end()) stop(mark, "While parsing: found undefined alias");
    copied(mark, it->second);
    Node copy = it->second;
    deliver(std::move(copy), YAML::NullAnchor);
  }

  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& value) override {
    check_tag(mark, tag);
    check_anchor(mark, anchor);
    Node n = make(mark);
    n.kind = Node::Kind::Scalar;
    // The manifest was checked for UTF-8, yet yaml-cpp turns escapes ("\xFF") into single bytes
    // and a NUL can cut a sequence short: what no JSON can hold becomes U+FFFD here, once for
    // every field, key and metadata value.
    n.text = valid_utf8(value);
    n.plain = tag == "?";
    deliver(std::move(n), anchor);
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value style) override {
    open(mark, tag, anchor, style, Node::Kind::List);
  }
  void OnSequenceEnd() override { close(); }

  void OnMapStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value style) override {
    open(mark, tag, anchor, style, Node::Kind::Map);
  }
  void OnMapEnd() override { close(); }

 private:
  struct Frame {
    Node node;
    YAML::anchor_t anchor = YAML::NullAnchor;
    std::optional<std::string> key;
    int key_line = 0;
    int key_column = 0;
    int nested_map_column = -1;  // StrictYAML: sibling mapping values must be indented alike
    // A mapping's keys so far: looking each new key up in the entries was quadratic (seconds for
    // the 50000 keys a 16 MiB SKILL.md holds under the node cap).
    std::unordered_set<std::string> keys;
  };

  Node make(const YAML::Mark& mark) {
    Node n;
    n.line = mark.line + first_line_;
    n.column = mark.column;
    return n;
  }

  [[noreturn]] void stop(const YAML::Mark& mark, std::string message) {
    throw Stop{ParseFailure{mark.line + 1, mark.column, std::move(message)}};
  }

  void check_tag(const YAML::Mark& mark, const std::string& tag) {
    if (strict_ && !(tag.empty() || tag == "?" || tag == "!")) {
      stop(mark, "While scanning: found disallowed tag tokens (do not specify types in markup)");
    }
  }
  void check_anchor(const YAML::Mark& mark, YAML::anchor_t anchor) {
    if (strict_ && anchor != YAML::NullAnchor) {
      stop(mark,
           "While scanning: found confusing disallowed anchor token (surround with ' and ' to make "
           "text appear literally)");
    }
  }

  // Charges a copy of `n` (its nodes and text) to the document's budget, before it is made.
  void copied(const YAML::Mark& mark, const Node& n) {
    count(n);
    if (nodes_ > kMaxNodes)
      stop(mark,
           "document too large (alias expansion exceeds " + std::to_string(kMaxNodes) + " nodes)");
    if (copied_bytes_ > kMaxCopiedBytes) {
      stop(mark, "document too large (aliases copy more than " +
                     std::to_string(kMaxCopiedBytes / (1024 * 1024)) + " MiB)");
    }
  }
  void count(const Node& n) {
    nodes_ += 1;
    copied_bytes_ += n.text.size();
    for (const auto& item : n.items) count(item);
    for (const auto& [k, v] : n.entries) {
      copied_bytes_ += k.size();
      count(v);
    }
  }

  std::string null_spelling(const YAML::Mark& mark) const {
    if (mark.pos < 0 || static_cast<std::size_t>(mark.pos) >= text_.size()) return "";
    std::string_view rest = text_.substr(static_cast<std::size_t>(mark.pos));
    for (std::string_view word : {"null", "Null", "NULL", "~"}) {
      if (rest.substr(0, word.size()) == word) {
        std::string_view after = rest.substr(word.size());
        if (after.empty() || after[0] == '\n' || after[0] == ' ' || after[0] == '\t' ||
            after[0] == ',' || after[0] == ']' || after[0] == '}')
          return std::string(word);
      }
    }
    return "";
  }

  void open(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
            YAML::EmitterStyle::value style, Node::Kind kind) {
    check_tag(mark, tag);
    if (strict_ && style == YAML::EmitterStyle::Flow) {
      stop(mark,
           "While scanning: found ugly disallowed JSONesque flow mapping (surround with ' and ' to "
           "make text appear literally)");
    }
    check_anchor(mark, anchor);
    Frame f;
    f.node = make(mark);
    f.node.kind = kind;
    f.anchor = anchor;
    stack_.push_back(std::move(f));
  }

  void close() {
    Frame f = std::move(stack_.back());
    stack_.pop_back();
    deliver(std::move(f.node), f.anchor);
  }

  void deliver(Node n, YAML::anchor_t anchor) {
    YAML::Mark mark;
    mark.line = n.line - first_line_;
    mark.column = n.column;
    if (++nodes_ > kMaxNodes)
      stop(mark, "document too large (more than " + std::to_string(kMaxNodes) + " nodes)");
    if (anchor != YAML::NullAnchor) {
      copied(mark, n);  // nested anchors would otherwise copy the same subtree once per level
      anchors_[anchor] = n;
    }
    if (stack_.empty()) {
      if (!root) root = std::move(n);
      return;
    }
    Frame& top = stack_.back();
    if (top.node.kind == Node::Kind::List) {
      top.node.items.push_back(std::move(n));
      return;
    }
    if (!top.key) {
      if (n.kind != Node::Kind::Scalar && !(n.kind == Node::Kind::Null)) {
        stop(mark, "While parsing: mapping keys must be plain strings, found " +
                       std::string(describe_kind(n)));
      }
      if (!top.keys.insert(n.text).second) {
        stop(mark, "While parsing: Duplicate key '" + n.text + "' found");
      }
      top.key = n.text;
      top.key_line = n.line;
      top.key_column = n.column;
      return;
    }
    if (strict_ && n.kind == Node::Kind::Map) {
      if (top.nested_map_column < 0) {
        top.nested_map_column = n.column;
      } else if (top.nested_map_column != n.column) {
        stop(mark,
             "While parsing: found mapping with indentation inconsistent with previous mapping");
      }
    }
    top.node.entries.emplace_back(std::move(*top.key), std::move(n));
    top.key.reset();
  }

  std::string_view text_;
  bool strict_;
  int first_line_;
  std::vector<Frame> stack_;
  std::map<YAML::anchor_t, Node> anchors_;
  std::size_t nodes_ = 0;
  std::size_t copied_bytes_ = 0;
};

}  // namespace

std::optional<Node> parse_yaml(std::string_view text, bool strict, int first_line,
                               ParseFailure& failure) {
  std::istringstream in{std::string(text)};
  TreeBuilder builder(text, strict, first_line);
  try {
    YAML::Parser parser(in);
    parser.HandleNextDocument(builder);
  } catch (const Stop& s) {
    failure = s.failure;
    return std::nullopt;
  } catch (const YAML::Exception& e) {
    failure = ParseFailure{e.mark.is_null() ? 0 : e.mark.line + 1,
                           e.mark.is_null() ? 0 : e.mark.column, e.msg};
    return std::nullopt;
  } catch (const std::exception& e) {
    failure = ParseFailure{0, 0, e.what()};
    return std::nullopt;
  }
  if (!builder.root) {
    Node empty;
    empty.line = first_line;
    if (strict) empty.kind = Node::Kind::Scalar;  // StrictYAML: an empty document is ""
    return empty;
  }
  return std::move(builder.root);
}

}  // namespace kernex::skills::detail
