#include "tokenizer/chat_template_render.h"

#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "tokenizer/chat_template_builtins.h"
#include "tokenizer/chat_template_value.h"

namespace autouvm::tokenizer::chat_template {
namespace {

// Note [Chat template subset]: what transformers' chat templates use of Jinja, as Jinja does it:
//  - tags {{ }}, {% %}, {# #} with whitespace control (Note [Whitespace control] in chat_template_lex.cc);
//    statements if/elif/else, for (loop.index, index0, revindex, revindex0, first, last, length, previtem,
//    nextitem, cycle(); an "if" filter; else; break/continue), set (names, tuples, ns.attr, blocks),
//    macro (positional and keyword arguments, defaults), raw, and transformers' generation;
//  - expressions with Jinja's precedence: literals, lists, dicts, tuples (as lists), attributes, items,
//    slices, calls, filters, tests, arithmetic, ~, comparisons, in, and/or/not, x if c else y;
//  - globals namespace(), range(), dict() and transformers' raise_exception(msg);
//  - filters and tests of chat_template_filters.cc, methods of chat_template_ops.cc.
// Values are JSON, so dict keys are strings. An undefined name is Jinja's default Undefined: it prints as
// "", is false, iterates as empty; unlike Jinja, its attributes are undefined too (rather than an error).
// Not supported: call blocks, filter blocks, include/import/extends, recursive loops, chained comparisons
// (a < b < c reads as (a < b) < c), "%" formatting of strings, transformers' strftime_now(). Integers
// are 64-bit (overflow is an error, where Python has big integers); dict.keys()/values()/items() are lists.
constexpr int kMaxRenderDepth = 400;  // Note [Nesting limits] in chat_template_parse.h

// `status` with "chat template line N: " before its message, unless an inner step put one there.
absl::Status Located(int line, const absl::Status& status) {
  if (status.ok() || absl::StartsWith(status.message(), "chat template line ")) return status;
  return absl::Status(status.code(), absl::StrCat("chat template line ", line, ": ", status.message()));
}

template <typename T>
absl::StatusOr<T> Located(int line, absl::StatusOr<T> value) {
  if (value.ok()) return value;
  return Located(line, value.status());
}

class Renderer {
 public:
  Renderer(const Json& context, const RenderLimits& limits) : context_(context), budget_(limits) {
    frames_.emplace_back();
  }
  absl::StatusOr<std::string> Run(const Body& body);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  using Frame = std::unordered_map<std::string, Value>;

  // Holds a frame of variables for as long as it lives.
  class ScopedFrame {
   public:
    explicit ScopedFrame(Renderer* r) : r_(r) { r_->frames_.emplace_back(); }
    ~ScopedFrame() { r_->frames_.pop_back(); }
    ScopedFrame(const ScopedFrame&) = delete;
    ScopedFrame& operator=(const ScopedFrame&) = delete;

   private:
    Renderer* r_;
  };
  // Counts a level of recursion for as long as it lives.
  class Deeper {
   public:
    explicit Deeper(int* depth) : depth_(depth) { ++*depth_; }
    ~Deeper() { --*depth_; }
    Deeper(const Deeper&) = delete;
    Deeper& operator=(const Deeper&) = delete;

   private:
    int* depth_;
  };

  absl::StatusOr<Flow> Exec(const Body& body);
  absl::StatusOr<Flow> ExecNode(const Node& node);
  absl::StatusOr<Flow> ExecIf(const Node& node);
  absl::StatusOr<Flow> ExecFor(const Node& node);
  absl::Status ExecSet(const Node& node);
  absl::StatusOr<std::string> Capture(const Body& body);
  absl::Status CheckOutput(int line) const;

  absl::StatusOr<Value> Eval(const Expr& e);
  absl::StatusOr<Value> EvalInner(const Expr& e);
  absl::StatusOr<Value> EvalContainer(const Expr& e);
  absl::StatusOr<Args> EvalArgs(const Expr& e);
  absl::StatusOr<Value> EvalCall(const Expr& e);
  absl::StatusOr<Value> CallMacro(const Node& macro, const Args& args);
  absl::StatusOr<Value> CallGlobal(const std::string& name, const Args& args);

  Value Lookup(const std::string& name) const;
  void Bind(const std::string& name, Value value) { frames_.back()[name] = std::move(value); }
  absl::Status Assign(const std::vector<std::string>& targets, const Value& value);

  const Json& context_;
  Budget budget_;
  std::vector<Frame> frames_;
  size_t base_ = 0;  // the first frame the running macro sees (frame 0, the template's, it sees too)
  std::string out_;
  int depth_ = 0;
  int macro_depth_ = 0;
};

absl::StatusOr<std::string> Renderer::Run(const Body& body) {
  if (!context_.is_object()) return absl::InvalidArgumentError("chat template context is not a JSON object");
  RETURN_IF_ERROR(Exec(body).status());
  return std::move(out_);
}

absl::Status Renderer::CheckOutput(int line) const {
  if (out_.size() <= budget_.limits().max_output_bytes) return absl::OkStatus();
  return Located(
      line, absl::ResourceExhaustedError(absl::StrCat("output exceeds ", budget_.limits().max_output_bytes, " bytes")));
}

absl::StatusOr<Renderer::Flow> Renderer::Exec(const Body& body) {
  for (const NodePtr& node : body) {
    ASSIGN_OR_RETURN(Flow flow, ExecNode(*node));
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

absl::StatusOr<Renderer::Flow> Renderer::ExecNode(const Node& node) {
  Deeper deeper(&depth_);
  if (depth_ > kMaxRenderDepth)
    return Located(node.line, absl::ResourceExhaustedError("the render nested too deeply (macros calling macros)"));
  switch (node.kind) {
    case Node::Kind::kText:
      out_ += node.text;
      RETURN_IF_ERROR(CheckOutput(node.line));
      return Flow::kNormal;
    case Node::Kind::kPrint: {
      ASSIGN_OR_RETURN(Value v, Eval(*node.expr));
      RETURN_IF_ERROR(Located(node.line, AppendStr(v, &out_)));
      RETURN_IF_ERROR(CheckOutput(node.line));
      return Flow::kNormal;
    }
    case Node::Kind::kIf:
      return ExecIf(node);
    case Node::Kind::kFor:
      return ExecFor(node);
    case Node::Kind::kSet:
    case Node::Kind::kSetBlock:
      RETURN_IF_ERROR(ExecSet(node));
      return Flow::kNormal;
    case Node::Kind::kMacro:
      Bind(node.text, Value::OfMacro(&node));
      return Flow::kNormal;
    case Node::Kind::kBreak:
      return Flow::kBreak;
    case Node::Kind::kContinue:
      return Flow::kContinue;
    case Node::Kind::kGroup:
      return Exec(node.bodies[0]);
  }
  return Flow::kNormal;
}

absl::StatusOr<Renderer::Flow> Renderer::ExecIf(const Node& node) {
  for (size_t i = 0; i < node.bodies.size(); ++i) {
    if (i < node.conditions.size()) {
      ASSIGN_OR_RETURN(Value condition, Eval(*node.conditions[i]));
      if (!Truthy(condition)) continue;
    }
    return Exec(node.bodies[i]);
  }
  return Flow::kNormal;
}

absl::StatusOr<Renderer::Flow> Renderer::ExecFor(const Node& node) {
  ASSIGN_OR_RETURN(Value iterable, Eval(*node.expr));
  ASSIGN_OR_RETURN(std::vector<Value> items, Located(node.expr->line, Items(iterable)));
  if (node.filter != nullptr) {
    std::vector<Value> kept;
    for (Value& item : items) {
      ScopedFrame frame(this);
      RETURN_IF_ERROR(Located(node.line, Assign(node.targets, item)));
      ASSIGN_OR_RETURN(Value pass, Eval(*node.filter));
      if (Truthy(pass)) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    if (node.bodies.size() < 2) return Flow::kNormal;
    ScopedFrame frame(this);
    return Exec(node.bodies[1]);
  }
  const auto all = std::make_shared<const std::vector<Value>>(std::move(items));
  for (size_t i = 0; i < all->size(); ++i) {
    RETURN_IF_ERROR(Located(node.line, budget_.Step()));
    ScopedFrame frame(this);
    RETURN_IF_ERROR(Located(node.line, Assign(node.targets, (*all)[i])));
    auto loop = std::make_shared<LoopState>();
    loop->items = all;
    loop->index0 = i;
    Bind("loop", Value::OfLoop(std::move(loop)));
    ASSIGN_OR_RETURN(Flow flow, Exec(node.bodies[0]));
    if (flow == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

absl::StatusOr<std::string> Renderer::Capture(const Body& body) {
  std::string outer = std::exchange(out_, std::string());
  auto flow = Exec(body);
  std::string captured = std::exchange(out_, std::move(outer));
  RETURN_IF_ERROR(flow.status());
  return captured;
}

// Whether `v` holds `target`: is it, or has it as an attribute or a loop item, however deep. Values are
// reference-counted, so a namespace holding itself would never be freed (the fuzzer's
// `{% set ns.n = ns %}`); Jinja leaves such a cycle to Python's collector, templates never make one.
bool Holds(const Value& v, const Namespace* target, std::vector<const void*>* seen) {
  const void* self = v.kind() == Value::Kind::kNamespace ? static_cast<const void*>(v.ns())
                     : v.kind() == Value::Kind::kLoop    ? static_cast<const void*>(v.loop())
                                                         : nullptr;
  if (self == nullptr) return false;
  if (self == target) return true;
  for (const void* s : *seen) {
    if (s == self) return false;
  }
  seen->push_back(self);
  if (v.kind() == Value::Kind::kNamespace) {
    for (const auto& [name, attr] : v.ns()->attrs) {
      if (Holds(attr, target, seen)) return true;
    }
  } else if (v.loop()->items != nullptr) {
    for (const Value& item : *v.loop()->items) {
      if (Holds(item, target, seen)) return true;
    }
  }
  return false;
}

absl::Status Renderer::ExecSet(const Node& node) {
  Value value;
  if (node.kind == Node::Kind::kSetBlock) {
    ASSIGN_OR_RETURN(std::string text, Capture(node.bodies[0]));
    value = Value::Own(std::move(text));
  } else {
    ASSIGN_OR_RETURN(value, Eval(*node.expr));
  }
  if (node.attr.empty()) return Located(node.line, Assign(node.targets, value));
  const Value target = Lookup(node.targets[0]);
  if (target.kind() != Value::Kind::kNamespace)
    return LineError(node.line, absl::StrCat("cannot set an attribute of '", node.targets[0], "', a ", TypeName(target),
                                             " (only of a namespace())"));
  if (std::vector<const void*> seen; Holds(value, target.ns(), &seen)) {
    return LineError(node.line, absl::StrCat("cannot set '", node.targets[0], ".", node.attr,
                                             "' to a value that holds '", node.targets[0], "' itself"));
  }
  if (Value* attr = target.ns()->Find(node.attr)) {
    *attr = std::move(value);
  } else {
    target.ns()->attrs.emplace_back(node.attr, std::move(value));
  }
  return absl::OkStatus();
}

absl::Status Renderer::Assign(const std::vector<std::string>& targets, const Value& value) {
  if (targets.size() == 1) {
    Bind(targets[0], value);
    return absl::OkStatus();
  }
  if (!value.is_json() || !value.json().is_array())
    return absl::InvalidArgumentError(
        absl::StrCat("cannot unpack a ", TypeName(value), " into ", targets.size(), " names"));
  if (value.json().size() != targets.size())
    return absl::InvalidArgumentError(
        absl::StrCat("expected ", targets.size(), " values to unpack, got ", value.json().size()));
  for (size_t i = 0; i < targets.size(); ++i) Bind(targets[i], value.Child(&value.json()[i]));
  return absl::OkStatus();
}

Value Renderer::Lookup(const std::string& name) const {
  for (size_t i = frames_.size(); i-- > base_;) {
    const auto it = frames_[i].find(name);
    if (it != frames_[i].end()) return it->second;
  }
  if (base_ > 0) {
    const auto it = frames_[0].find(name);
    if (it != frames_[0].end()) return it->second;
  }
  const auto it = context_.find(name);
  if (it != context_.end()) return Value::Borrow(&*it);
  return Value::Undefined(name);
}

absl::StatusOr<Value> Renderer::Eval(const Expr& e) {
  Deeper deeper(&depth_);
  if (depth_ > kMaxRenderDepth)
    return Located(e.line, absl::ResourceExhaustedError("the render nested too deeply (macros calling macros)"));
  return Located(e.line, EvalInner(e));
}

absl::StatusOr<Value> Renderer::EvalInner(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return Value::Borrow(&e.literal);
    case Expr::Kind::kName:
      return Lookup(e.name);
    case Expr::Kind::kList:
    case Expr::Kind::kDict:
      return EvalContainer(e);
    case Expr::Kind::kAttr: {
      ASSIGN_OR_RETURN(Value object, Eval(*e.operands[0]));
      return GetAttr(object, e.name);
    }
    case Expr::Kind::kIndex: {
      ASSIGN_OR_RETURN(Value object, Eval(*e.operands[0]));
      ASSIGN_OR_RETURN(Value key, Eval(*e.operands[1]));
      return GetItem(object, key);
    }
    case Expr::Kind::kSlice: {
      ASSIGN_OR_RETURN(Value object, Eval(*e.operands[0]));
      Value parts[3];
      for (int i = 0; i < 3; ++i)
        if (e.operands[i + 1] != nullptr) {
          ASSIGN_OR_RETURN(parts[i], Eval(*e.operands[i + 1]));
        }
      return Slice(object, &parts[0], &parts[1], &parts[2], budget_);
    }
    case Expr::Kind::kCall:
      return EvalCall(e);
    case Expr::Kind::kFilter: {
      ASSIGN_OR_RETURN(Value subject, Eval(*e.operands[0]));
      ASSIGN_OR_RETURN(Args args, EvalArgs(e));
      return ApplyFilter(e.name, subject, args, budget_);
    }
    case Expr::Kind::kTest: {
      ASSIGN_OR_RETURN(Value subject, Eval(*e.operands[0]));
      ASSIGN_OR_RETURN(Args args, EvalArgs(e));
      ASSIGN_OR_RETURN(bool pass, ApplyTest(e.name, subject, args));
      return Value::Own(pass != e.negated);
    }
    case Expr::Kind::kUnary: {
      ASSIGN_OR_RETURN(Value operand, Eval(*e.operands[0]));
      if (e.name == "not") return Value::Own(!Truthy(operand));
      return UnaryOp(e.name, operand);
    }
    case Expr::Kind::kBinary: {
      ASSIGN_OR_RETURN(Value left, Eval(*e.operands[0]));
      if (e.name == "and" && !Truthy(left)) return left;
      if (e.name == "or" && Truthy(left)) return left;
      ASSIGN_OR_RETURN(Value right, Eval(*e.operands[1]));
      if (e.name == "and" || e.name == "or") return right;
      return BinaryOp(e.name, left, right, budget_);
    }
    case Expr::Kind::kIf: {
      ASSIGN_OR_RETURN(Value condition, Eval(*e.operands[0]));
      if (Truthy(condition)) return Eval(*e.operands[1]);
      if (e.operands[2] != nullptr) return Eval(*e.operands[2]);
      return Value::Undefined("");
    }
  }
  return Value();
}

absl::StatusOr<Value> Renderer::EvalContainer(const Expr& e) {
  Json out = e.kind == Expr::Kind::kList ? Json::array() : Json::object();
  for (size_t i = 0; i < e.operands.size(); ++i) {
    ASSIGN_OR_RETURN(Value item, Eval(*e.operands[i]));
    if (e.kind == Expr::Kind::kList) {
      ASSIGN_OR_RETURN(Json j, ToJsonItem(item));
      out.push_back(std::move(j));
      continue;
    }
    if (!item.is_string())
      return absl::InvalidArgumentError(absl::StrCat("dict keys must be strings, not '", TypeName(item), "'"));
    ASSIGN_OR_RETURN(Value value, Eval(*e.operands[++i]));
    ASSIGN_OR_RETURN(Json j, ToJsonItem(value));
    out[item.json().get<std::string>()] = std::move(j);
  }
  RETURN_IF_ERROR(budget_.Container(out));
  return Value::Own(std::move(out));
}

absl::StatusOr<Args> Renderer::EvalArgs(const Expr& e) {
  Args args;
  const size_t positional = e.args.size() - e.keywords.size();
  for (size_t i = 0; i < e.args.size(); ++i) {
    ASSIGN_OR_RETURN(Value v, Eval(*e.args[i]));
    if (i < positional) {
      args.positional.push_back(std::move(v));
    } else {
      args.keyword.emplace_back(e.keywords[i - positional], std::move(v));
    }
  }
  return args;
}

absl::StatusOr<Value> Renderer::EvalCall(const Expr& e) {
  const Expr& callee = *e.operands[0];
  Value f;
  if (callee.kind == Expr::Kind::kAttr) {
    ASSIGN_OR_RETURN(Value object, Eval(*callee.operands[0]));
    if (object.kind() != Value::Kind::kNamespace) {
      ASSIGN_OR_RETURN(Args args, EvalArgs(e));
      return CallMethod(object, callee.name, args, budget_);
    }
    f = GetAttr(object, callee.name);
  } else if (callee.kind == Expr::Kind::kName) {
    f = Lookup(callee.name);
    if (f.is_undefined()) {
      ASSIGN_OR_RETURN(Args args, EvalArgs(e));
      return CallGlobal(callee.name, args);
    }
  } else {
    ASSIGN_OR_RETURN(f, Eval(callee));
  }
  if (f.kind() != Value::Kind::kMacro) {
    if (f.is_undefined()) return absl::InvalidArgumentError(absl::StrCat("'", f.hint(), "' is undefined"));
    return absl::InvalidArgumentError(absl::StrCat("'", TypeName(f), "' object is not callable"));
  }
  ASSIGN_OR_RETURN(Args args, EvalArgs(e));
  return CallMacro(*f.macro(), args);
}

absl::StatusOr<Value> Renderer::CallMacro(const Node& macro, const Args& args) {
  const std::vector<std::string>& params = macro.targets;
  if (args.positional.size() > params.size())
    return absl::InvalidArgumentError(
        absl::StrCat("macro '", macro.text, "' takes not more than ", params.size(), " argument(s)"));
  for (const auto& [key, value] : args.keyword)
    if (std::find(params.begin(), params.end(), key) == params.end())
      return absl::InvalidArgumentError(absl::StrCat("macro '", macro.text, "' takes no keyword argument '", key, "'"));
  Deeper calls(&macro_depth_);
  if (macro_depth_ > budget_.limits().max_macro_depth)
    return absl::ResourceExhaustedError(
        absl::StrCat("macro calls nested deeper than ", budget_.limits().max_macro_depth));
  RETURN_IF_ERROR(budget_.Step());
  ScopedFrame frame(this);
  const size_t outer_base = std::exchange(base_, frames_.size() - 1);
  for (size_t i = 0; i < params.size(); ++i) {
    const Value* given = args.Get(i, params[i]);
    if (given != nullptr) {
      Bind(params[i], *given);
    } else if (macro.defaults[i] != nullptr) {
      ASSIGN_OR_RETURN(Value fallback, Eval(*macro.defaults[i]));
      Bind(params[i], std::move(fallback));
    } else {
      Bind(params[i], Value::Undefined(params[i]));
    }
  }
  auto text = Capture(macro.bodies[0]);
  base_ = outer_base;
  if (!text.ok()) return text.status();
  RETURN_IF_ERROR(budget_.String(text->size()));
  return Value::Own(*std::move(text));
}

absl::StatusOr<Value> Renderer::CallGlobal(const std::string& name, const Args& args) {
  if (name == "raise_exception") {
    std::string message;
    if (!args.positional.empty()) {
      ASSIGN_OR_RETURN(message, Str(args.positional[0]));
    }
    return absl::InvalidArgumentError(message);
  }
  if (name == "namespace" || name == "dict") {
    auto ns = std::make_shared<Namespace>();
    if (!args.positional.empty()) {
      const Value& init = args.positional[0];
      if (args.positional.size() > 1 || !init.is_json() || !init.json().is_object())
        return absl::InvalidArgumentError(absl::StrCat(name, "() takes a dict and keyword arguments"));
      for (const auto& [key, value] : init.json().items()) ns->attrs.emplace_back(key, init.Child(&value));
    }
    for (const auto& [key, value] : args.keyword) {
      if (Value* attr = ns->Find(key)) {
        *attr = value;
      } else {
        ns->attrs.emplace_back(key, value);
      }
    }
    if (name == "namespace") return Value::OfNamespace(std::move(ns));
    Json out = Json::object();
    for (const auto& [key, value] : ns->attrs) {
      ASSIGN_OR_RETURN(out[key], ToJsonItem(value));
    }
    RETURN_IF_ERROR(budget_.Container(out));
    return Value::Own(std::move(out));
  }
  if (name == "range") {
    int64_t bounds[3] = {0, 0, 1};
    const size_t n = args.positional.size();
    if (n < 1 || n > 3 || !args.keyword.empty()) return absl::InvalidArgumentError("range() takes 1 to 3 integers");
    for (size_t i = 0; i < n; ++i) {
      const std::optional<Number> v = AsNumber(args.positional[i]);
      if (!v.has_value() || v->is_float) return absl::InvalidArgumentError("range() takes integers");
      bounds[n == 1 ? 1 : i] = v->i;
    }
    const auto [start, stop, step] = bounds;
    if (step == 0) return absl::InvalidArgumentError("range() arg 3 must not be zero");
    Json out = Json::array();
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (static_cast<int64_t>(out.size()) >= budget_.limits().max_steps)
        return absl::ResourceExhaustedError(
            absl::StrCat("range() of more than ", budget_.limits().max_steps, " items"));
      out.push_back(i);
      if (__builtin_add_overflow(i, step, &i)) break;
      i -= step;
    }
    RETURN_IF_ERROR(budget_.Container(out));
    return Value::Own(std::move(out));
  }
  return absl::InvalidArgumentError(absl::StrCat("'", name, "' is undefined"));
}

}  // namespace

absl::StatusOr<std::string> RenderProgram(const Program& program, const Json& context, const RenderLimits& limits) {
  Renderer renderer(context, limits);
  return renderer.Run(program.body);
}

}  // namespace autouvm::tokenizer::chat_template
