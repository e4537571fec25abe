// Chat templates: the real templates of six model families (tests/fixtures/chat_templates)
// rendered on one conversation and compared with the exact text transformers' apply_chat_template
// gives (read off each template; cross-checked with jinja2 3.1 under transformers' settings),
// assistant spans, the Jinja subset on small templates, and the errors.
#include <filesystem>
#include <fstream>

#include "libgenesis/data/chat_template.h"
#include "libgenesis/io/file_util.h"
#include "tests/testing.h"
#include "tests/generated_docs.h"

using genesis::data::ChatTemplate;
using genesis::data::Conversation;
namespace jinja = genesis::data::jinja;
namespace fs = std::filesystem;

namespace {

const fs::path kFixtures = fs::path(genesis::testing::source_path("tests/fixtures/chat_templates"));

ChatTemplate family(const std::string& name) {
  return ChatTemplate::from_tokenizer_config(kFixtures / name / "tokenizer_config.json");
}

// System, user, assistant, user, assistant; "And 3+3? " ends with a space that Llama and Gemma trim.
const Conversation kChat = {{"system", "You are a terse assistant."},
                            {"user", "What is 2+2?"},
                            {"assistant", "2+2 is 4."},
                            {"user", "And 3+3? "},
                            {"assistant", "6"}};
// The same conversation up to the last user turn: what a generation prompt is added to.
const Conversation kPrompt(kChat.begin(), kChat.begin() + 4);

std::string render(std::string_view source, const std::map<std::string, jinja::Value>& variables = {}) {
  return jinja::Template::parse(source, "test").render(variables);
}

// The text of each span of `text`.
std::vector<std::string> span_texts(const std::string& text, const std::vector<std::pair<size_t, size_t>>& spans) {
  std::vector<std::string> out;
  for (const auto& [begin, end] : spans) out.push_back(text.substr(begin, end - begin));
  return out;
}

void write(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// The message of the genesis::Error that f() throws, or "no error".
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const genesis::Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("chat template qwen2.5: system prompt, two exchanges", "[cpu]") {
  const ChatTemplate t = family("qwen2.5");
  CHECK(t.bos_token().empty());  // null in Qwen's tokenizer_config.json
  CHECK(t.eos_token() == "<|im_end|>");
  const std::string head =
      "<|im_start|>system\nYou are a terse assistant.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
      "<|im_start|>assistant\n2+2 is 4.<|im_end|>\n<|im_start|>user\nAnd 3+3? <|im_end|>\n";
  CHECK(t.render(kChat, false) == head + "<|im_start|>assistant\n6<|im_end|>\n");
  CHECK(t.render(kPrompt, true) == head + "<|im_start|>assistant\n");
  // Without a system message, Qwen's default one.
  CHECK(t.render({{"user", "Hi"}}, true) ==
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  const std::string full = t.render(kChat, false);
  const auto spans = assistant_spans(t, kChat);
  CHECK(spans == std::vector<std::pair<size_t, size_t>>{{118, 138}, {197, 209}});
  CHECK(span_texts(full, spans) == std::vector<std::string>{"2+2 is 4.<|im_end|>\n", "6<|im_end|>\n"});
}

TEST_CASE("chat template llama3.1: system header with the knowledge and today dates", "[cpu]") {
  const ChatTemplate t = family("llama3.1");
  CHECK(t.bos_token() == "<|begin_of_text|>");
  CHECK(t.eos_token() == "<|eot_id|>");
  const std::string head =
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
      "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
      "You are a terse assistant.<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\n2+2 is 4.<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nAnd 3+3?<|eot_id|>";
  CHECK(t.render(kChat, false) == head + "<|start_header_id|>assistant<|end_header_id|>\n\n6<|eot_id|>");
  CHECK(t.render(kPrompt, true) == head + "<|start_header_id|>assistant<|end_header_id|>\n\n");
  // date_string, when the caller defines it, replaces the template's fixed date.
  const std::string dated = t.render(kPrompt, true, {{"date_string", "01 Jan 2025"}});
  CHECK(dated.find("Today Date: 01 Jan 2025\n") != std::string::npos);
  const auto spans = assistant_spans(t, kChat);
  CHECK(spans == std::vector<std::pair<size_t, size_t>>{{271, 290}, {397, 408}});
  CHECK(span_texts(t.render(kChat, false), spans) == std::vector<std::string>{"2+2 is 4.<|eot_id|>", "6<|eot_id|>"});
}

TEST_CASE("chat template gemma: the system prompt folded into the first user turn", "[cpu]") {
  const ChatTemplate t = family("gemma");
  CHECK(t.bos_token() == "<bos>");
  const std::string head =
      "<bos><start_of_turn>user\nYou are a terse assistant.\n\nWhat is 2+2?<end_of_turn>\n"
      "<start_of_turn>model\n2+2 is 4.<end_of_turn>\n<start_of_turn>user\nAnd 3+3?<end_of_turn>\n";
  CHECK(t.render(kChat, false) == head + "<start_of_turn>model\n6<end_of_turn>\n");
  CHECK(t.render(kPrompt, true) == head + "<start_of_turn>model\n");
  const auto spans = assistant_spans(t, kChat);
  CHECK(spans == std::vector<std::pair<size_t, size_t>>{{100, 123}, {186, 201}});
  CHECK(span_texts(t.render(kChat, false), spans) ==
        std::vector<std::string>{"2+2 is 4.<end_of_turn>\n", "6<end_of_turn>\n"});
  // Its raise_exception, surfaced with the template's own words.
  CHECK_THROWS_WITH(t.render({{"user", "a"}, {"user", "b"}}, false),
                    Catch::Contains("gemma/tokenizer_config.json: line 15, column 27: ") &&
                        Catch::EndsWith(": Conversation roles must alternate user/assistant/user/assistant/..."));
}

TEST_CASE("chat template phi3: eos_token closes a conversation without a generation prompt", "[cpu]") {
  const ChatTemplate t = family("phi3");
  CHECK(t.eos_token() == "<|endoftext|>");
  const std::string head =
      "<|system|>\nYou are a terse assistant.<|end|>\n<|user|>\nWhat is 2+2?<|end|>\n"
      "<|assistant|>\n2+2 is 4.<|end|>\n<|user|>\nAnd 3+3? <|end|>\n";
  CHECK(t.render(kChat, false) == head + "<|assistant|>\n6<|end|>\n<|endoftext|>");
  CHECK(t.render(kPrompt, true) == head + "<|assistant|>\n");
  // The first turn's own rendering ends "<|end|>\n<|endoftext|>": its span stops before the eos_token.
  const auto spans = assistant_spans(t, kChat);
  CHECK(spans == std::vector<std::pair<size_t, size_t>>{{88, 105}, {145, 167}});
  CHECK(span_texts(t.render(kChat, false), spans) ==
        std::vector<std::string>{"2+2 is 4.<|end|>\n", "6<|end|>\n<|endoftext|>"});
}

TEST_CASE("chat template smollm2: ChatML, a default system prompt only without one", "[cpu]") {
  const ChatTemplate t = family("smollm2");
  CHECK(t.bos_token() == "<|im_start|>");
  const std::string head =
      "<|im_start|>system\nYou are a terse assistant.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
      "<|im_start|>assistant\n2+2 is 4.<|im_end|>\n<|im_start|>user\nAnd 3+3? <|im_end|>\n";
  CHECK(t.render(kChat, false) == head + "<|im_start|>assistant\n6<|im_end|>\n");
  CHECK(t.render(kPrompt, true) == head + "<|im_start|>assistant\n");
  CHECK(t.render({{"user", "Hi"}}, false) ==
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n");
  CHECK(assistant_spans(t, kChat) == std::vector<std::pair<size_t, size_t>>{{118, 138}, {197, 209}});
}

TEST_CASE("chat template mistral: the system prompt goes to the last user turn only", "[cpu]") {
  const ChatTemplate t = family("mistral");
  CHECK(t.bos_token() == "<s>");
  CHECK(t.eos_token() == "</s>");
  // Mistral Nemo's template prints the system prompt in the last user turn: a conversation that
  // ends with an assistant turn loses it, and a prompt carries it in its last instruction.
  CHECK(t.render(kChat, false) == "<s>[INST]What is 2+2?[/INST]2+2 is 4.</s>[INST]And 3+3? [/INST]6</s>");
  CHECK(t.render(kPrompt, true) ==
        "<s>[INST]What is 2+2?[/INST]2+2 is 4.</s>[INST]You are a terse assistant.\n\nAnd 3+3? [/INST]");
  // So the prompt of a turn is not a prefix of the conversation: the spans come from marking each
  // assistant content instead, and run on over the </s> that ends the turn.
  const auto marked = assistant_spans(t, kChat);
  CHECK(marked == std::vector<std::pair<size_t, size_t>>{{28, 41}, {63, 68}});
  CHECK(span_texts(t.render(kChat, false), marked) == std::vector<std::string>{"2+2 is 4.</s>", "6</s>"});
  const Conversation no_system(kChat.begin() + 1, kChat.end());
  const auto spans = assistant_spans(t, no_system);
  CHECK(spans == std::vector<std::pair<size_t, size_t>>{{28, 41}, {63, 68}});
  CHECK(span_texts(t.render(no_system, false), spans) == std::vector<std::string>{"2+2 is 4.</s>", "6</s>"});
  // Its alternation check, raised through raise_exception.
  CHECK_THROWS_WITH(assistant_spans(t, {{"assistant", "hello"}}),
                    Catch::Contains("mistral/tokenizer_config.json: line 18, column 32: ") &&
                        Catch::Contains(": After the optional system message, conversation roles must alternate"));
}

TEST_CASE("chat template: spans of a template that neither renders incrementally nor copies the content", "[cpu]") {
  // The last turn is announced (prefixes differ) and contents are upper-cased (markers would be).
  const ChatTemplate t = ChatTemplate::parse(
      "{% for m in messages %}{% if loop.last %}LAST {% endif %}{{ m.role }}: {{ m.content | upper }}\n{% endfor %}",
      "shouting");
  CHECK_THROWS_WITH(assistant_spans(t, kChat), Catch::Contains("chat template shouting does not render") &&
                                                   Catch::Contains("does not copy the assistant's content verbatim") &&
                                                   Catch::Contains("the assistant turn at message 2"));
}

TEST_CASE("chat template: tokenizer_config.json forms and errors", "[cpu]") {
  genesis::testing::TempDir dir("chat_template");
  // A list of named templates: "default" is taken; an AddedToken object gives its content.
  write(
      dir / "named.json",
      R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "{{ bos_token }}D"}],
            "bos_token": {"content": "<s>", "lstrip": false}, "eos_token": null})");
  const ChatTemplate named = ChatTemplate::from_tokenizer_config(dir / "named.json");
  CHECK(named.render({}, false) == "<s>D");
  CHECK(named.eos_token().empty());

  auto load_error = [&](const std::string& file) {
    return error_of([&] { ChatTemplate::from_tokenizer_config(dir / file); });
  };
  write(dir / "malformed.json", R"({"chat_template": "x",)");
  CHECK(load_error("malformed.json").starts_with("malformed JSON in " + (dir / "malformed.json").string() + ": "));
  write(dir / "none.json", R"({"bos_token": "<s>"})");
  CHECK(load_error("none.json") == (dir / "none.json").string() + " has no chat_template");
  write(dir / "no_default.json", R"({"chat_template": [{"name": "rag", "template": "x"}]})");
  CHECK(load_error("no_default.json").find("without a \"default\" one") != std::string::npos);
  write(dir / "bad_token.json", R"({"chat_template": "x", "eos_token": 7})");
  CHECK(load_error("bad_token.json").find("eos_token must be a string") != std::string::npos);
  write(dir / "syntax.json", R"({"chat_template": "line one\n{% for m in messages %}{{ m.content }}"})");
  CHECK(load_error("syntax.json") == "chat template " + (dir / "syntax.json").string() +
                                         ": line 2, column 1: 'for' block is never closed: expected {% endfor %}");
  CHECK_THROWS_AS(ChatTemplate::from_tokenizer_config(dir / "missing.json"), genesis::IoError);
}

TEST_CASE("jinja: whitespace control, trim_blocks and lstrip_blocks", "[cpu]") {
  CHECK(render("a  {{- 'b' -}}  \n c") == "abc");
  CHECK(render("a\n  {%- if true %}b{% endif -%}\n\n c") == "abc");
  // trim_blocks: the newline after a block or comment tag goes; not after an expression.
  CHECK(render("{% if true %}\nx\n{% endif %}\ny") == "x\ny");
  CHECK(render("{# note #}\nx{{ 'y' }}\nz") == "xy\nz");
  // lstrip_blocks: a block tag's indentation at the start of a line goes, not elsewhere; {%+ keeps it.
  CHECK(render("<\n  {% if true %}\n  x\n  {% endif %}\n>") == "<\n  x\n>");
  CHECK(render("  {% if true %}x{% endif %}") == "x");
  CHECK(render("a  {% if true %}x{% endif %}") == "a  x");
  CHECK(render("  {%+ if true %}x{% endif %}") == "  x");
  CHECK(render("  {{ 'x' }}") == "  x");
  CHECK(render("{% for i in [1, 2] %}\n  {{ i }}\n{% endfor %}\n") == "  1\n  2\n");
}

TEST_CASE("jinja: expressions, filters, tests and methods", "[cpu]") {
  // Values print as Python prints them.
  CHECK(render("{{ 1 }} {{ 2.5 }} {{ 3.0 }} {{ 1e20 }} {{ true }} {{ none }} {{ undefined_name }}.") ==
        "1 2.5 3.0 1e+20 True None .");
  CHECK(render("{{ [1, 'a', none] }} {{ {'k': \"it's\"} }}") == "[1, 'a', None] {'k': \"it's\"}");
  CHECK(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 'ab' * 2 }} {{ 1 ~ 'x' }}") ==
        "3 -4 2 3.5 1024 abab 1x");
  CHECK(render("{{ 'yes' if 1 < 2 and not false else 'no' }} {{ 0 or 'x' }} {{ 'b' in 'abc' }} {{ 3 not in [1] }}") ==
        "yes x True True");
  // Subscripts, negative indexes and slices; attributes of dicts; undefined chains.
  const std::map<std::string, jinja::Value> vars = {
      {"xs", jinja::List{1, 2, 3, 4, 5}},
      {"d", jinja::Dict{{"role", "user"}, {"n", 2}}},
  };
  CHECK(render("{{ xs[0] }} {{ xs[-1] }} {{ xs[1:3] }} {{ xs[::-2] }} {{ xs[:-1] }} {{ 'hello'[1:-1] }}", vars) ==
        "1 5 [2, 3] [5, 3, 1] [1, 2, 3, 4] ell");
  CHECK(render("{{ d.role }} {{ d['n'] }} [{{ d.missing }}] [{{ d.missing.deeper }}] {{ d.missing is defined }}",
               vars) == "user 2 [] [] False");
  // Loops: loop.*, a filter, else, break and continue.
  CHECK(render("{% for x in xs if x is odd %}{{ loop.index }}/{{ loop.length }}:{{ x }}{% if not loop.last %},"
               "{% endif %}{% endfor %}",
               vars) == "1/3:1,2/3:3,3/3:5");
  CHECK(render("{% for x in [] %}a{% else %}empty{% endfor %}") == "empty");
  CHECK(render("{% for x in xs %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}"
               "{{ x }}{% endfor %}",
               vars) == "13");
  CHECK(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", vars) == "role=user;n=2;");
  // set in a loop stays in the loop; a namespace carries values out.
  CHECK(render("{% set n = 0 %}{% set ns = namespace(total=0) %}{% for x in xs %}{% set n = n + x %}"
               "{% set ns.total = ns.total + x %}{% endfor %}{{ n }} {{ ns.total }}",
               vars) == "0 15");
  // Filters.
  CHECK(
      render("{{ '  hi  ' | trim }}|{{ xs | length }}|{{ 'Ab' | upper }}{{ 'Ab' | lower }}|{{ 'hello world' | title }}"
             "|{{ 'hELLO' | capitalize }}|{{ 'a-b-c' | replace('-', '+') }}|{{ xs | join(',') }}",
             vars) == "hi|5|ABab|Hello World|Hello|a+b+c|1,2,3,4,5");
  CHECK(render("{{ xs | first }}{{ xs | last }} {{ nothing | default('dflt') }} {{ '' | default('e', true) }} "
               "{{ '42' | int + 1 }} {{ 3 | string + 'x' }} {{ d | items | first | join('=') }}",
               vars) == "15 dflt e 43 3x role=user");
  CHECK(render("{{ {'a': [1, 'é'], 'b': none, 'c': 'q\"\\n'} | tojson }}") ==
        "{\"a\": [1, \"é\"], \"b\": null, \"c\": \"q\\\"\\n\"}");
  CHECK(render("{{ {'a': [1]} | tojson(indent=2) }}") == "{\n  \"a\": [\n    1\n  ]\n}");
  const std::map<std::string, jinja::Value> people = {
      {"ms", jinja::List{jinja::Dict{{"role", "user"}, {"c", "a"}}, jinja::Dict{{"role", "assistant"}, {"c", "b"}},
                         jinja::Dict{{"role", "user"}, {"c", "c"}}}}};
  CHECK(render("{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='c') | join }} "
               "{{ ms | rejectattr('role', 'eq', 'user') | list | length }} {{ ['a', 'b', 'a'] | reject('equalto', "
               "'a') | list }}",
               people) == "ac 1 ['b']");
  // Tests.
  CHECK(render("{{ 'x' is string }}{{ 1 is number }}{{ d is mapping }}{{ xs is iterable }}{{ none is none }}"
               "{{ u is undefined }}{{ 4 is divisibleby 2 }}{{ 1 is equalto(1) }}{{ xs is not sequence }}",
               vars) == "TrueTrueTrueTrueTrueTrueTrueTrueFalse");
  // Methods of str and dict.
  CHECK(render("{{ ' a b '.strip() }}|{{ 'xxaxx'.lstrip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|"
               "{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}|{{ 'aXa'.replace('a', 'b') }}|"
               "{{ d.get('role') }}{{ d.get('no', 'dflt') }}{{ d.get('no') }}|{{ d.keys() | list }}",
               vars) == "a b|axx|['a', 'b', '', 'c']|['a', 'b']|TrueTrue|bXb|userdfltNone|['role', 'n']");
  // String escapes.
  CHECK(render(R"({{ 'a\tb\\n' ~ "\u00e9" }})") == "a\tb\\né");
}

TEST_CASE("jinja: errors name the template, line and column", "[cpu]") {
  auto render_error = [](std::string_view source) { return error_of([&] { render(source); }); };
  CHECK(render_error("ab\n{{ x | bogus }}") == "chat template test: line 2, column 8: unknown filter 'bogus'");
  CHECK(render_error("{{ x is bogus }}") == "chat template test: line 1, column 9: unknown test 'bogus'");
  CHECK(render_error("{% if x %}\n{% for y in z %}{% endif %}") ==
        "chat template test: line 2, column 20: unexpected 'endif': the innermost open block is 'for' at line 2, "
        "column 1 (expected {% endfor %})");
  CHECK(render_error("{% for y in z %}") ==
        "chat template test: line 1, column 1: 'for' block is never closed: expected {% endfor %}");
  CHECK(render_error("{% if x %}a") ==
        "chat template test: line 1, column 1: 'if' block is never closed: expected {% endif %}");
  CHECK(render_error("{{ x ") == "chat template test: line 1, column 1: unclosed '{{': expected '}}'");
  CHECK(render_error("{# x ") == "chat template test: line 1, column 1: unclosed comment: expected '#}'");
  CHECK(render_error("{% endif %}") == "chat template test: line 1, column 4: unexpected 'endif'");
  CHECK(render_error("{% macro f() %}{% endmacro %}") ==
        "chat template test: line 1, column 4: 'macro' statements are not supported");
  CHECK(render_error("{{ 'a' + }}") == "chat template test: line 1, column 10: expected an expression, found '}}'");
  CHECK(render_error("{{ 'abc }}") == "chat template test: line 1, column 4: unterminated string");
  CHECK(render_error("{% break %}") == "chat template test: line 1, column 4: 'break' outside a for loop");
  // Errors while rendering point at the operation.
  CHECK(render_error("{{ 'a' + 1 }}") ==
        "chat template test: line 1, column 8: unsupported operand type(s) for +: 'str' and 'int'");
  CHECK(render_error("{% set x = 1 %}{% set x.y = 2 %}") ==
        "chat template test: line 1, column 16: cannot assign attribute 'y' on 'x', a 'int' and not a namespace()");
  CHECK(render_error("{{ nope() }}") == "chat template test: line 1, column 8: 'nope' is undefined");
  CHECK(render_error("{% for x in 3 %}{% endfor %}") ==
        "chat template test: line 1, column 1: 'int' object is not iterable");
  const ChatTemplate raising = ChatTemplate::parse("{{ raise_exception('no system role, ' ~ messages|length) }}", "r");
  CHECK_THROWS_WITH(raising.render({{"user", "x"}}, false), "chat template r: line 1, column 19: no system role, 1");
}

// Limits against hostile templates (tokenizer_config.json is downloaded), found or guarded by
// tests/fuzz/fuzz_chat_template.cpp: each ends in a one-line ValueError that names the limit.
namespace {
bool limit_error(std::string_view source, std::string_view what) {
  const std::string message = error_of([&] { render(source); });
  return message.starts_with("chat template test: line ") && message.find(what) != std::string::npos &&
         message.find('\n') == std::string::npos;
}
std::string repeated(std::string_view part, size_t times) {
  std::string out;
  for (size_t i = 0; i < times; ++i) out += part;
  return out;
}
}  // namespace

TEST_CASE("jinja limits: nesting of blocks and expressions", "[cpu]") {
  // Each of these overflowed the stack of the recursive-descent parser (or of the renderer and
  // the tree's destructor) at some tens of thousands of levels.
  CHECK(limit_error(repeated("{% if x %}", 100000), "nesting deeper than 256 levels"));
  CHECK(limit_error("{{ " + repeated("(", 100000) + "1" + repeated(")", 100000) + " }}", "nesting deeper than 256"));
  CHECK(limit_error("{{ " + repeated("not ", 100000) + "x }}", "nesting deeper than 256"));
  CHECK(limit_error("{{ " + repeated("-", 100000) + "1 }}", "nesting deeper than 256"));
  CHECK(limit_error("{{ 1" + repeated(" + 1", 100000) + " }}", "an expression nested deeper than 256 levels"));
  CHECK(limit_error("{{ x" + repeated("|first", 100000) + " }}", "an expression nested deeper than 256 levels"));
  CHECK(limit_error("{% set ns = namespace(x=1) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}{% endfor %}",
                    "values nest deeper than 256 levels"));
  CHECK(limit_error("{% set x = 1 %}{% for i in range(1000) %}{% set x = [x] %}{% endfor %}",
                    "values nest deeper than 256 levels"));
  // A namespace holding itself would be a reference cycle (leaked, printed forever).
  CHECK(limit_error("{% set ns = namespace() %}{% set ns.me = [ns] %}", "cannot hold a namespace"));
  // 256 levels of real nesting still work.
  CHECK(render(repeated("{% if true %}", 200) + "deep" + repeated("{% endif %}", 200)) == "deep");
  CHECK(render("{{ " + repeated("(", 200) + "7" + repeated(")", 200) + " }}") == "7");
}

TEST_CASE("jinja limits: sizes of values and output, and the render's steps", "[cpu]") {
  CHECK(limit_error("{{ 'a' * 10**9 }}", "the repeated string would be larger than 64 MiB"));
  CHECK(limit_error("{{ [1, 2] * 10**9 }}", "the repeated list would be larger than 64 MiB"));
  CHECK(limit_error("{{ range(10**9)|length }}", "range()'s list would be larger than 64 MiB"));
  CHECK(limit_error("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
                    "the string would be larger than 64 MiB"));
  CHECK(limit_error("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                    "the string would be larger than 64 MiB"));
  CHECK(limit_error(
      "{{ ('x' * 1000000)|replace('', 'yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy') }}",
      "replace()'s result would be larger than 64 MiB"));
  CHECK(limit_error("{% set big = ['x' * 1000] * 10000 %}{{ [big] * 100000 }}", "larger than 64 MiB"));
  CHECK(limit_error("{{ [1]|tojson(indent=10**12) }}", "tojson indent 1000000000000 is past 1024"));
  CHECK(limit_error("{% for i in range(100) %}{{ 'x' * 1000000 }}{% endfor %}",
                    "the rendered text is larger than 64 MiB"));
  CHECK(limit_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                    "rendering takes more than 5000000 steps"));
}

TEST_CASE("jinja limits: numbers past 64 bits are errors, not undefined behaviour", "[cpu]") {
  CHECK(limit_error("{{ 9223372036854775807 + 1 }}", "integer overflow in '+'"));
  CHECK(limit_error("{{ -9223372036854775807 - 2 }}", "integer overflow in '-'"));
  CHECK(limit_error("{{ 2**62 * 4 }}", "integer overflow in '*'"));
  CHECK(limit_error("{{ 2 ** 64 }}", "integer overflow in '**'"));
  CHECK(limit_error("{{ (-9223372036854775807 - 1) // -1 }}", "integer overflow in '//'"));
  CHECK(limit_error("{{ -(-9223372036854775807 - 1) }}", "integer overflow in '-'"));
  CHECK(limit_error("{{ (-9223372036854775807 - 1)|abs }}", "integer overflow in 'abs'"));
  CHECK(limit_error("{{ (1e300 * 1e300)|int }}", "cannot convert float inf to a 64-bit integer"));
  CHECK(limit_error("{{ '1e999'|int }}", "cannot convert float inf to a 64-bit integer"));
  CHECK(limit_error("{{ 99999999999999999999 }}", "integer literal 99999999999999999999 is out of range"));
  CHECK(limit_error("{{ x.99999999999999999999 }}", "integer literal 99999999999999999999 is out of range"));
  CHECK(limit_error("{{ '\\U00110000' }}", "past U+10FFFF"));
  CHECK(render("{{ 1e999 }}") == "inf");  // as Python reads the literal
  CHECK(render("{{ 2 ** 62 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ '7'|int }}") ==
        "4611686018427387904 -4 2 -2 7");
  CHECK(render("{{ 'h\xc3\xa9llo'[1] }}{{ 'h\xc3\xa9llo'[-1] }}{{ 'h\xc3\xa9llo'|length }}") == "\xc3\xa9o5");
  CHECK(render("{{ range(9223372036854775805, 9223372036854775807, 5)|list }}") == "[9223372036854775805]");
}
