// Template: small templates with expected outputs produced by Python jinja2 3.1 in transformers'
// configuration (see tests/python/test_chat_templates.py make_env), plus error handling.
#include "xinfer/tokenizer/jinja/template.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace xinfer::jinja {
namespace {

using nlohmann::ordered_json;

std::string render_ok(std::string_view src, const ordered_json& ctx = ordered_json::object()) {
  auto t = Template::parse(src);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  if (!t.ok()) return "<parse error>";
  auto r = t->render(ctx);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : "<render error: " + r.status().to_string() + ">";
}

Status render_error(std::string_view src, const ordered_json& ctx = ordered_json::object()) {
  auto t = Template::parse(src);
  if (!t.ok()) return t.status();
  auto r = t->render(ctx);
  EXPECT_FALSE(r.ok()) << "unexpectedly rendered: " << *r;
  return r.ok() ? Status() : r.status();
}

struct Case {
  const char* source;
  const char* context;
  const char* expected;  // from jinja2
};

class JinjaMatchesPython : public ::testing::TestWithParam<Case> {};

TEST_P(JinjaMatchesPython, Renders) {
  const Case& c = GetParam();
  EXPECT_EQ(render_ok(c.source, ordered_json::parse(c.context)), c.expected) << c.source;
}

INSTANTIATE_TEST_SUITE_P(
    Jinja2Outputs, JinjaMatchesPython,
    ::testing::Values(
        Case{"{{ greeting | upper }}", R"({"greeting": "hi"})", "HI"},
        Case{"{% for m in messages %}{{ loop.index }}:{{ m.role }}{% if not loop.last %},{% endif %}{% endfor %}",
             R"({"messages": [{"role": "user"}, {"role": "assistant"}]})", "1:user,2:assistant"},
        Case{"{%- if x -%}\n  yes\n{%- else -%}\n  no\n{%- endif -%}\n", R"({"x": false})", "no"},
        Case{"  {% if true %}\n  body\n  {% endif %}\nafter", "{}", "  body\nafter"},
        Case{"{{ missing }}|{{ missing is defined }}|{{ missing|default('d') }}|{% for x in missing %}x{% endfor %}",
             "{}", "|False|d|"},
        Case{"{{ tools|tojson }}", R"({"tools": [{"z": 1, "a": "\u00e9"}]})", "[{\"z\": 1, \"a\": \"\u00e9\"}]"},
        Case{"{{ [1, 'a', none, true, 1.5] }} {{ {'k': 'v'} }}", "{}", "[1, 'a', None, True, 1.5] {'k': 'v'}"},
        Case{"{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}",
             "{}", "6"},
        Case{"{{ 'a,b,,c'.split(',') }} {{ '  x  '.strip() }} {{ 'abc'[::-1] }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }}",
             "{}", "['a', 'b', '', 'c'] x cba -4 2 3.5"},
        Case{"{% macro m(a, b='B') %}<{{ a }}{{ b }}>{% endmacro %}{{ m(1) }}{{ m(2, b='x') }}", "{}", "<1B><2x>"}));

TEST(Template, KeepsJsonKeyOrderWithOrderedJson) {
  ordered_json ctx = ordered_json::parse(R"({"d": {"zeta": 1, "alpha": 2}})");
  EXPECT_EQ(render_ok("{{ d|tojson }}", ctx), R"({"zeta": 1, "alpha": 2})");
}

TEST(Template, AcceptsPlainJsonContext) {
  auto t = Template::parse("{{ a }}-{{ b }}");
  ASSERT_TRUE(t.ok());
  nlohmann::json plain = {{"a", 1}, {"b", "x"}};
  auto r = t->render(plain);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, "1-x");
  EXPECT_EQ(*t->render({{"a", 2}, {"b", "y"}}), "2-y");
}

TEST(Template, RaiseExceptionCarriesTheTemplateMessage) {
  Status s = render_error("{% if n > 1 %}{{ raise_exception('too many: ' ~ n) }}{% endif %}", {{"n", 3}});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("too many: 3"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("raised"), std::string::npos) << s.message();
}

TEST(Template, SyntaxErrorsNameTheLine) {
  auto t = Template::parse("line one\n{% for x in y %}\n{{ x }}\n");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("endfor"), std::string::npos) << t.status().message();
  auto u = Template::parse("a\n\n{{ 1 + }}");
  ASSERT_FALSE(u.ok());
  EXPECT_NE(u.status().message().find("line 3"), std::string::npos) << u.status().message();
  EXPECT_FALSE(Template::parse("{% include 'x' %}").ok());
  EXPECT_FALSE(Template::parse("{% break %}").ok());  // outside a loop
  EXPECT_FALSE(Template::parse("{{ 'unterminated }}").ok());
}

TEST(Template, RuntimeErrorsAreStatusesNotCrashes) {
  EXPECT_NE(render_error("{{ missing.attr }}").message().find("'missing' is undefined"), std::string::npos);
  EXPECT_NE(render_error("{{ 'a' + 1 }}").message().find("can only concatenate str"), std::string::npos);
  EXPECT_NE(render_error("{{ x|nope }}").message().find("No filter named 'nope'"), std::string::npos);
  EXPECT_NE(render_error("{{ 1 // 0 }}").message().find("division"), std::string::npos);
  EXPECT_NE(render_error("{{ d.pop('a') }}", {{"d", {{"a", 1}}}}).message().find("unsafe"), std::string::npos);
  EXPECT_NE(render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").message().find("recursion"),
            std::string::npos);
  EXPECT_NE(render_error("{{ range(1000000)|length }}").message().find("Range too big"), std::string::npos);
  EXPECT_FALSE(Template::parse("{{ x }}")->render(ordered_json::array()).ok());
}

TEST(Template, DeepNestingIsAnErrorNotAStackOverflow) {
  std::string deep_expr = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_FALSE(Template::parse(deep_expr).ok());
  std::string deep_if;
  for (int i = 0; i < 5000; ++i) deep_if += "{% if true %}";
  EXPECT_FALSE(Template::parse(deep_if).ok());
  ordered_json deep = ordered_json::array();
  for (int i = 0; i < 5000; ++i) deep = ordered_json::array({deep});
  auto t = Template::parse("{{ x|length }}");
  ASSERT_TRUE(t.ok());
  auto r = t->render(ordered_json{{"x", deep}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("nested deeper"), std::string::npos) << r.status().message();
}

TEST(Template, UndefinedBehavesLikeJinja2Default) {
  // Attribute of a missing *key* is Undefined (printable, falsy); attribute of an Undefined raises.
  EXPECT_EQ(render_ok("[{{ m.tool_calls }}][{{ m.tool_calls is defined }}][{{ m['x'] or 'falsy' }}]",
                      {{"m", ordered_json::object()}}),
            "[][False][falsy]");
  EXPECT_EQ(render_ok("{{ u|length }}{{ u|trim }}{{ u|upper }}{{ (u|list)|length }}{{ 'x' in u }}"), "00False");
}

TEST(Template, IsSafeToRenderConcurrently) {
  auto t = Template::parse("{% for i in range(50) %}{{ i }}{% endfor %}");
  ASSERT_TRUE(t.ok());
  std::string expected = *t->render(ordered_json::object());
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i)
        if (*t->render(ordered_json::object()) != expected) ++bad;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace xinfer::jinja
