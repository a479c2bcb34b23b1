// Jinja's filters and tests that chat templates use (chat_template_builtins.h).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "tokenizer/chat_template_builtins.h"
#include "tokenizer/chat_template_text.h"

namespace autouvm::tokenizer::chat_template {

const Value* Args::Get(size_t index, std::string_view name) const {
  if (index < positional.size()) return &positional[index];
  for (const auto& [key, value] : keyword)
    if (key == name) return &value;
  return nullptr;
}

absl::Status Args::Check(std::string_view what, size_t max_positional, std::vector<std::string_view> names) const {
  if (positional.size() > max_positional)
    return absl::InvalidArgumentError(absl::StrCat(std::string(what), " takes at most ", max_positional,
                                                   " positional argument(s), ", positional.size(), " given"));
  for (const auto& [key, value] : keyword) {
    const auto it = std::find(names.begin(), names.end(), key);
    if (it == names.end())
      return absl::InvalidArgumentError(
          absl::StrCat(std::string(what), " got an unexpected keyword argument '", key, "'"));
    if (static_cast<size_t>(it - names.begin()) < positional.size())
      return absl::InvalidArgumentError(
          absl::StrCat(std::string(what), " got multiple values for argument '", key, "'"));
  }
  return absl::OkStatus();
}

namespace {

constexpr std::string_view kFilters[] = {"abs",   "capitalize", "count",   "d",       "default", "first",      "float",
                                         "int",   "items",      "join",    "last",    "length",  "list",       "lower",
                                         "map",   "rejectattr", "replace", "reverse", "safe",    "selectattr", "string",
                                         "title", "tojson",     "trim",    "upper"};
constexpr std::string_view kTests[] = {"boolean", "callable", "defined",  "divisibleby", "eq",          "equalto",
                                       "even",    "false",    "float",    "ge",          "greaterthan", "gt",
                                       "in",      "integer",  "iterable", "le",          "lessthan",    "lower",
                                       "lt",      "mapping",  "ne",       "none",        "number",      "odd",
                                       "sameas",  "sequence", "string",   "true",        "undefined",   "upper"};

Value String(std::string s) { return Value::Own(Json(std::move(s))); }

absl::Status Undefined(const Value& v) {
  return absl::InvalidArgumentError(absl::StrCat("'", v.hint(), "' is undefined"));
}

absl::StatusOr<Value> Length(const Value& v) {
  if (v.is_undefined()) return Value::Own(0);
  if (v.is_string()) return Value::Own(static_cast<int64_t>(CharCount(v.json().get_ref<const std::string&>())));
  if (v.is_json() && (v.json().is_array() || v.json().is_object()))
    return Value::Own(static_cast<int64_t>(v.json().size()));
  if (v.kind() == Value::Kind::kNamespace) return Value::Own(static_cast<int64_t>(v.ns()->attrs.size()));
  return absl::InvalidArgumentError(absl::StrCat("object of type '", TypeName(v), "' has no len()"));
}

// tojson as transformers defines it: json.dumps(x, ensure_ascii=False, indent=None, separators=None,
// sort_keys=False), whose separators are (", ", ": ") on one line and (",", ": ") with an indent.
absl::StatusOr<Value> ToJsonFilter(const Value& v, const Args& args, Budget& budget) {
  RETURN_IF_ERROR(args.Check("tojson", 4, {"ensure_ascii", "indent", "separators", "sort_keys"}));
  JsonFormat format;
  if (const Value* a = args.Get(0, "ensure_ascii")) format.ensure_ascii = Truthy(*a);
  if (const Value* a = args.Get(1, "indent"); a != nullptr && !(a->is_json() && a->json().is_null())) {
    if (a->is_string()) {
      format.indent = a->json().get<std::string>();
    } else if (a->is_json() && a->json().is_number_integer()) {
      format.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(a->json().get<int64_t>(), 0, 64)), ' ');
    } else {
      return absl::InvalidArgumentError("tojson: indent must be an int or a string");
    }
    format.item_separator = ",";
  }
  if (const Value* a = args.Get(2, "separators"); a != nullptr && !(a->is_json() && a->json().is_null())) {
    if (!a->is_json() || !a->json().is_array() || a->json().size() != 2 || !a->json()[0].is_string() ||
        !a->json()[1].is_string())
      return absl::InvalidArgumentError("tojson: separators must be two strings");
    format.item_separator = a->json()[0].get<std::string>();
    format.key_separator = a->json()[1].get<std::string>();
  }
  if (const Value* a = args.Get(3, "sort_keys")) format.sort_keys = Truthy(*a);
  ASSIGN_OR_RETURN(std::string out, ToJson(v, format));
  RETURN_IF_ERROR(budget.String(out.size()));
  return String(std::move(out));
}

absl::StatusOr<Value> Join(const Value& v, const Args& args, Budget& budget) {
  RETURN_IF_ERROR(args.Check("join", 2, {"d", "attribute"}));
  std::string separator;
  if (const Value* a = args.Get(0, "d")) {
    ASSIGN_OR_RETURN(separator, Str(*a));
  }
  const Value* attribute = args.Get(1, "attribute");
  ASSIGN_OR_RETURN(std::vector<Value> items, Items(v));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += separator;
    Value item = items[i];
    if (attribute != nullptr) {
      ASSIGN_OR_RETURN(item, GetItem(item, *attribute));
    }
    RETURN_IF_ERROR(AppendStr(item, &out));
    RETURN_IF_ERROR(budget.String(out.size()));
  }
  return String(std::move(out));
}

// int(value, default=0, base=10) as Jinja's do_int: an int, a float truncated, a string read as either.
absl::StatusOr<Value> ToInt(const Value& v, const Args& args) {
  RETURN_IF_ERROR(args.Check("int", 2, {"default", "base"}));
  const Value* fallback = args.Get(0, "default");
  const Value otherwise = fallback != nullptr ? *fallback : Value::Own(0);
  if (v.is_string()) {
    const std::string_view s = StripSpace(v.json().get_ref<const std::string&>(), true, true);
    int64_t i = 0;
    if (auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), i);
        ec == std::errc() && end == s.data() + s.size())
      return Value::Own(i);
    double d = 0;
    if (auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), d);
        ec == std::errc() && end == s.data() + s.size() && std::isfinite(d) && std::fabs(d) < 9.2e18)
      return Value::Own(static_cast<int64_t>(d));
    return otherwise;
  }
  const std::optional<Number> n = AsNumber(v);
  if (!n.has_value()) return otherwise;
  if (!n->is_float) return Value::Own(n->i);
  if (!std::isfinite(n->f) || std::fabs(n->f) >= 9.2e18) return otherwise;
  return Value::Own(static_cast<int64_t>(n->f));
}

absl::StatusOr<Value> ToFloat(const Value& v, const Args& args) {
  RETURN_IF_ERROR(args.Check("float", 1, {"default"}));
  const Value* fallback = args.Get(0, "default");
  const Value otherwise = fallback != nullptr ? *fallback : Value::Own(0.0);
  if (v.is_string()) {
    const std::string_view s = StripSpace(v.json().get_ref<const std::string&>(), true, true);
    double d = 0;
    if (auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), d);
        ec == std::errc() && end == s.data() + s.size())
      return Value::Own(d);
    return otherwise;
  }
  const std::optional<Number> n = AsNumber(v);
  return n.has_value() ? Value::Own(n->AsDouble()) : otherwise;
}

absl::StatusOr<Value> FirstOrLast(const Value& v, bool first) {
  ASSIGN_OR_RETURN(std::vector<Value> items, Items(v));
  if (items.empty()) return Value::Undefined(first ? "first item" : "last item");
  return first ? items.front() : items.back();
}

absl::StatusOr<Value> ListOf(std::vector<Value> items, Budget& budget) {
  Json list = Json::array();
  for (const Value& item : items) {
    ASSIGN_OR_RETURN(Json j, ToJsonItem(item));
    list.push_back(std::move(j));
  }
  RETURN_IF_ERROR(budget.Container(list));
  return Value::Own(std::move(list));
}

// selectattr / rejectattr(attribute[, test, args...]): the items whose attribute passes (fails) the test
// (truthiness when there is none).
absl::StatusOr<Value> SelectAttr(const Value& v, const Args& args, bool select, Budget& budget) {
  if (args.positional.empty() || !args.positional[0].is_string() || !args.keyword.empty())
    return absl::InvalidArgumentError("selectattr/rejectattr take an attribute name, then a test and its arguments");
  Args test_args;
  test_args.positional.assign(args.positional.begin() + std::min<size_t>(2, args.positional.size()),
                              args.positional.end());
  std::string test;
  if (args.positional.size() > 1) {
    if (!args.positional[1].is_string()) return absl::InvalidArgumentError("selectattr/rejectattr: a test name");
    test = args.positional[1].json().get<std::string>();
    if (!IsTest(test)) return absl::InvalidArgumentError(absl::StrCat("unknown test '", test, "'"));
  }
  ASSIGN_OR_RETURN(std::vector<Value> items, Items(v));
  std::vector<Value> kept;
  for (const Value& item : items) {
    ASSIGN_OR_RETURN(Value attr, GetItem(item, args.positional[0]));
    bool pass = Truthy(attr);
    if (!test.empty()) {
      ASSIGN_OR_RETURN(pass, ApplyTest(test, attr, test_args));
    }
    if (pass == select) kept.push_back(item);
  }
  return ListOf(std::move(kept), budget);
}

// map(attribute=name[, default=x]) or map(filter_name, args...).
absl::StatusOr<Value> Map(const Value& v, const Args& args, Budget& budget) {
  ASSIGN_OR_RETURN(std::vector<Value> items, Items(v));
  std::vector<Value> out;
  if (const Value* attribute = args.Get(99, "attribute")) {
    RETURN_IF_ERROR(args.Check("map", 0, {"attribute", "default"}));
    const Value* fallback = args.Get(99, "default");
    for (const Value& item : items) {
      ASSIGN_OR_RETURN(Value attr, GetItem(item, *attribute));
      out.push_back(attr.is_undefined() && fallback != nullptr ? *fallback : attr);
    }
    return ListOf(std::move(out), budget);
  }
  if (args.positional.empty() || !args.positional[0].is_string())
    return absl::InvalidArgumentError("map takes attribute=name or a filter name");
  const std::string filter = args.positional[0].json().get<std::string>();
  if (!IsFilter(filter)) return absl::InvalidArgumentError(absl::StrCat("unknown filter '", filter, "'"));
  Args rest{std::vector<Value>(args.positional.begin() + 1, args.positional.end()), args.keyword};
  for (const Value& item : items) {
    ASSIGN_OR_RETURN(Value mapped, ApplyFilter(filter, item, rest, budget));
    out.push_back(std::move(mapped));
  }
  return ListOf(std::move(out), budget);
}

// Filters that are a method of str (on str() of the value) under another name or the same.
absl::StatusOr<Value> StringFilter(std::string_view method, const Value& v, const Args& args, Budget& budget) {
  ASSIGN_OR_RETURN(std::string s, Str(v));
  return CallMethod(String(std::move(s)), method, args, budget);
}

}  // namespace

bool IsFilter(std::string_view name) {
  return std::find(std::begin(kFilters), std::end(kFilters), name) != std::end(kFilters);
}
bool IsTest(std::string_view name) { return std::find(std::begin(kTests), std::end(kTests), name) != std::end(kTests); }

absl::StatusOr<Value> ApplyFilter(std::string_view name, const Value& v, const Args& args, Budget& budget) {
  if (name == "default" || name == "d") {
    RETURN_IF_ERROR(args.Check(name, 2, {"default_value", "boolean"}));
    const Value* fallback = args.Get(0, "default_value");
    const Value* boolean = args.Get(1, "boolean");
    const bool use = v.is_undefined() || (boolean != nullptr && Truthy(*boolean) && !Truthy(v));
    if (!use) return v;
    return fallback != nullptr ? *fallback : String("");
  }
  if (name == "tojson") return ToJsonFilter(v, args, budget);
  if (name == "join") return Join(v, args, budget);
  if (name == "int") return ToInt(v, args);
  if (name == "float") return ToFloat(v, args);
  if (name == "selectattr" || name == "rejectattr") return SelectAttr(v, args, name == "selectattr", budget);
  if (name == "map") return Map(v, args, budget);
  if (name == "trim") return StringFilter("strip", v, args, budget);
  if (name == "title") {  // Jinja's own, not str.title() (chat_template_text.h)
    RETURN_IF_ERROR(args.Check(name, 0, {}));
    ASSIGN_OR_RETURN(std::string s, Str(v));
    std::string out = JinjaTitle(s);
    RETURN_IF_ERROR(budget.String(out.size()));
    return String(std::move(out));
  }
  if (name == "replace" || name == "upper" || name == "lower" || name == "capitalize")
    return StringFilter(name, v, args, budget);
  RETURN_IF_ERROR(args.Check(name, 0, {}));
  if (name == "length" || name == "count") return Length(v);
  if (name == "first" || name == "last") return FirstOrLast(v, name == "first");
  if (name == "safe") return v;
  if (name == "string") {
    ASSIGN_OR_RETURN(std::string s, Str(v));
    return String(std::move(s));
  }
  if (name == "abs") {
    const std::optional<Number> n = AsNumber(v);
    if (!n.has_value())
      return absl::InvalidArgumentError(absl::StrCat("bad operand type for abs(): '", TypeName(v), "'"));
    if (n->is_float) return Value::Own(std::fabs(n->f));
    if (n->i == INT64_MIN) return absl::InvalidArgumentError("integer overflow");
    return Value::Own(n->i < 0 ? -n->i : n->i);
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::Own(Json::array());
    return CallMethod(v, "items", args, budget);
  }
  ASSIGN_OR_RETURN(std::vector<Value> items, Items(v));  // list, reverse
  if (name == "reverse") {
    if (v.is_string()) {
      std::vector<std::string_view> chars = Chars(v.json().get_ref<const std::string&>());
      std::string out;
      for (size_t i = chars.size(); i-- > 0;) out.append(chars[i]);
      return String(std::move(out));
    }
    std::reverse(items.begin(), items.end());
  }
  return ListOf(std::move(items), budget);
}

absl::StatusOr<bool> ApplyTest(std::string_view name, const Value& v, const Args& args) {
  const Json* j = v.is_json() ? &v.json() : nullptr;
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return j != nullptr && j->is_null();
  if (name == "string") return v.is_string();
  if (name == "mapping") return j != nullptr && j->is_object();
  if (name == "iterable" || name == "sequence")
    return v.is_undefined() || (j != nullptr && (j->is_string() || j->is_array() || j->is_object()));
  if (name == "number") return j != nullptr && (j->is_number() || j->is_boolean());
  if (name == "integer") return j != nullptr && j->is_number_integer();
  if (name == "float") return j != nullptr && j->is_number_float();
  if (name == "boolean") return j != nullptr && j->is_boolean();
  if (name == "true" || name == "false") return j != nullptr && j->is_boolean() && j->get<bool>() == (name == "true");
  if (name == "callable") return v.kind() == Value::Kind::kMacro;
  if (name == "lower" || name == "upper") {
    if (!v.is_string()) return false;
    const std::string& s = j->get_ref<const std::string&>();
    return (name == "lower" ? Lower(s) : Upper(s)) == s;
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    const std::optional<Number> n = AsNumber(v);
    if (!n.has_value() || n->is_float)
      return absl::InvalidArgumentError(absl::StrCat("'", std::string(name), "' needs an integer"));
    int64_t by = 2;
    if (name == "divisibleby") {
      const std::optional<Number> d = args.positional.size() == 1 ? AsNumber(args.positional[0]) : std::nullopt;
      if (!d.has_value() || d->is_float || d->i == 0)
        return absl::InvalidArgumentError("'divisibleby' needs a non-zero integer");
      by = d->i;
    }
    const bool divisible = by == -1 || n->i % by == 0;
    return name == "odd" ? !divisible : divisible;
  }
  if (args.positional.size() != 1 || !args.keyword.empty())
    return absl::InvalidArgumentError(absl::StrCat("the test '", std::string(name), "' takes one argument"));
  const Value& other = args.positional[0];
  if (name == "eq" || name == "equalto" || name == "sameas") return Equal(v, other);
  if (name == "ne") {
    ASSIGN_OR_RETURN(bool same, Equal(v, other));
    return !same;
  }
  if (name == "in") {
    return Contains(other, v);
  }
  const std::string_view op = name == "lt" || name == "lessthan"      ? "<"
                              : name == "le"                          ? "<="
                              : name == "gt" || name == "greaterthan" ? ">"
                                                                      : ">=";
  ASSIGN_OR_RETURN(int c, Compare(v, other, op));
  return op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
}

}  // namespace autouvm::tokenizer::chat_template
