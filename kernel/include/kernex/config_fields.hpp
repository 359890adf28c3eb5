// One typed reader for every configuration file (kernex.yaml and its sections, sandbox profiles,
// plugin options): a section is a table of fields (name, type, range, default, doc), and the
// checks, the ranges and the wording of every error live here once.
//
// Format-neutral: a reader hands each value over as a `FieldValue` (its JSON form, its source text,
// how a message shows it), and its place as a `Where` (file, line, key path). yaml-cpp stays out
// of this header; kernel/src/config.cpp adapts YAML nodes, `FieldValue::of` adapts JSON values.
// Errors are Config errors worded "file:line: key.path: expected X, got Y".
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "kernex/error.hpp"
#include "kernex/json.hpp"

namespace kernex::config {

enum class FieldType {
  String,   // any scalar's text
  Bool,     // true or false
  Integer,  // a whole number in [min, max]
  Number,   // a finite number in [number_min, number_max]
  Enum,     // one of `choices`
  Path,     // a non-empty string naming a file or directory
  List,     // a sequence (its items are read by the section's code)
  Table,    // a nested section (a mapping with its own fields)
  Options,  // a free-form mapping handed on unchanged (plugin options)
};

// One key of a section.
struct Field {
  std::string_view name = {};
  FieldType type = FieldType::String;
  std::string_view doc = {};
  std::string_view default_text = "unset";         // as the docs show it
  std::uint64_t min = 0;                           // Integer
  std::uint64_t max = UINT64_MAX;                  // Integer
  double number_min = 0;                           // Number
  double number_max = 0;                           // Number
  std::span<const std::string_view> choices = {};  // Enum
  std::string_view unit = {};                      // "ms", "s", "bytes": for the docs
};

// The fields of one mapping, in the order the docs list them.
struct Section {
  std::string_view name;  // its key path ("limits", "serve.stream"); "" for the top level
  std::span<const Field> fields;

  const Field* find(std::string_view key) const;
  std::string key_list() const;  // "a, b, c"
};

// Where a value is: "file:line: key.path" (unknown parts are left out).
struct Where {
  std::string file;
  int line = 0;  // 1-based; 0 when unknown
  std::string path;

  // `path.key` (or `key` at the top), at `line` when known, else this one's.
  Where child(std::string_view key, int at_line = 0) const;
  Where item(std::size_t index, int at_line = 0) const;  // `path[index]`
  std::string str() const;
};

// A Config error "where: what".
std::unexpected<Error> field_error(const Where& where, std::string_view what);

// A value as a document gives it. `json` is its typed form: YAML plain scalars by the YAML 1.2
// core schema (yaml_to_json.hpp), quoted ones strings; a list an array and a mapping an object
// (their contents may be left out). `text` is what a string field reads: any YAML scalar's source
// text (`project: 123` is "123"), a JSON string; unset for anything else. `got` is how a message
// shows the value (`"overlay"`, `a list`, `5`).
struct FieldValue {
  Json json;
  std::optional<std::string> text;
  std::string got;

  bool is_null() const { return json.is_null(); }
  static FieldValue of(const Json& json);
};

// Refuses a key outside `section`: "unknown key (expected one of: a, b); did you mean `b`?"
// (the suggestion when one key is within two edits). Returns the field otherwise.
Result<const Field*> known_key(const Section& section, std::string_view key, const Where& where);

// Typed reads of one value against its field. A null value reads as nullopt (the default stays).
Result<std::optional<std::string>> read_string(const FieldValue& v, const Where& where);
Result<std::optional<bool>> read_bool(const FieldValue& v, const Where& where);
Result<std::optional<std::uint64_t>> read_integer(const Field& f, const FieldValue& v,
                                                  const Where& where);
Result<std::optional<double>> read_number(const Field& f, const FieldValue& v, const Where& where);
// The index of the choice the value names.
Result<std::optional<std::size_t>> read_enum(const Field& f, const FieldValue& v,
                                             const Where& where);

// The fields of `section` as a Markdown table (key, type, default, doc): `kernex config fields`.
std::string describe(const Section& section);

}  // namespace kernex::config
