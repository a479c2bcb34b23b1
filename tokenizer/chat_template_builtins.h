// What the chat-template renderer (chat_template_render.h) does to values: Python's operators, Jinja's
// filters and tests, and the methods of str, dict and loop that chat templates call. Pure functions of
// their arguments but for the Budget they charge; safe from any thread.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/chat_template_value.h"

namespace autouvm::tokenizer::chat_template {

// The arguments of a call: positional ones, then keyword ones.
struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The argument at `index` or named `name`; null when it was not given.
  const Value* Get(size_t index, std::string_view name) const;
  // INVALID_ARGUMENT when more than `max_positional` positional arguments or a keyword not in `names`.
  absl::Status Check(std::string_view what, size_t max_positional, std::vector<std::string_view> names) const;
};

// The items a for loop visits: a list's, a dict's keys, a string's characters; none for undefined.
absl::StatusOr<std::vector<Value>> Items(const Value& v);
// v.name as Jinja's getattr (then the item of that name); undefined where there is none.
Value GetAttr(const Value& v, const std::string& name);
// v[key] as Jinja's getitem (then the attribute); undefined where there is none.
absl::StatusOr<Value> GetItem(const Value& v, const Value& key);
// v[start:stop:step] of a list or string; null bounds are left out.
absl::StatusOr<Value> Slice(const Value& v, const Value* start, const Value* stop, const Value* step, Budget& budget);
// item in container.
absl::StatusOr<bool> Contains(const Value& container, const Value& item);

bool IsFilter(std::string_view name);
bool IsTest(std::string_view name);

absl::StatusOr<Value> ApplyFilter(std::string_view name, const Value& subject, const Args& args, Budget& budget);
absl::StatusOr<bool> ApplyTest(std::string_view name, const Value& subject, const Args& args);
// object.name(args); INVALID_ARGUMENT when `object` has no such method.
absl::StatusOr<Value> CallMethod(const Value& object, std::string_view name, const Args& args, Budget& budget);

// a op b for the arithmetic operators (+ - * / // % **), "~", the comparisons and "in".
absl::StatusOr<Value> BinaryOp(std::string_view op, const Value& a, const Value& b, Budget& budget);
// -a, +a.
absl::StatusOr<Value> UnaryOp(std::string_view op, const Value& a);

}  // namespace autouvm::tokenizer::chat_template
