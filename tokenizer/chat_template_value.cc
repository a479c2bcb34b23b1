#include "tokenizer/chat_template_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "tokenizer/chat_template_text.h"

namespace autouvm::tokenizer::chat_template {

Value Value::Undefined(std::string hint) {
  Value v;
  v.hint_ = std::move(hint);
  return v;
}

Value Value::Own(Json json) {
  Value v;
  v.kind_ = Kind::kJson;
  v.json_ = std::make_shared<const Json>(std::move(json));
  return v;
}

Value Value::Borrow(const Json* json) {
  Value v;
  v.kind_ = Kind::kJson;
  v.json_ = std::shared_ptr<const Json>(std::shared_ptr<const Json>(), json);  // owns nothing
  return v;
}

Value Value::OfNamespace(std::shared_ptr<Namespace> ns) {
  Value v;
  v.kind_ = Kind::kNamespace;
  v.ns_ = std::move(ns);
  return v;
}

Value Value::OfMacro(const Node* macro) {
  Value v;
  v.kind_ = Kind::kMacro;
  v.macro_ = macro;
  return v;
}

Value Value::OfLoop(std::shared_ptr<const LoopState> loop) {
  Value v;
  v.kind_ = Kind::kLoop;
  v.loop_ = std::move(loop);
  return v;
}

Value Value::Child(const Json* inner) const {
  Value v;
  v.kind_ = Kind::kJson;
  v.json_ = std::shared_ptr<const Json>(json_, inner);
  return v;
}

Value* Namespace::Find(std::string_view name) {
  for (auto& [key, value] : attrs)
    if (key == name) return &value;
  return nullptr;
}

std::string TypeName(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNamespace:
      return "Namespace";
    case Value::Kind::kMacro:
      return "Macro";
    case Value::Kind::kLoop:
      return "LoopContext";
    case Value::Kind::kJson:
      break;
  }
  const Json& j = v.json();
  if (j.is_null()) return "NoneType";
  if (j.is_boolean()) return "bool";
  if (j.is_number_integer()) return "int";
  if (j.is_number_float()) return "float";
  if (j.is_string()) return "str";
  if (j.is_array()) return "list";
  return "dict";
}

bool Truthy(const Value& v) {
  if (v.is_undefined()) return false;
  if (!v.is_json()) return true;
  const Json& j = v.json();
  if (j.is_null()) return false;
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_number_float()) return j.get<double>() != 0;
  if (j.is_number_unsigned()) return j.get<uint64_t>() != 0;
  if (j.is_number_integer()) return j.get<int64_t>() != 0;
  if (j.is_string()) return !j.get_ref<const std::string&>().empty();
  return !j.empty();
}

std::optional<Number> AsNumber(const Value& v) {
  if (!v.is_json()) return std::nullopt;
  const Json& j = v.json();
  Number n;
  if (j.is_boolean()) {
    n.i = j.get<bool>() ? 1 : 0;
  } else if (j.is_number_unsigned()) {
    const auto u = j.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) {
      n.is_float = true;
      n.f = static_cast<double>(u);
    } else {
      n.i = static_cast<int64_t>(u);
    }
  } else if (j.is_number_integer()) {
    n.i = j.get<int64_t>();
  } else if (j.is_number_float()) {
    n.is_float = true;
    n.f = j.get<double>();
  } else {
    return std::nullopt;
  }
  return n;
}

Value NumberValue(const Number& n) { return n.is_float ? Value::Own(n.f) : Value::Own(n.i); }

std::string PyFloat(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  const std::string_view sci(buf, result.ptr - buf);  // "-1.2345e+02": shortest digits that read back
  const size_t e = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e))
    if (c >= '0' && c <= '9') digits.push_back(c);
  int exp = 0;
  std::from_chars(sci.data() + e + (sci[e + 1] == '+' ? 2 : 1), sci.data() + sci.size(), exp);
  std::string out = std::signbit(v) ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp < 0) return out + "0." + std::string(-exp - 1, '0') + digits;
    if (digits.size() <= static_cast<size_t>(exp) + 1) digits.append(exp + 1 - digits.size(), '0');
    const std::string frac = digits.substr(exp + 1);
    return out + digits.substr(0, exp + 1) + "." + (frac.empty() ? "0" : frac);
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  return out + absl::StrFormat("e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
}

namespace {

absl::Status TooDeep() { return absl::InvalidArgumentError("value nested too deeply"); }

void AppendRepr(std::string_view s, std::string* out) {
  const char quote = s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos ? '"' : '\'';
  out->push_back(quote);
  for (size_t i = 0, len = 0; i < s.size(); i += len) {
    const uint32_t c = DecodeAt(s, i, &len);
    if (c == static_cast<uint32_t>(quote) || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
    } else if (c == '\n' || c == '\r' || c == '\t') {
      out->append(c == '\n' ? "\\n" : c == '\r' ? "\\r" : "\\t");
    } else if (len == 1 && c >= 0x80) {  // not UTF-8: as it is
      out->push_back(s[i]);
    } else if (!IsPrintable(c)) {
      out->append(c < 0x100     ? absl::StrFormat("\\x%02x", c)
                  : c < 0x10000 ? absl::StrFormat("\\u%04x", c)
                                : absl::StrFormat("\\U%08x", c));
    } else {
      out->append(s.substr(i, len));
    }
  }
  out->push_back(quote);
}

// str() of a JSON value; `repr` for the items of lists and dicts, where strings are quoted.
absl::Status AppendJson(const Json& j, bool repr, int depth, std::string* out) {
  if (depth > kMaxValueDepth) return TooDeep();
  if (j.is_string()) {
    if (repr) {
      AppendRepr(j.get_ref<const std::string&>(), out);
    } else {
      out->append(j.get_ref<const std::string&>());
    }
  } else if (j.is_null()) {
    out->append("None");
  } else if (j.is_boolean()) {
    out->append(j.get<bool>() ? "True" : "False");
  } else if (j.is_number_float()) {
    out->append(PyFloat(j.get<double>()));
  } else if (j.is_number_unsigned()) {
    absl::StrAppend(out, j.get<uint64_t>());
  } else if (j.is_number_integer()) {
    absl::StrAppend(out, j.get<int64_t>());
  } else if (j.is_array()) {
    out->push_back('[');
    for (size_t i = 0; i < j.size(); ++i) {
      if (i > 0) out->append(", ");
      RETURN_IF_ERROR(AppendJson(j[i], true, depth + 1, out));
    }
    out->push_back(']');
  } else {
    out->push_back('{');
    bool first = true;
    for (const auto& [key, value] : j.items()) {
      if (!first) out->append(", ");
      first = false;
      AppendRepr(key, out);
      out->append(": ");
      RETURN_IF_ERROR(AppendJson(value, true, depth + 1, out));
    }
    out->push_back('}');
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status AppendStr(const Value& v, std::string* out) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return absl::OkStatus();
    case Value::Kind::kJson:
      return AppendJson(v.json(), false, 0, out);
    case Value::Kind::kNamespace: {
      out->append("<Namespace {");
      bool first = true;
      for (const auto& [key, value] : v.ns()->attrs) {
        if (!first) out->append(", ");
        first = false;
        AppendRepr(key, out);
        out->append(": ");
        ASSIGN_OR_RETURN(Json item, ToJsonItem(value));
        RETURN_IF_ERROR(AppendJson(item, true, 1, out));
      }
      out->append("}>");
      return absl::OkStatus();
    }
    case Value::Kind::kMacro:
      out->append("<Macro '" + v.macro()->text + "'>");
      return absl::OkStatus();
    case Value::Kind::kLoop:
      absl::StrAppend(out, "<LoopContext ", v.loop()->index0 + 1, "/", v.loop()->items->size(), ">");
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Str(const Value& v) {
  if (v.is_string()) return v.json().get<std::string>();
  std::string out;
  RETURN_IF_ERROR(AppendStr(v, &out));
  return out;
}

absl::StatusOr<Json> ToJsonItem(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return Json(nullptr);
    case Value::Kind::kJson:
      return v.json();
    default:
      return absl::InvalidArgumentError(absl::StrCat("a ", TypeName(v), " cannot be put in a list or dict"));
  }
}

namespace {

void AppendJsonString(std::string_view s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  for (size_t i = 0, len = 0; i < s.size(); i += len) {
    const uint32_t c = DecodeAt(s, i, &len);
    switch (c) {
      case '"':
        out->append("\\\"");
        continue;
      case '\\':
        out->append("\\\\");
        continue;
      case '\n':
        out->append("\\n");
        continue;
      case '\r':
        out->append("\\r");
        continue;
      case '\t':
        out->append("\\t");
        continue;
      case '\b':
        out->append("\\b");
        continue;
      case '\f':
        out->append("\\f");
        continue;
      default:
        break;
    }
    if (c < 0x20) {
      out->append(absl::StrFormat("\\u%04x", c));
    } else if (!ensure_ascii || c < 0x80 || len == 1) {
      out->append(s.substr(i, len));
    } else if (c < 0x10000) {
      out->append(absl::StrFormat("\\u%04x", c));
    } else {
      const uint32_t u = c - 0x10000;
      out->append(absl::StrFormat("\\u%04x\\u%04x", 0xD800 + (u >> 10), 0xDC00 + (u & 0x3FF)));
    }
  }
  out->push_back('"');
}

absl::Status AppendJsonDump(const Json& j, const JsonFormat& f, int depth, std::string* out) {
  if (depth > kMaxValueDepth) return TooDeep();
  if (j.is_string()) {
    AppendJsonString(j.get_ref<const std::string&>(), f.ensure_ascii, out);
  } else if (j.is_null()) {
    out->append("null");
  } else if (j.is_boolean()) {
    out->append(j.get<bool>() ? "true" : "false");
  } else if (j.is_number_float()) {
    const double d = j.get<double>();
    out->append(std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : PyFloat(d));
  } else if (j.is_number()) {
    out->append(j.dump());
  } else if (j.empty()) {
    out->append(j.is_array() ? "[]" : "{}");
  } else {
    std::string newline;
    if (f.indent.has_value()) {
      newline = "\n";
      for (int i = 0; i <= depth; ++i) newline += *f.indent;
    }
    std::vector<std::pair<const std::string*, const Json*>> members;
    if (j.is_object()) {
      for (const auto& [key, value] : j.items()) members.emplace_back(&key, &value);
      if (f.sort_keys)
        std::stable_sort(members.begin(), members.end(),
                         [](const auto& a, const auto& b) { return *a.first < *b.first; });
    } else {
      for (const Json& item : j) members.emplace_back(nullptr, &item);
    }
    out->push_back(j.is_array() ? '[' : '{');
    for (size_t i = 0; i < members.size(); ++i) {
      out->append(i == 0 ? "" : f.item_separator);
      out->append(newline);
      if (members[i].first != nullptr) {
        AppendJsonString(*members[i].first, f.ensure_ascii, out);
        out->append(f.key_separator);
      }
      RETURN_IF_ERROR(AppendJsonDump(*members[i].second, f, depth + 1, out));
    }
    if (f.indent.has_value()) out->append(newline.substr(0, newline.size() - f.indent->size()));
    out->push_back(j.is_array() ? ']' : '}');
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ToJson(const Value& v, const JsonFormat& format) {
  if (!v.is_json())
    return absl::InvalidArgumentError(absl::StrCat("Object of type ", TypeName(v), " is not JSON serializable"));
  std::string out;
  RETURN_IF_ERROR(AppendJsonDump(v.json(), format, 0, &out));
  return out;
}

namespace {

absl::StatusOr<bool> JsonEqual(const Value& a, const Value& b, int depth) {
  if (depth > kMaxValueDepth) return TooDeep();
  const std::optional<Number> x = AsNumber(a);
  const std::optional<Number> y = AsNumber(b);
  if (x.has_value() || y.has_value()) {
    if (!x.has_value() || !y.has_value()) return false;
    if (!x->is_float && !y->is_float) return x->i == y->i;
    return x->AsDouble() == y->AsDouble();
  }
  const Json& p = a.json();
  const Json& q = b.json();
  if (p.type() != q.type()) return false;
  if (p.is_array()) {
    if (p.size() != q.size()) return false;
    for (size_t i = 0; i < p.size(); ++i) {
      ASSIGN_OR_RETURN(bool same, JsonEqual(a.Child(&p[i]), b.Child(&q[i]), depth + 1));
      if (!same) return false;
    }
    return true;
  }
  if (p.is_object()) {
    if (p.size() != q.size()) return false;
    for (const auto& [key, value] : p.items()) {
      const auto it = q.find(key);
      if (it == q.end()) return false;
      ASSIGN_OR_RETURN(bool same, JsonEqual(a.Child(&value), b.Child(&*it), depth + 1));
      if (!same) return false;
    }
    return true;
  }
  return p == q;  // strings, None
}

}  // namespace

absl::StatusOr<bool> Equal(const Value& a, const Value& b) {
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
      return true;
    case Value::Kind::kNamespace:
      return a.ns() == b.ns();
    case Value::Kind::kMacro:
      return a.macro() == b.macro();
    case Value::Kind::kLoop:
      return a.loop() == b.loop();
    case Value::Kind::kJson:
      break;
  }
  return JsonEqual(a, b, 0);
}

namespace {

absl::StatusOr<int> CompareAt(const Value& a, const Value& b, std::string_view op, int depth) {
  if (depth > kMaxValueDepth) return TooDeep();
  if (a.is_undefined() || b.is_undefined())
    return absl::InvalidArgumentError(absl::StrCat("'", (a.is_undefined() ? a : b).hint(), "' is undefined"));
  const std::optional<Number> x = AsNumber(a);
  const std::optional<Number> y = AsNumber(b);
  if (x.has_value() && y.has_value()) {
    if (!x->is_float && !y->is_float) return x->i < y->i ? -1 : x->i > y->i ? 1 : 0;
    const double p = x->AsDouble();
    const double q = y->AsDouble();
    return p < q ? -1 : p > q ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.json().get_ref<const std::string&>().compare(b.json().get_ref<const std::string&>());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_json() && b.is_json() && a.json().is_array() && b.json().is_array()) {
    const Json& p = a.json();
    const Json& q = b.json();
    for (size_t i = 0; i < p.size() && i < q.size(); ++i) {
      ASSIGN_OR_RETURN(bool same, JsonEqual(a.Child(&p[i]), b.Child(&q[i]), depth + 1));
      if (!same) return CompareAt(a.Child(&p[i]), b.Child(&q[i]), op, depth + 1);
    }
    return p.size() < q.size() ? -1 : p.size() > q.size() ? 1 : 0;
  }
  return absl::InvalidArgumentError(absl::StrCat("'", std::string(op), "' not supported between instances of '",
                                                 TypeName(a), "' and '", TypeName(b), "'"));
}

}  // namespace

absl::StatusOr<int> Compare(const Value& a, const Value& b, std::string_view op) { return CompareAt(a, b, op, 0); }

absl::Status Budget::String(size_t bytes) {
  if (bytes > limits_.max_output_bytes)
    return absl::ResourceExhaustedError(
        absl::StrCat("a string of ", bytes, " bytes, over the limit of ", limits_.max_output_bytes));
  work_ += bytes;
  if (work_ > limits_.max_work_bytes)
    return absl::ResourceExhaustedError(
        absl::StrCat("the render made more than ", limits_.max_work_bytes, " bytes of strings and lists"));
  return absl::OkStatus();
}

namespace {

absl::StatusOr<size_t> Footprint(const Json& j, int depth) {
  if (depth > kMaxValueDepth) return TooDeep();
  if (j.is_string()) return 16 + j.get_ref<const std::string&>().size();
  size_t total = 16;
  if (j.is_object()) {
    for (const auto& [key, value] : j.items()) {
      ASSIGN_OR_RETURN(size_t n, Footprint(value, depth + 1));
      total += key.size() + n;
    }
  } else if (j.is_array()) {
    for (const Json& item : j) {
      ASSIGN_OR_RETURN(size_t n, Footprint(item, depth + 1));
      total += n;
    }
  }
  return total;
}

}  // namespace

absl::Status Budget::Container(const Json& json) {
  ASSIGN_OR_RETURN(size_t bytes, Footprint(json, 0));
  work_ += bytes;
  if (work_ > limits_.max_work_bytes)
    return absl::ResourceExhaustedError(
        absl::StrCat("the render made more than ", limits_.max_work_bytes, " bytes of strings and lists"));
  return absl::OkStatus();
}

absl::Status Budget::Step() {
  if (++steps_ > limits_.max_steps)
    return absl::ResourceExhaustedError(
        absl::StrCat("the render took more than ", limits_.max_steps, " loop iterations and macro calls"));
  return absl::OkStatus();
}

}  // namespace autouvm::tokenizer::chat_template
