// tokenizer/chat_template.h: Jinja's constructs as transformers renders them (the expected strings are
// what jinja2 3.1 gives with trim_blocks and lstrip_blocks on), every error with its line, the limits,
// and four templates written here in the style of Llama 2, Llama 3.x, Mistral v0.3 and Qwen2.5.
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <string>

namespace autouvm::tokenizer {
namespace {

using Json = nlohmann::ordered_json;

// The rendered text, or "ERROR <code>: <message>".
std::string Render(std::string_view source, const Json& context = Json::object(), const RenderLimits& limits = {}) {
  auto t = ChatTemplate::Parse(source);
  if (!t.ok()) return "ERROR " + absl::StatusCodeToString(t.status().code()) + ": " + std::string(t.status().message());
  auto out = t->Render(context, limits);
  if (!out.ok())
    return "ERROR " + absl::StatusCodeToString(out.status().code()) + ": " + std::string(out.status().message());
  return *out;
}

const Json& Context() {
  static const Json context = Json::parse(R"({
    "messages": [{"role": "system", "content": "  Be brief.  "}, {"role": "user", "content": "Hi"},
                 {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Why?"}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>",
    "d": {"b": 1, "a": [1, 2.5, null, true, "x'y"]}, "n": 7, "s": "Hello World é ß"})");
  return context;
}

TEST(ChatTemplateTest, PrintsLiteralsAsPythonDoes) {
  EXPECT_EQ(Render(R"({{ 'a' }}{{ "b\n\t\\\'\"" }}{{ 'x' "y" }})"), "ab\n\t\\'\"xy");
  EXPECT_EQ(Render("{{ 1 }} {{ 1.5 }} {{ 1e20 }} {{ 1e-5 }} {{ 100.0 }} {{ 1_000 }} {{ -0.0 }}"),
            "1 1.5 1e+20 1e-05 100.0 1000 -0.0");
  EXPECT_EQ(Render("{{ true }} {{ True }} {{ false }} {{ none }} {{ None }}"), "True True False None None");
  EXPECT_EQ(Render(R"({{ [1, 'a', none, true, 1.0] }} {{ {'a': 1, 'b': 'x'} }} {{ ["it's", 'a"b', 'x\ny'] }})"),
            R"([1, 'a', None, True, 1.0] {'a': 1, 'b': 'x'} ["it's", 'a"b', 'x\ny'])");
  EXPECT_EQ(Render("{{ d }}", Context()), R"({'b': 1, 'a': [1, 2.5, None, True, "x'y"]})");
}

TEST(ChatTemplateTest, Arithmetic) {
  EXPECT_EQ(Render("{{ 10/2 }} {{ 7//2 }} {{ -7//2 }} {{ 7%3 }} {{ -7%3 }} {{ 2**10 }} {{ 0.1+0.2 }} {{ 2 ** -1 }}"),
            "5.0 3 -4 1 2 1024 0.30000000000000004 0.5");
  EXPECT_EQ(Render("{{ 1 + 2 * 3 - 4 / 2 }} {{ (1 + 2) * 3 }} {{ -2 ** 2 }} {{ n * 1.5 }} {{ 10 % 3.5 }}", Context()),
            "5.0 9 4 10.5 3.0");
  EXPECT_EQ(Render("{{ 'a' ~ 1 ~ none ~ x }} {{ 'a' + 'b' }} {{ [1] + [2] }} {{ 'ab' * 3 }}"),
            "a1None ab [1, 2] ababab");
}

TEST(ChatTemplateTest, ComparisonsAndLogic) {
  EXPECT_EQ(Render("{{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ 1 < 2 }} {{ 'b' > 'a' }} {{ 2 <= 2 }} {{ 3 >= 4 }} "
                   "{{ [1, 2] < [1, 3] }} {{ true == 1 }}"),
            "True True True True True False True True");
  EXPECT_EQ(Render("{{ true and 'x' }} {{ false or 'y' }} {{ not 0 }} {{ 0 and 1 }} {{ '' or 0 }} {{ not n == 7 }}",
                   Context()),
            "x y True 0 0 False");
  EXPECT_EQ(Render("{{ 'a' in 'cat' }} {{ 2 in [1, 2] }} {{ 'b' in d }} {{ 3 not in [1] }} {{ 'z' in x }}", Context()),
            "True True True True False");
}

TEST(ChatTemplateTest, AttributesItemsAndSlices) {
  EXPECT_EQ(Render("{{ d.a[0] }} {{ d['a'][-1] }} {{ d.a[1:] }} {{ d.a[::-1] }} {{ d.a[5] }}|{{ d.zz }}|", Context()),
            R"(1 x'y [2.5, None, True, "x'y"] ["x'y", True, None, 2.5, 1] ||)");
  EXPECT_EQ(Render("{{ s[1:4] }} {{ s[::-1] }} {{ s[-3:] }} {{ 'abcdef'[-2::-2] }} {{ 'aé'[1] }}", Context()),
            "ell ß é dlroW olleH é ß eca é");
  EXPECT_EQ(
      Render("{{ messages[-1].content }} {{ messages.0.role }} {{ [1, 2, 3][:-1] }} {{ [1, 2, 3][::2] }}", Context()),
      "Why? system [1, 2] [1, 3]");
}

TEST(ChatTemplateTest, Tests) {
  EXPECT_EQ(Render("{{ x is defined }} {{ n is defined }} {{ x is not defined }} {{ x is undefined }} "
                   "{{ none is none }} {{ n is none }} {{ s is string }} {{ n is string }}",
                   Context()),
            "False True True True True False True False");
  EXPECT_EQ(Render("{{ d is mapping }} {{ d.a is mapping }} {{ d.a is iterable }} {{ s is iterable }} "
                   "{{ n is iterable }} {{ n is number }} {{ n is odd }} {{ n is even }} {{ n is divisibleby 7 }} "
                   "{{ n is divisibleby(3) }} {{ 5 is gt 3 }} {{ 1 is eq 1 }}",
                   Context()),
            "True False True True False True True False True False True True");
}

TEST(ChatTemplateTest, InlineIf) {
  EXPECT_EQ(Render("{{ 'y' if n > 3 else 'n' }}|{{ 'z' if false }}|{{ 'a' if x else 'b' if n else 'c' }}", Context()),
            "y||b");
}

TEST(ChatTemplateTest, Filters) {
  EXPECT_EQ(Render("{{ '  x  '|trim }}|{{ s|length }}|{{ messages|length }}|{{ x|length }}|{{ s|upper }}|{{ s|lower }}",
                   Context()),
            "x|15|4|0|HELLO WORLD É SS|hello world é ß");
  EXPECT_EQ(Render("{{ d.a|first }}|{{ d.a|last }}|{{ ['a', 'b']|join(', ') }}|{{ [1, 2]|join }}|"
                   "{{ messages|join('-', attribute='role') }}",
                   Context()),
            "1|x'y|a, b|12|system-user-assistant-user");
  EXPECT_EQ(Render("{{ x|default('dflt') }}|{{ none|default('d') }}|{{ ''|default('e', true) }}|{{ n|string ~ 1 }}|"
                   "{{ '42'|int + 1 }}|{{ 3.9|int }}|{{ 'x'|int }}|{{ ' 7 '|int }}|{{ '1.5'|int }}",
                   Context()),
            "dflt|None|e|71|43|3|0|7|1");
  EXPECT_EQ(Render("{{ messages|selectattr('role', 'equalto', 'user')|map(attribute='content')|join('/') }}|"
                   "{{ 'abc'|reverse }}|{{ range(3)|list }}|{{ 'hello world'|title }}|{{ 'hello'|capitalize }}",
                   Context()),
            "Hi/Why?|cba|[0, 1, 2]|Hello World|Hello");
  // Jinja's title filter starts words only after [-\s({[<] and upper-cases their first character; str.title()
  // starts one after any uncased character and title-cases it, with full case mappings (jinja2 3.1, Python 3.11).
  EXPECT_EQ(Render(R"({{ "“it's\" (x-ray) ß ǆ"|title }}|{{ "“it's\" ß ǆ ﬁx".title() }}|{{ 'ßa'|capitalize }})"),
            "“it's\" (X-Ray) SS Ǆ|“It'S\" Ss ǅ Fix|Ssa");
}

TEST(ChatTemplateTest, ToJsonIsPythonsJsonDumps) {
  EXPECT_EQ(Render("{{ d|tojson }}", Context()), R"({"b": 1, "a": [1, 2.5, null, true, "x'y"]})");
  EXPECT_EQ(Render("{{ d|tojson(sort_keys=true) }}", Context()), R"({"a": [1, 2.5, null, true, "x'y"], "b": 1})");
  EXPECT_EQ(Render("{{ {'a': {'b': [1, {'c': None}]}}|tojson(indent=4) }}{{ []|tojson(indent=2) }}{{ {}|tojson }}"),
            "{\n    \"a\": {\n        \"b\": [\n            1,\n            {\n                \"c\": null\n"
            "            }\n        ]\n    }\n}[]{}");
  EXPECT_EQ(Render(R"({{ 'é\u00e9\x41 "q"'|tojson }} {{ 'é😀'|tojson(ensure_ascii=true) }} {{ '\u0001'|tojson }})"),
            R"("ééA \"q\"" "\u00e9\ud83d\ude00" "\u0001")");
  // A nlohmann::json context has its keys sorted.
  auto t = ChatTemplate::Parse("{{ d|tojson }}");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t->Render(nlohmann::json::parse(R"({"d": {"b": 1, "a": 2}})")), R"({"a": 2, "b": 1})");
}

TEST(ChatTemplateTest, StringAndDictMethods) {
  EXPECT_EQ(Render("{{ ' a b '.strip() }}|{{ 'xxaxx'.lstrip('x') }}|{{ 'xxaxx'.rstrip('x') }}|{{ s.startswith('He') }}|"
                   "{{ s.endswith(('d', 'ß')) }}|{{ s.upper() }}|{{ s.lower() }}|{{ 'hello world'.title() }}",
                   Context()),
            "a b|axx|xxa|True|True|HELLO WORLD É SS|hello world é ß|Hello World");
  EXPECT_EQ(Render("{{ 'a b  c'.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} "
                   "{{ 'aaa'.replace('a', 'b', 2) }} {{ 'ab'.replace('', '-') }}"),
            "['a', 'b', 'c'] ['a', 'b', '', 'c'] ['a', 'b,c'] bba -a-b-");
  EXPECT_EQ(Render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %} {{ d.keys() }} {{ d.get('b') }} "
                   "{{ d.get('q', 5) }} {{ d.get('q') }} {{ d.values()|length }}",
                   Context()),
            R"(b=1;a=[1, 2.5, None, True, "x'y"]; ['b', 'a'] 1 5 None 2)");
}

TEST(ChatTemplateTest, ForLoops) {
  EXPECT_EQ(Render("{% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}"
                   "{{ loop.length }}{{ loop.revindex }} {% endfor %}",
                   Context()),
            "10TrueFalse44 21FalseFalse43 32FalseFalse42 43FalseTrue41 ");
  EXPECT_EQ(
      Render("{% for m in messages if m.role != 'system' %}{{ loop.index }}:{{ m.role }} {% endfor %}", Context()),
      "1:user 2:assistant 3:user ");
  EXPECT_EQ(Render("{% for i in [1, 2, 3, 4, 5] %}{% if i == 2 %}{% continue %}{% endif %}"
                   "{% if i == 4 %}{% break %}{% endif %}{{ i }}{% endfor %}"),
            "13");
  EXPECT_EQ(Render("{% for i in [] %}x{% else %}empty{% endfor %}{% for c in 'ab' %}{{ c }}{% endfor %}"
                   "{% for k in d %}{{ k }}{% endfor %}{% for i in range(1, 10, 3) %}{{ i }}{% endfor %}",
                   Context()),
            "emptyabba147");
  EXPECT_EQ(Render("{% for i in range(3) %}{{ loop.cycle('a', 'b') }}{{ loop.previtem }}{% endfor %}"), "ab0a1");
  // A loop's body is a scope of its own, per iteration: what it sets is gone after it.
  EXPECT_EQ(Render("{% set x = 1 %}{% for i in [1, 2, 3] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}"), "2341");
}

TEST(ChatTemplateTest, IfElifElse) {
  EXPECT_EQ(Render("{% for m in messages %}{% if m.role == 'user' %}U{% elif m.role == 'assistant' %}A"
                   "{% else %}S{% endif %}{% endfor %}{% if not messages %}none{% endif %}",
                   Context()),
            "SUAU");
}

TEST(ChatTemplateTest, SetAndNamespace) {
  EXPECT_EQ(Render("{% set ns = namespace(found=false, n=0) %}{% for m in messages %}{% if m.role == 'user' %}"
                   "{% set ns.found = true %}{% set ns.n = ns.n + 1 %}{% endif %}{% endfor %}{{ ns.found }} {{ ns.n }}",
                   Context()),
            "True 2");
  EXPECT_EQ(Render("{% set a, b = [1, 2] %}{{ a }}{{ b }}{% set t %}inner {{ a }}{% endset %}[{{ t }}]"
                   "{% set ns = namespace(a=1) %}{% set ns.b = 2 %}{{ ns.a }}{{ ns.b }}{{ ns.c }}"),
            "12[inner 1]12");
}

TEST(ChatTemplateTest, Macros) {
  EXPECT_EQ(Render("{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}"
                   "{{ greet('Bob') }} {{ greet('Al', greeting='Hi') }} {{ greet(name='Zed') }} {{ greet() }}"),
            "Hello, Bob! Hi, Al! Hello, Zed! Hello, !");
  EXPECT_EQ(Render("{% macro f(a) -%}\n  <{{ a }}>\n{%- endmacro %}\n{{ f(1) }}{{ f(2) }}"), "<1><2>");
}

TEST(ChatTemplateTest, WhitespaceControlAsTransformersSetsIt) {
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: the indentation before one goes.
  EXPECT_EQ(Render("{% for m in messages %}\n  {% if m.role == 'user' %}\n    U:{{ m.content }}\n  {% endif %}\n"
                   "{% endfor %}\n",
                   Context()),
            "    U:Hi\n    U:Why?\n");
  EXPECT_EQ(Render("  {% if true %}\n    x\n  {% endif %}\ny\n"), "    x\ny");  // one trailing newline dropped
  EXPECT_EQ(Render("a  {%- if true -%}  b  {%- endif -%}  c\n{{- ' d ' -}}\n e"), "abc d e");
  EXPECT_EQ(Render("  {{ 'x' }}\n{# comment #}\nz\n  {# c2 #}  \nw"), "  x\nz\n  \nw");
  EXPECT_EQ(Render("{%+ if true %}\nx{% endif +%}\ny"), "x\ny");
  EXPECT_EQ(Render("a\r\nb{% if true %}\r\nx{% endif %}\r\n"), "a\nbx");
  EXPECT_EQ(Render("{{ 'a' }}  {% if true %}x{% endif %}"), "a  x");  // not at the start of a line
  EXPECT_EQ(Render("{% raw %}{{ not rendered }}{% endraw %}"), "{{ not rendered }}");
  // Jinja's raw_begin has no trim_blocks (the newline after it stays); endraw has, and lstrip_blocks too.
  EXPECT_EQ(Render("x\n  {% raw %}\n  {{ y }}\n  {% endraw %}\nz {% raw -%}\n w {%- endraw %}"), "x\n\n  {{ y }}\nz w");
  EXPECT_EQ(Render("{{ {'a': {'b': 1}} }}"), "{'a': {'b': 1}}");
}

TEST(ChatTemplateTest, UndefinedIsEmptyAndFalse) {
  EXPECT_EQ(
      Render("[{{ x }}][{{ x.y.z }}][{{ x['k'] }}]{% if x %}t{% else %}f{% endif %}{% for i in x %}i{% endfor %}"),
      "[][][]f");
}

TEST(ChatTemplateTest, SyntaxErrorsNameTheLine) {
  EXPECT_EQ(Render("a\n{{ x "), "ERROR INVALID_ARGUMENT: chat template line 2: unterminated tag ('{{' without '}}')");
  EXPECT_EQ(Render("a\n{% if x "),
            "ERROR INVALID_ARGUMENT: chat template line 2: unterminated tag ('{%' without '%}')");
  EXPECT_EQ(Render("x\n\n{# never closed"),
            "ERROR INVALID_ARGUMENT: chat template line 3: unterminated comment ('{#' without '#}')");
  EXPECT_EQ(Render("{% if true %}\n{% frobnicate %}\n{% endif %}"),
            "ERROR INVALID_ARGUMENT: chat template line 2: unknown tag 'frobnicate'");
  EXPECT_EQ(Render("{% endfor %}"), "ERROR INVALID_ARGUMENT: chat template line 1: unexpected tag 'endfor'");
  EXPECT_EQ(Render("{% call foo() %}{% endcall %}"),
            "ERROR INVALID_ARGUMENT: chat template line 1: the tag 'call' is not supported");
  EXPECT_EQ(
      Render("\n{% if true %}\nabc"),
      "ERROR INVALID_ARGUMENT: chat template line 2: 'if' is never closed (expected 'elif' or 'else' or 'endif')");
  EXPECT_EQ(Render("line1\n{{ 1 + }}"),
            "ERROR INVALID_ARGUMENT: chat template line 2: expected an expression, found '}}'");
  EXPECT_EQ(Render("{% for in x %}{% endfor %}"),
            "ERROR INVALID_ARGUMENT: chat template line 1: expected 'in', found 'x'");
  EXPECT_EQ(Render("{{ d[ }}"), "ERROR INVALID_ARGUMENT: chat template line 1: unexpected '}', expected ']'");
  EXPECT_EQ(Render("\n{{ x|frob }}"), "ERROR INVALID_ARGUMENT: chat template line 2: unknown filter 'frob'");
  EXPECT_EQ(Render("{{ x is frob }}"), "ERROR INVALID_ARGUMENT: chat template line 1: unknown test 'frob'");
  EXPECT_EQ(Render("{{ 'abc }}"), "ERROR INVALID_ARGUMENT: chat template line 1: unterminated string");
  EXPECT_EQ(Render("{{ @ }}"), "ERROR INVALID_ARGUMENT: chat template line 1: unexpected character '@'");
  EXPECT_EQ(Render("{% break %}"), "ERROR INVALID_ARGUMENT: chat template line 1: 'break' outside a for loop");
  EXPECT_EQ(Render("{{ " + std::string(101, '(') + "1" + std::string(101, ')') + " }}"),
            "ERROR INVALID_ARGUMENT: chat template line 1: expression nested too deeply");
}

TEST(ChatTemplateTest, RenderErrorsNameTheLine) {
  EXPECT_EQ(Render("\n\n{{ raise_exception('Bad role: ' ~ messages[0].role) }}", Context()),
            "ERROR INVALID_ARGUMENT: chat template line 3: Bad role: system");
  EXPECT_EQ(Render("{{ foo() }}"), "ERROR INVALID_ARGUMENT: chat template line 1: 'foo' is undefined");
  EXPECT_EQ(Render("a\n{{ n() }}", Context()),
            "ERROR INVALID_ARGUMENT: chat template line 2: 'int' object is not callable");
  EXPECT_EQ(Render("{{ 'a' - 1 }}"),
            "ERROR INVALID_ARGUMENT: chat template line 1: unsupported operand type(s) for -: 'str' and 'int'");
  EXPECT_EQ(Render("{{ 1/0 }}"), "ERROR INVALID_ARGUMENT: chat template line 1: division by zero");
  EXPECT_EQ(Render("{{ [1, 2] < 3 }}"),
            "ERROR INVALID_ARGUMENT: chat template line 1: '<' not supported between instances of 'list' and 'int'");
  EXPECT_EQ(
      Render("{% set x = 1 %}\n{% set x.y = 2 %}"),
      "ERROR INVALID_ARGUMENT: chat template line 2: cannot set an attribute of 'x', a int (only of a namespace())");
  // A namespace that would hold itself (found by the fuzzer: it was never freed).
  EXPECT_EQ(Render("{% set ns = namespace(n=0) %}\n{% set ns.n = ns %}"),
            "ERROR INVALID_ARGUMENT: chat template line 2: cannot set 'ns.n' to a value that holds 'ns' itself");
  EXPECT_EQ(Render("{% set a = namespace() %}{% set b = namespace(a=a) %}\n{% set a.b = b %}"),
            "ERROR INVALID_ARGUMENT: chat template line 2: cannot set 'a.b' to a value that holds 'a' itself");
  EXPECT_EQ(Render("{% set a = namespace(n=1) %}{% set b = namespace(a=a) %}{% set b.c = a %}{{ b.c.n }}"), "1");
  EXPECT_EQ(Render("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"),
            "ERROR INVALID_ARGUMENT: chat template line 1: macro 'm' takes not more than 1 argument(s)");
  EXPECT_EQ(Render("{{ x|tojson }}"),
            "ERROR INVALID_ARGUMENT: chat template line 1: Object of type Undefined is not JSON serializable");
  EXPECT_EQ(Render("{% for i in 5 %}{% endfor %}"),
            "ERROR INVALID_ARGUMENT: chat template line 1: 'int' object is not iterable");
  EXPECT_EQ(Render("{{ 1 }}", Json::array()), "ERROR INVALID_ARGUMENT: chat template context is not a JSON object");
}

TEST(ChatTemplateTest, LimitsAreClearErrors) {
  RenderLimits small;
  small.max_output_bytes = 100;
  EXPECT_EQ(Render("x\n{% for i in range(200) %}ab{% endfor %}", Json::object(), small),
            "ERROR RESOURCE_EXHAUSTED: chat template line 2: output exceeds 100 bytes");
  EXPECT_EQ(Render("{{ 'x' * 2000000 }}"),
            "ERROR RESOURCE_EXHAUSTED: chat template line 1: a string of 1048577 bytes, over the limit of 1048576");
  EXPECT_EQ(Render("{% for i in range(1000) %}{% for j in range(1000) %}{% for k in range(2) %}{% endfor %}"
                   "{% endfor %}{% endfor %}"),
            "ERROR RESOURCE_EXHAUSTED: chat template line 1: the render took more than 1000000 loop iterations and "
            "macro calls");
  EXPECT_EQ(Render("{% macro f(n) %}{{ f(n) }}{% endmacro %}\n{{ f(1) }}"),
            "ERROR RESOURCE_EXHAUSTED: chat template line 1: macro calls nested deeper than 32");
  EXPECT_EQ(Render("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = ns.l + [i] %}{% endfor %}"),
            "ERROR RESOURCE_EXHAUSTED: chat template line 1: the render made more than 67108864 bytes of strings and "
            "lists");
  std::string deep = "{% for x in y %}";
  for (int i = 0; i < 6; ++i) deep += deep;
  EXPECT_EQ(Render(deep), "ERROR INVALID_ARGUMENT: chat template line 1: blocks nested too deeply");
}

// ---- Four templates in the style of well-known models' (written for this test). ----

constexpr std::string_view kLlama2 = R"TPL({#- Llama 2 style: [INST] turns, the system prompt inside the first one. -#}
{%- if messages[0]['role'] == 'system' -%}
    {%- set system = messages[0]['content'] -%}
    {%- set turns = messages[1:] -%}
{%- else -%}
    {%- set turns = messages -%}
{%- endif -%}
{%- for message in turns -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') -}}
    {%- endif -%}
    {%- if message['role'] == 'user' -%}
        {%- if loop.first and system is defined -%}
            {%- set text = '<<SYS>>\n' ~ system|trim ~ '\n<</SYS>>\n\n' ~ message['content']|trim -%}
        {%- else -%}
            {%- set text = message['content']|trim -%}
        {%- endif -%}
        {{- bos_token ~ '[INST] ' ~ text ~ ' [/INST]' -}}
    {%- else -%}
        {{- ' ' ~ message['content']|trim ~ ' ' ~ eos_token -}}
    {%- endif -%}
{%- endfor -%}
)TPL";

constexpr std::string_view kLlama3 =
    R"TPL({#- Llama 3.x style: a header per turn, <|eot_id|> after each, functions listed in the system turn. -#}
{{- bos_token -}}
{%- set ns = namespace(system='') -%}
{%- if messages[0].role == 'system' -%}
    {%- set ns.system = messages[0].content|trim -%}
    {%- set messages = messages[1:] -%}
{%- endif -%}
{%- if tools is defined and tools -%}
    {%- set ns.system = ns.system ~ '\n\nYou may call these functions:' -%}
    {%- for tool in tools -%}
        {%- set ns.system = ns.system ~ '\n' ~ tool|tojson(indent=4) -%}
    {%- endfor -%}
{%- endif -%}
{%- if ns.system -%}
<|start_header_id|>system<|end_header_id|>

{{ ns.system|trim }}<|eot_id|>
{%- endif -%}
{%- for message in messages -%}
    {%- set role = 'ipython' if message.role == 'tool' else message.role -%}
    {%- if role not in ['user', 'assistant', 'ipython'] -%}
        {{- raise_exception('Unknown role: ' ~ message.role) -}}
    {%- elif loop.first and role != 'user' -%}
        {{- raise_exception('The conversation must start with a user message') -}}
    {%- endif -%}
<|start_header_id|>{{ role }}<|end_header_id|>

{% if message.tool_calls is defined -%}
    {%- for call in message.tool_calls -%}
{{ {'name': call.function.name, 'parameters': call.function.arguments}|tojson }}
    {%- endfor -%}
{%- else -%}
{{ message.content|trim }}
{%- endif -%}
<|eot_id|>
{%- endfor -%}
{%- if add_generation_prompt -%}
<|start_header_id|>assistant<|end_header_id|>

{% endif -%}
)TPL";

constexpr std::string_view kMistral =
    R"TPL({#- Mistral v0.3 style: [INST] turns; the system message goes into the last user turn. -#}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- set ns = namespace(last_user=-1) %}
{%- for message in loop_messages %}
    {%- if message['role'] == 'user' %}
        {%- set ns.last_user = loop.index0 %}
    {%- endif %}
{%- endfor %}
{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') == (loop.index0 % 2 == 1) %}
        {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.index0 == ns.last_user and system_message is defined %}
            {{- '[INST] ' + system_message + '\n\n' + message['content'] + '[/INST]' }}
        {%- else %}
            {{- '[INST] ' + message['content'] + '[/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content'] + eos_token }}
    {%- else %}
        {{- raise_exception('Only user and assistant roles are supported after the system message') }}
    {%- endif %}
{%- endfor %}
)TPL";

constexpr std::string_view kQwen =
    R"TPL({#- Qwen2.5 style: <|im_start|>role ... <|im_end|> turns, a default system turn, tool calls as JSON. -#}
{%- macro turn(role, text) -%}
<|im_start|>{{ role }}
{{ text }}<|im_end|>
{% endmacro -%}
{%- if messages and messages[0].role == 'system' -%}
    {%- set system = messages[0].content -%}
    {%- set rest = messages[1:] -%}
{%- else -%}
    {%- set system = 'You are a helpful assistant.' -%}
    {%- set rest = messages -%}
{%- endif -%}
{%- if tools -%}
    {%- set listing = namespace(text=system ~ '\n\n# Tools\n\n<tools>') -%}
    {%- for tool in tools -%}
        {%- set listing.text = listing.text ~ '\n' ~ tool|tojson -%}
    {%- endfor -%}
    {%- set system = listing.text ~ '\n</tools>' -%}
{%- endif -%}
{{- turn('system', system) -}}
{%- set ns = namespace(in_tools=false) -%}
{%- for message in rest -%}
    {%- if message.role == 'tool' -%}
        {%- if not ns.in_tools -%}
            {{- '<|im_start|>user' -}}
            {%- set ns.in_tools = true -%}
        {%- endif -%}
        {{- '\n<tool_response>\n' ~ message.content ~ '\n</tool_response>' -}}
        {%- if loop.last or rest[loop.index0 + 1].role != 'tool' -%}
            {{- '<|im_end|>\n' -}}
            {%- set ns.in_tools = false -%}
        {%- endif -%}
    {%- elif message.role == 'assistant' and message.tool_calls is defined -%}
        {%- set calls = namespace(text=message.content or '') -%}
        {%- for call in message.tool_calls -%}
            {%- set f = call.function if call.function is defined else call -%}
            {%- set calls.text = calls.text ~ '\n<tool_call>\n' ~ {'name': f.name, 'arguments': f.arguments}|tojson ~ '\n</tool_call>' -%}
        {%- endfor -%}
        {{- turn('assistant', calls.text|trim) -}}
    {%- elif message.role in ['user', 'assistant'] -%}
        {{- turn(message.role, message.content) -}}
    {%- else -%}
        {{- raise_exception('Unknown role: ' ~ message.role) -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
<|im_start|>assistant
{% endif -%}
)TPL";

Json Chat(bool with_system, bool add_generation_prompt) {
  Json messages = Json::parse(R"([{"role": "system", "content": " You are terse. "},
      {"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there."},
      {"role": "user", "content": " What is 2+2? "}])");
  if (!with_system) messages.erase(0);
  return Json{{"messages", messages},
              {"add_generation_prompt", add_generation_prompt},
              {"bos_token", "<s>"},
              {"eos_token", "</s>"}};
}

Json ToolChat(bool add_generation_prompt) {
  Json chat = Json::parse(R"({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather now",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
    "messages": [{"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "tool_calls": [{"type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "content": "22 C"}, {"role": "tool", "content": "sunny"},
      {"role": "assistant", "content": "22 C and sunny."}]})");
  chat["add_generation_prompt"] = add_generation_prompt;
  return chat;
}

Json Bad() {
  return Json::parse(R"({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
                         "bos_token": "<s>", "eos_token": "</s>"})");
}

TEST(ChatTemplateModelsTest, Llama2) {
  const std::string with_system =
      "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHello [/INST] Hi there. </s><s>[INST] What is 2+2? [/INST]";
  EXPECT_EQ(Render(kLlama2, Chat(true, true)), with_system);
  EXPECT_EQ(Render(kLlama2, Chat(true, false)), with_system);  // Llama 2 has no generation prompt
  EXPECT_EQ(Render(kLlama2, Chat(false, true)), "<s>[INST] Hello [/INST] Hi there. </s><s>[INST] What is 2+2? [/INST]");
  EXPECT_EQ(Render(kLlama2, Bad()),
            "ERROR INVALID_ARGUMENT: chat template line 10: Conversation roles must alternate "
            "user/assistant/user/assistant/...");
}

TEST(ChatTemplateModelsTest, Llama3) {
  Json chat = Chat(true, true);
  chat["bos_token"] = "<|begin_of_text|>";
  const std::string turns =
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\nHi there.<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>";
  EXPECT_EQ(Render(kLlama3, chat), turns + "<|start_header_id|>assistant<|end_header_id|>\n\n");
  chat["add_generation_prompt"] = false;
  EXPECT_EQ(Render(kLlama3, chat), turns);
  const std::string tools =
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou may call these functions:\n{\n"
      "    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\",\n"
      "        \"description\": \"Weather now\",\n        \"parameters\": {\n            \"type\": \"object\",\n"
      "            \"properties\": {\n                \"city\": {\n                    \"type\": \"string\"\n"
      "                }\n            },\n            \"required\": [\n                \"city\"\n            ]\n"
      "        }\n    }\n}<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWeather in Paris?<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", \"parameters\": {\"city\": "
      "\"Paris\"}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n22 C<|eot_id|>"
      "<|start_header_id|>ipython<|end_header_id|>\n\nsunny<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\n22 C and sunny.<|eot_id|>";
  EXPECT_EQ(Render(kLlama3, ToolChat(false)), tools);
  EXPECT_EQ(Render(kLlama3, ToolChat(true)), tools + "<|start_header_id|>assistant<|end_header_id|>\n\n");
  Json odd = Bad();
  odd["messages"][1]["role"] = "narrator";
  EXPECT_EQ(Render(kLlama3, odd), "ERROR INVALID_ARGUMENT: chat template line 22: Unknown role: narrator");
}

TEST(ChatTemplateModelsTest, Mistral) {
  const std::string folded = "<s>[INST] Hello[/INST] Hi there.</s>[INST]  You are terse. \n\n What is 2+2? [/INST]";
  EXPECT_EQ(Render(kMistral, Chat(true, true)), folded);
  EXPECT_EQ(Render(kMistral, Chat(true, false)), folded);
  EXPECT_EQ(Render(kMistral, Chat(false, false)), "<s>[INST] Hello[/INST] Hi there.</s>[INST]  What is 2+2? [/INST]");
  EXPECT_EQ(Render(kMistral, Bad()),
            "ERROR INVALID_ARGUMENT: chat template line 17: Conversation roles must alternate "
            "user/assistant/user/assistant/...");
}

TEST(ChatTemplateModelsTest, Qwen) {
  const std::string turns =
      "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi there.<|im_end|>\n"
      "<|im_start|>user\n What is 2+2? <|im_end|>\n";
  EXPECT_EQ(Render(kQwen, Chat(true, true)),
            "<|im_start|>system\n You are terse. <|im_end|>\n" + turns + "<|im_start|>assistant\n");
  EXPECT_EQ(Render(kQwen, Chat(true, false)), "<|im_start|>system\n You are terse. <|im_end|>\n" + turns);
  EXPECT_EQ(Render(kQwen, Chat(false, true)),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n" + turns + "<|im_start|>assistant\n");
  const std::string tools =
      "<|im_start|>system\nYou are a helpful assistant.\n\n# Tools\n\n<tools>\n{\"type\": \"function\", "
      "\"function\": {\"name\": \"get_weather\", \"description\": \"Weather now\", \"parameters\": {\"type\": "
      "\"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}\n</tools>"
      "<|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n"
      "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n"
      "<|im_start|>user\n<tool_response>\n22 C\n</tool_response>\n<tool_response>\nsunny\n</tool_response>"
      "<|im_end|>\n<|im_start|>assistant\n22 C and sunny.<|im_end|>\n";
  EXPECT_EQ(Render(kQwen, ToolChat(false)), tools);
  EXPECT_EQ(Render(kQwen, ToolChat(true)), tools + "<|im_start|>assistant\n");
  Json odd = Bad();
  odd["messages"][1]["role"] = "narrator";
  EXPECT_EQ(Render(kQwen, odd), "ERROR INVALID_ARGUMENT: chat template line 43: Unknown role: narrator");
}

TEST(ChatTemplateModelsTest, ParsedOnceRenderedManyTimes) {
  auto t = ChatTemplate::Parse(kQwen);
  ASSERT_TRUE(t.ok()) << t.status();
  const ChatTemplate copy = *t;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(*copy.Render(Chat(true, false)), *t->Render(Chat(true, false)));
}

}  // namespace
}  // namespace autouvm::tokenizer
