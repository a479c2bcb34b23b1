// Python's operators, item and attribute access, and the methods of str, dict and loop
// (chat_template_builtins.h).
#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "tokenizer/chat_template_builtins.h"
#include "tokenizer/chat_template_text.h"

namespace autouvm::tokenizer::chat_template {
namespace {

Value String(std::string s) { return Value::Own(Json(std::move(s))); }

absl::Status Undefined(const Value& v) {
  return absl::InvalidArgumentError(absl::StrCat("'", v.hint(), "' is undefined"));
}

std::optional<int64_t> AsInt(const Value& v) {
  const std::optional<Number> n = AsNumber(v);
  if (!n.has_value() || n->is_float) return std::nullopt;
  return n->i;
}

bool IsNone(const Value* v) { return v == nullptr || v->is_undefined() || (v->is_json() && v->json().is_null()); }

}  // namespace

absl::StatusOr<std::vector<Value>> Items(const Value& v) {
  std::vector<Value> items;
  if (v.is_undefined()) return items;
  if (v.is_json()) {
    const Json& j = v.json();
    if (j.is_array()) {
      items.reserve(j.size());
      for (const Json& item : j) items.push_back(v.Child(&item));
      return items;
    }
    if (j.is_object()) {
      for (const auto& [key, value] : j.items()) items.push_back(String(key));
      return items;
    }
    if (j.is_string()) {
      for (std::string_view c : Chars(j.get_ref<const std::string&>())) items.push_back(String(std::string(c)));
      return items;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("'", TypeName(v), "' object is not iterable"));
}

Value GetAttr(const Value& v, const std::string& name) {
  if (v.is_undefined()) return v;  // Note [Chat template subset]: an attribute of undefined is undefined
  if (v.is_json() && v.json().is_object()) {
    const auto it = v.json().find(name);
    if (it != v.json().end()) return v.Child(&*it);
  } else if (v.kind() == Value::Kind::kNamespace) {
    if (Value* attr = v.ns()->Find(name)) return *attr;
  } else if (v.kind() == Value::Kind::kLoop) {
    const LoopState& loop = *v.loop();
    const auto n = static_cast<int64_t>(loop.items->size());
    const auto i = static_cast<int64_t>(loop.index0);
    if (name == "index") return Value::Own(i + 1);
    if (name == "index0") return Value::Own(i);
    if (name == "revindex") return Value::Own(n - i);
    if (name == "revindex0") return Value::Own(n - i - 1);
    if (name == "first") return Value::Own(i == 0);
    if (name == "last") return Value::Own(i == n - 1);
    if (name == "length") return Value::Own(n);
    if (name == "depth") return Value::Own(1);
    if (name == "depth0") return Value::Own(0);
    if (name == "previtem" && i > 0) return (*loop.items)[i - 1];
    if (name == "nextitem" && i + 1 < n) return (*loop.items)[i + 1];
  }
  return Value::Undefined(name);
}

absl::StatusOr<Value> GetItem(const Value& v, const Value& key) {
  if (v.is_undefined()) return v;
  if (key.is_string() && !(v.is_json() && v.json().is_object())) return GetAttr(v, key.json().get<std::string>());
  if (v.is_json()) {
    const Json& j = v.json();
    if (j.is_object() && key.is_string()) {
      const auto it = j.find(key.json().get_ref<const std::string&>());
      if (it != j.end()) return v.Child(&*it);
    } else if (const std::optional<int64_t> index = AsInt(key); index.has_value() && (j.is_array() || j.is_string())) {
      if (j.is_array()) {
        const auto n = static_cast<int64_t>(j.size());
        const int64_t i = *index < 0 ? *index + n : *index;
        if (i >= 0 && i < n) return v.Child(&j[static_cast<size_t>(i)]);
      } else {
        const std::vector<std::string_view> chars = Chars(j.get_ref<const std::string&>());
        const auto n = static_cast<int64_t>(chars.size());
        const int64_t i = *index < 0 ? *index + n : *index;
        if (i >= 0 && i < n) return String(std::string(chars[static_cast<size_t>(i)]));
      }
    }
  }
  ASSIGN_OR_RETURN(std::string name, Str(key));
  return Value::Undefined(std::move(name));
}

absl::StatusOr<Value> Slice(const Value& v, const Value* start_v, const Value* stop_v, const Value* step_v,
                            Budget& budget) {
  int64_t bounds[3] = {0, 0, 1};
  const Value* given[3] = {start_v, stop_v, step_v};
  for (int k = 0; k < 3; ++k) {
    if (IsNone(given[k])) continue;
    const std::optional<int64_t> i = AsInt(*given[k]);
    if (!i.has_value()) return absl::InvalidArgumentError("slice indices must be integers or None");
    bounds[k] = *i;
  }
  if (bounds[2] == 0) return absl::InvalidArgumentError("slice step cannot be zero");
  const bool is_string = v.is_string();
  if (!is_string && !(v.is_json() && v.json().is_array()))
    return absl::InvalidArgumentError(absl::StrCat("'", TypeName(v), "' object is not subscriptable"));
  std::vector<std::string_view> chars;
  if (is_string) chars = Chars(v.json().get_ref<const std::string&>());
  const auto n = static_cast<int64_t>(is_string ? chars.size() : v.json().size());
  const int64_t step = std::clamp<int64_t>(bounds[2], -n - 1, n + 1);  // a longer step leaves the same items
  const int64_t lower = step < 0 ? -1 : 0;
  const int64_t upper = step < 0 ? n - 1 : n;
  auto adjust = [&](int k, int64_t fallback) {
    if (IsNone(given[k])) return fallback;
    int64_t i = bounds[k];
    if (i < 0) i = std::max<int64_t>(i, -n - 1) + n;
    return std::clamp(i, lower, upper);
  };
  const int64_t start = adjust(0, step < 0 ? upper : lower);
  const int64_t stop = adjust(1, step < 0 ? lower : upper);
  std::string s;
  Json list = Json::array();
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (is_string) {
      s.append(chars[static_cast<size_t>(i)]);
    } else {
      list.push_back(v.json()[static_cast<size_t>(i)]);
    }
  }
  if (is_string) {
    RETURN_IF_ERROR(budget.String(s.size()));
    return String(std::move(s));
  }
  RETURN_IF_ERROR(budget.Container(list));
  return Value::Own(std::move(list));
}

absl::StatusOr<bool> Contains(const Value& container, const Value& item) {
  if (container.is_undefined()) return false;
  if (container.is_json()) {
    const Json& j = container.json();
    if (j.is_string()) {
      if (!item.is_string())
        return absl::InvalidArgumentError(
            absl::StrCat("'in <string>' requires string as left operand, not ", TypeName(item)));
      return j.get_ref<const std::string&>().find(item.json().get_ref<const std::string&>()) != std::string::npos;
    }
    if (j.is_object()) return item.is_string() && j.contains(item.json().get_ref<const std::string&>());
    if (j.is_array()) {
      for (const Json& x : j) {
        ASSIGN_OR_RETURN(bool same, Equal(container.Child(&x), item));
        if (same) return true;
      }
      return false;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("argument of type '", TypeName(container), "' is not iterable"));
}

namespace {

absl::StatusOr<std::vector<std::string>> Split(std::string_view s, const Value* sep_v, const Value* max_v) {
  int64_t max_split = -1;
  if (!IsNone(max_v)) {
    const std::optional<int64_t> m = AsInt(*max_v);
    if (!m.has_value()) return absl::InvalidArgumentError("split: maxsplit must be an int");
    max_split = *m;
  }
  std::vector<std::string> parts;
  if (IsNone(sep_v)) {  // runs of whitespace, none at the ends
    size_t i = 0;
    while (true) {
      while (i < s.size() && SpaceAt(s, i) > 0) i += SpaceAt(s, i);
      if (i >= s.size()) break;
      if (max_split >= 0 && static_cast<int64_t>(parts.size()) == max_split) {
        parts.emplace_back(s.substr(i));
        break;
      }
      size_t e = i;
      while (e < s.size() && SpaceAt(s, e) == 0) {
        size_t len = 0;
        DecodeAt(s, e, &len);
        e += len;
      }
      parts.emplace_back(s.substr(i, e - i));
      i = e;
    }
    return parts;
  }
  if (!sep_v->is_string()) return absl::InvalidArgumentError("split: the separator must be a string");
  const std::string& sep = sep_v->json().get_ref<const std::string&>();
  if (sep.empty()) return absl::InvalidArgumentError("empty separator");
  size_t i = 0;
  for (size_t at; (max_split < 0 || static_cast<int64_t>(parts.size()) < max_split) &&
                  (at = s.find(sep, i)) != std::string_view::npos;
       i = at + sep.size())
    parts.emplace_back(s.substr(i, at - i));
  parts.emplace_back(s.substr(i));
  return parts;
}

absl::StatusOr<std::string> Replace(std::string_view s, const Args& args, Budget& budget) {
  RETURN_IF_ERROR(args.Check("replace", 3, {"old", "new", "count"}));
  const Value* old_v = args.Get(0, "old");
  const Value* new_v = args.Get(1, "new");
  if (old_v == nullptr || new_v == nullptr || !old_v->is_string() || !new_v->is_string())
    return absl::InvalidArgumentError("replace takes two strings");
  int64_t count = -1;
  if (const Value* c = args.Get(2, "count"); !IsNone(c)) count = AsInt(*c).value_or(-1);
  const std::string& from = old_v->json().get_ref<const std::string&>();
  const std::string& to = new_v->json().get_ref<const std::string&>();
  std::string out;
  int64_t done = 0;
  if (from.empty()) {  // Python puts `to` before every character and at the end
    for (std::string_view c : Chars(s)) {
      if (count < 0 || done++ < count) out += to;
      out += c;
      RETURN_IF_ERROR(budget.String(out.size()));
    }
    if (count < 0 || done < count) out += to;
  } else {
    size_t i = 0;
    for (size_t at; (count < 0 || done < count) && (at = s.find(from, i)) != std::string_view::npos; ++done) {
      out.append(s.substr(i, at - i)).append(to);
      i = at + from.size();
      RETURN_IF_ERROR(budget.String(out.size()));
    }
    out.append(s.substr(i));
  }
  RETURN_IF_ERROR(budget.String(out.size()));
  return out;
}

absl::StatusOr<bool> Affix(std::string_view s, const Value* affix, bool prefix) {
  std::vector<Value> options;
  if (affix != nullptr && affix->is_json() && affix->json().is_array()) {
    ASSIGN_OR_RETURN(options, Items(*affix));
  } else if (affix != nullptr) {
    options.push_back(*affix);
  }
  if (options.empty() && affix == nullptr) return absl::InvalidArgumentError("startswith/endswith take a string");
  for (const Value& o : options) {
    if (!o.is_string()) return absl::InvalidArgumentError("startswith/endswith take a string or a list of strings");
    const std::string& a = o.json().get_ref<const std::string&>();
    if (a.size() <= s.size() && (prefix ? s.substr(0, a.size()) : s.substr(s.size() - a.size())) == a) return true;
  }
  return false;
}

absl::StatusOr<Value> StringMethod(const std::string& s, std::string_view name, const Args& args, Budget& budget) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    RETURN_IF_ERROR(args.Check(name, 1, {"chars"}));
    const Value* chars = args.Get(0, "chars");
    const bool left = name != "rstrip";
    const bool right = name != "lstrip";
    if (IsNone(chars)) return String(std::string(StripSpace(s, left, right)));
    if (!chars->is_string())
      return absl::InvalidArgumentError(absl::StrCat(std::string(name), " arg must be None or str"));
    return String(std::string(StripChars(s, chars->json().get_ref<const std::string&>(), left, right)));
  }
  if (name == "startswith" || name == "endswith") {
    RETURN_IF_ERROR(args.Check(name, 1, {}));
    ASSIGN_OR_RETURN(bool yes, Affix(s, args.Get(0, ""), name == "startswith"));
    return Value::Own(yes);
  }
  if (name == "split") {
    RETURN_IF_ERROR(args.Check(name, 2, {"sep", "maxsplit"}));
    ASSIGN_OR_RETURN(std::vector<std::string> parts, Split(s, args.Get(0, "sep"), args.Get(1, "maxsplit")));
    Json list(parts);
    RETURN_IF_ERROR(budget.Container(list));
    return Value::Own(std::move(list));
  }
  if (name == "replace") {
    ASSIGN_OR_RETURN(std::string out, Replace(s, args, budget));
    return String(std::move(out));
  }
  if (name == "join") {
    RETURN_IF_ERROR(args.Check(name, 1, {}));
    if (args.positional.size() != 1) return absl::InvalidArgumentError("join takes one argument");
    ASSIGN_OR_RETURN(std::vector<Value> items, Items(args.positional[0]));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string())
        return absl::InvalidArgumentError(
            absl::StrCat("sequence item ", i, ": expected str instance, ", TypeName(items[i]), " found"));
      if (i > 0) out += s;
      out += items[i].json().get_ref<const std::string&>();
      RETURN_IF_ERROR(budget.String(out.size()));
    }
    return String(std::move(out));
  }
  RETURN_IF_ERROR(args.Check(name, 0, {}));
  std::string out;
  if (name == "upper") {
    out = Upper(s);
  } else if (name == "lower") {
    out = Lower(s);
  } else if (name == "title") {
    out = Title(s);
  } else if (name == "capitalize") {
    out = Capitalize(s);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("'str' object has no method '", std::string(name), "'"));
  }
  RETURN_IF_ERROR(budget.String(out.size()));
  return String(std::move(out));
}

absl::StatusOr<Value> DictMethod(const Value& v, std::string_view name, const Args& args, Budget& budget) {
  const Json& j = v.json();
  if (name == "get") {
    RETURN_IF_ERROR(args.Check(name, 2, {}));
    if (args.positional.empty()) return absl::InvalidArgumentError("get takes a key");
    const Value& key = args.positional[0];
    if (key.is_string()) {
      const auto it = j.find(key.json().get_ref<const std::string&>());
      if (it != j.end()) return v.Child(&*it);
    }
    return args.positional.size() > 1 ? args.positional[1] : Value::Own(nullptr);
  }
  RETURN_IF_ERROR(args.Check(name, 0, {}));
  Json out = Json::array();
  if (name == "items") {
    for (const auto& [key, value] : j.items()) out.push_back(Json::array({key, value}));
  } else if (name == "keys") {
    for (const auto& [key, value] : j.items()) out.push_back(key);
  } else if (name == "values") {
    for (const auto& [key, value] : j.items()) out.push_back(value);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("'dict' object has no method '", std::string(name), "'"));
  }
  RETURN_IF_ERROR(budget.Container(out));
  return Value::Own(std::move(out));
}

}  // namespace

absl::StatusOr<Value> CallMethod(const Value& v, std::string_view name, const Args& args, Budget& budget) {
  if (v.is_undefined()) return Undefined(v);
  if (v.is_string()) return StringMethod(v.json().get_ref<const std::string&>(), name, args, budget);
  if (v.is_json() && v.json().is_object()) return DictMethod(v, name, args, budget);
  if (v.kind() == Value::Kind::kLoop && name == "cycle") {
    if (args.positional.empty() || !args.keyword.empty()) return absl::InvalidArgumentError("cycle takes values");
    return args.positional[v.loop()->index0 % args.positional.size()];
  }
  return absl::InvalidArgumentError(absl::StrCat("'", TypeName(v), "' object has no method '", std::string(name), "'"));
}

namespace {

absl::Status Unsupported(std::string_view op, const Value& a, const Value& b) {
  return absl::InvalidArgumentError(absl::StrCat("unsupported operand type(s) for ", std::string(op), ": '",
                                                 TypeName(a), "' and '", TypeName(b), "'"));
}

absl::StatusOr<Value> IntPower(int64_t base, int64_t exp) {
  int64_t result = 1;
  while (exp > 0) {
    if (exp & 1)
      if (__builtin_mul_overflow(result, base, &result)) return absl::InvalidArgumentError("integer overflow");
    exp >>= 1;
    if (exp > 0 && __builtin_mul_overflow(base, base, &base)) {
      if (result == 0) return Value::Own(0);
      return absl::InvalidArgumentError("integer overflow");
    }
  }
  return Value::Own(result);
}

absl::StatusOr<Value> IntArithmetic(std::string_view op, int64_t a, int64_t b) {
  int64_t r = 0;
  if (op == "+" || op == "-" || op == "*") {
    const bool overflow = op == "+"   ? __builtin_add_overflow(a, b, &r)
                          : op == "-" ? __builtin_sub_overflow(a, b, &r)
                                      : __builtin_mul_overflow(a, b, &r);
    if (overflow) return absl::InvalidArgumentError("integer overflow");
    return Value::Own(r);
  }
  if (op == "**") {
    if (b >= 0) return IntPower(a, b);
    return Value::Own(std::pow(static_cast<double>(a), static_cast<double>(b)));
  }
  if (b == 0) return absl::InvalidArgumentError("division by zero");
  if (op == "/") return Value::Own(static_cast<double>(a) / static_cast<double>(b));
  if (b == -1) {  // INT64_MIN / -1 does not fit
    if (op == "%") return Value::Own(0);
    if (a == INT64_MIN) return absl::InvalidArgumentError("integer overflow");
    return Value::Own(-a);
  }
  if (op == "//") return Value::Own(a / b - ((a % b != 0 && (a < 0) != (b < 0)) ? 1 : 0));
  r = a % b;
  return Value::Own(r != 0 && (r < 0) != (b < 0) ? r + b : r);
}

absl::StatusOr<Value> FloatArithmetic(std::string_view op, double a, double b) {
  if (op == "+") return Value::Own(a + b);
  if (op == "-") return Value::Own(a - b);
  if (op == "*") return Value::Own(a * b);
  if (op == "**") return Value::Own(std::pow(a, b));
  if (b == 0) return absl::InvalidArgumentError("division by zero");
  if (op == "/") return Value::Own(a / b);
  if (op == "//") return Value::Own(std::floor(a / b));
  double r = std::fmod(a, b);
  if (r != 0 && (r < 0) != (b < 0)) r += b;
  return Value::Own(r);
}

absl::StatusOr<Value> Repeat(const Value& s, const Value& n, Budget& budget) {
  const std::optional<int64_t> count = AsInt(n);
  if (!count.has_value()) return Unsupported("*", s, n);
  const std::string& text = s.json().get_ref<const std::string&>();
  if (*count <= 0 || text.empty()) return String("");
  if (static_cast<uint64_t>(*count) > budget.limits().max_output_bytes / text.size() + 1)
    return budget.String(budget.limits().max_output_bytes + 1);
  std::string out;
  for (int64_t i = 0; i < *count; ++i) out += text;
  RETURN_IF_ERROR(budget.String(out.size()));
  return String(std::move(out));
}

}  // namespace

absl::StatusOr<Value> BinaryOp(std::string_view op, const Value& a, const Value& b, Budget& budget) {
  if (op == "==" || op == "!=") {
    ASSIGN_OR_RETURN(bool same, Equal(a, b));
    return Value::Own(same == (op == "=="));
  }
  if (op == "<" || op == ">" || op == "<=" || op == ">=") {
    ASSIGN_OR_RETURN(int c, Compare(a, b, op));
    return Value::Own(op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0);
  }
  if (op == "in" || op == "not in") {
    ASSIGN_OR_RETURN(bool in, Contains(b, a));
    return Value::Own(in == (op == "in"));
  }
  if (op == "~") {
    std::string out;
    RETURN_IF_ERROR(AppendStr(a, &out));
    RETURN_IF_ERROR(AppendStr(b, &out));
    RETURN_IF_ERROR(budget.String(out.size()));
    return String(std::move(out));
  }
  if (a.is_undefined()) return Undefined(a);
  if (b.is_undefined()) return Undefined(b);
  const std::optional<Number> x = AsNumber(a);
  const std::optional<Number> y = AsNumber(b);
  if (x.has_value() && y.has_value()) {
    if (!x->is_float && !y->is_float) return IntArithmetic(op, x->i, y->i);
    return FloatArithmetic(op, x->AsDouble(), y->AsDouble());
  }
  if (op == "+" && a.is_string() && b.is_string()) {
    std::string out = a.json().get<std::string>() + b.json().get_ref<const std::string&>();
    RETURN_IF_ERROR(budget.String(out.size()));
    return String(std::move(out));
  }
  if (op == "+" && a.is_json() && b.is_json() && a.json().is_array() && b.json().is_array()) {
    Json out = a.json();
    for (const Json& item : b.json()) out.push_back(item);
    RETURN_IF_ERROR(budget.Container(out));
    return Value::Own(std::move(out));
  }
  if (op == "*" && a.is_string()) return Repeat(a, b, budget);
  if (op == "*" && b.is_string()) return Repeat(b, a, budget);
  return Unsupported(op, a, b);
}

absl::StatusOr<Value> UnaryOp(std::string_view op, const Value& a) {
  if (a.is_undefined()) return Undefined(a);
  const std::optional<Number> n = AsNumber(a);
  if (!n.has_value())
    return absl::InvalidArgumentError(
        absl::StrCat("bad operand type for unary ", std::string(op), ": '", TypeName(a), "'"));
  if (op == "+") return NumberValue(*n);
  if (n->is_float) return Value::Own(-n->f);
  if (n->i == INT64_MIN) return absl::InvalidArgumentError("integer overflow");
  return Value::Own(-n->i);
}

}  // namespace autouvm::tokenizer::chat_template
