// The values a chat template computes with (tokenizer/chat_template.h): JSON (Python's str, int, float,
// bool, None, list and dict), Jinja's Undefined, namespace() objects, macros and the `loop` of a for loop;
// Python's truthiness, str(), ==, < and json.dumps on them; and the Budget that caps what a render makes.
//
// A Value that is JSON shares the document it points into (a message of `messages` is not copied when a
// loop visits it). Not thread-safe: values live inside one render.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/chat_template_ast.h"

namespace autouvm::tokenizer::chat_template {

class Value;
struct Namespace;
struct LoopState;

class Value {
 public:
  enum class Kind { kUndefined, kJson, kNamespace, kMacro, kLoop };

  Value() = default;  // undefined
  // `hint` names what was looked up, for errors ("'hint' is undefined").
  static Value Undefined(std::string hint);
  static Value Own(Json json);
  // A value inside a document someone else keeps alive (the context, a literal of the template).
  static Value Borrow(const Json* json);
  static Value OfNamespace(std::shared_ptr<Namespace> ns);
  static Value OfMacro(const Node* macro);
  static Value OfLoop(std::shared_ptr<const LoopState> loop);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_json() const { return kind_ == Kind::kJson; }
  bool is_string() const { return is_json() && json_->is_string(); }
  const Json& json() const { return *json_; }  // is_json() only
  const std::string& hint() const { return hint_; }
  Namespace* ns() const { return ns_.get(); }
  const Node* macro() const { return macro_; }
  const LoopState* loop() const { return loop_.get(); }
  // A value inside json() (an item, a member), sharing its document.
  Value Child(const Json* inner) const;

 private:
  Kind kind_ = Kind::kUndefined;
  std::shared_ptr<const Json> json_;
  std::shared_ptr<Namespace> ns_;
  std::shared_ptr<const LoopState> loop_;
  const Node* macro_ = nullptr;
  std::string hint_;
};

// namespace(...): the one value a template can change in place ({% set ns.attr = ... %}).
struct Namespace {
  std::vector<std::pair<std::string, Value>> attrs;
  Value* Find(std::string_view name);
};

// The `loop` of one iteration.
struct LoopState {
  std::shared_ptr<const std::vector<Value>> items;
  size_t index0 = 0;
};

// Python's names for a value's type, as its errors say them: 'str', 'int', 'list', 'dict', 'NoneType', ...
std::string TypeName(const Value& v);
bool Truthy(const Value& v);

// Numbers as Python has them (bool counts as int, as in Python).
struct Number {
  bool is_float = false;
  int64_t i = 0;
  double f = 0;
  double AsDouble() const { return is_float ? f : static_cast<double>(i); }
};
std::optional<Number> AsNumber(const Value& v);
Value NumberValue(const Number& n);
// repr(float), which str() and json.dumps print too: "1.0", "0.1", "1e+16", "inf", "nan".
std::string PyFloat(double v);

// str(v) appended to *out: strings as they are, None, True/False, lists and dicts as Python prints them;
// undefined as "".
absl::Status AppendStr(const Value& v, std::string* out);
absl::StatusOr<std::string> Str(const Value& v);

struct JsonFormat {
  std::optional<std::string> indent;  // none: on one line
  std::string item_separator = ", ";  // Python's defaults (", " becomes "," with an indent)
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};
// json.dumps(v, ...); INVALID_ARGUMENT for what JSON cannot hold (undefined, a namespace, a macro).
absl::StatusOr<std::string> ToJson(const Value& v, const JsonFormat& format);

// What a value is as an item of a list or dict: undefined becomes None; INVALID_ARGUMENT for the rest that
// JSON cannot hold.
absl::StatusOr<Json> ToJsonItem(const Value& v);

// Python's == and the ordering of < > <= >= (negative, 0, positive); INVALID_ARGUMENT for types Python
// does not order ('<' not supported between instances of 'str' and 'int').
absl::StatusOr<bool> Equal(const Value& a, const Value& b);
absl::StatusOr<int> Compare(const Value& a, const Value& b, std::string_view op);

// What a render may still make (RenderLimits); every string, list and dict made on the way is charged.
class Budget {
 public:
  explicit Budget(const RenderLimits& limits) : limits_(limits) {}
  const RenderLimits& limits() const { return limits_; }
  // A string of `bytes` made: RESOURCE_EXHAUSTED when it is longer than max_output_bytes or the work so
  // far passes max_work_bytes.
  absl::Status String(size_t bytes);
  // A list or dict made (charged by its size).
  absl::Status Container(const Json& json);
  // A loop iteration or macro call.
  absl::Status Step();

 private:
  RenderLimits limits_;
  size_t work_ = 0;
  int64_t steps_ = 0;
};

// Nesting of values that the functions above walk (a context's JSON, lists of lists a template built).
inline constexpr int kMaxValueDepth = 200;

}  // namespace autouvm::tokenizer::chat_template
