#include "xinfer/tokenizer/jinja/parser.h"

#include <algorithm>
#include <charconv>
#include <initializer_list>

#include "xinfer/tokenizer/jinja/lexer.h"

namespace xinfer::jinja {

namespace {

class SyntaxError : public std::runtime_error {
 public:
  SyntaxError(int line, const std::string& m)
      : std::runtime_error("template syntax error (line " + std::to_string(line) + "): " + m) {}
};

std::string describe(const Token& t) {
  switch (t.kind) {
    case TokenKind::kData: return "template data";
    case TokenKind::kVarBegin: return "'{{'";
    case TokenKind::kVarEnd: return "end of print statement";
    case TokenKind::kBlockBegin: return "'{%'";
    case TokenKind::kBlockEnd: return "end of statement block";
    case TokenKind::kEof: return "end of template";
    case TokenKind::kString: return "string";
    case TokenKind::kInt: return "integer";
    case TokenKind::kFloat: return "float";
    default: return "'" + t.text + "'";
  }
}

constexpr int kMaxNesting = 200;  // expressions/blocks nested deeper fail instead of overflowing the stack

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  StmtList parse_all() {
    StmtList out = parse_body({});
    if (cur().kind != TokenKind::kEof) fail("unexpected " + describe(cur()));
    return out;
  }

 private:
  const Token& cur() const { return t_[p_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(p_ + k, t_.size() - 1)]; }
  Token next() { return t_[p_ < t_.size() - 1 ? p_++ : p_]; }
  [[noreturn]] void fail(const std::string& m) const { throw SyntaxError(cur().line, m); }
  bool is_op(std::string_view op) const { return cur().kind == TokenKind::kOp && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().kind == TokenKind::kName && cur().text == n; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    ++p_;
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!is_name(n)) return false;
    ++p_;
    return true;
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail("expected token '" + std::string(op) + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().kind != TokenKind::kName) fail("expected name, got " + describe(cur()));
    return next().text;
  }
  void expect_block_end() {
    if (cur().kind != TokenKind::kBlockEnd) fail("expected end of statement block, got " + describe(cur()));
    ++p_;
  }
  ExprPtr make(ExprKind k) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = cur().line;
    return e;
  }

  // ---- statements ----

  // Parses until `{% <one of ends>` (left unconsumed: the cursor is on the name) or EOF.
  StmtList parse_body(std::initializer_list<std::string_view> ends) {
    StmtList out;
    while (true) {
      const Token& tok = cur();
      if (tok.kind == TokenKind::kEof) {
        if (ends.size()) {
          std::string names;
          for (auto e : ends) names += (names.empty() ? "'" : " or '") + std::string(e) + "'";
          fail("unexpected end of template; jinja was looking for " + names);
        }
        return out;
      }
      if (tok.kind == TokenKind::kData) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kData;
        s->line = tok.line;
        s->text = tok.text;
        out.push_back(std::move(s));
        ++p_;
      } else if (tok.kind == TokenKind::kVarBegin) {
        ++p_;
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kPrint;
        s->line = tok.line;
        s->expr = parse_tuple(true, {});
        if (cur().kind != TokenKind::kVarEnd) fail("expected end of print statement, got " + describe(cur()));
        ++p_;
        out.push_back(std::move(s));
      } else if (tok.kind == TokenKind::kBlockBegin) {
        const Token& n = peek();
        if (n.kind != TokenKind::kName) {
          ++p_;
          fail("tag name expected");
        }
        if (std::find(ends.begin(), ends.end(), n.text) != ends.end()) {
          ++p_;
          return out;
        }
        ++p_;
        out.push_back(parse_statement());
      } else {
        fail("unexpected " + describe(tok));
      }
    }
  }

  // Consumes `name %}` after parse_body stopped on it.
  void end_tag(std::string_view name) {
    if (!skip_name(name)) fail("expected '" + std::string(name) + "'");
    expect_block_end();
  }

  StmtPtr parse_statement() {
    DepthGuard guard(*this);
    auto s = std::make_unique<Stmt>();
    s->line = cur().line;
    std::string tag = next().text;
    if (tag == "for") {
      s->kind = StmtKind::kFor;
      s->target = parse_assign_target(false);
      if (!skip_name("in")) fail("expected 'in', got " + describe(cur()));
      s->expr = parse_tuple(false, {"recursive"});
      if (skip_name("if")) s->cond = parse_expression(true);
      if (is_name("recursive")) fail("recursive for loops are not supported");
      expect_block_end();
      ++loop_depth_;
      s->body = parse_body({"endfor", "else"});
      --loop_depth_;
      if (skip_name("else")) {
        expect_block_end();
        s->else_body = parse_body({"endfor"});
      }
      end_tag("endfor");
    } else if (tag == "if") {
      s->kind = StmtKind::kIf;
      while (true) {
        s->conds.push_back(parse_tuple(false, {}));
        expect_block_end();
        s->bodies.push_back(parse_body({"elif", "else", "endif"}));
        if (skip_name("elif")) continue;
        if (skip_name("else")) {
          expect_block_end();
          s->else_body = parse_body({"endif"});
        }
        break;
      }
      end_tag("endif");
    } else if (tag == "set") {
      s->target = parse_assign_target(true);
      if (skip_op("=")) {
        s->kind = StmtKind::kSet;
        s->expr = parse_tuple(true, {});
        expect_block_end();
      } else {
        s->kind = StmtKind::kBlockSet;
        if (is_op("|")) s->filter = parse_filter_chain(nullptr);
        expect_block_end();
        s->body = parse_body({"endset"});
        end_tag("endset");
      }
    } else if (tag == "macro") {
      s->kind = StmtKind::kMacro;
      s->name = expect_name();
      expect_op("(");
      while (!is_op(")")) {
        if (!s->params.empty()) expect_op(",");
        if (is_op(")")) break;
        s->params.push_back(expect_name());
        s->defaults.push_back(skip_op("=") ? parse_expression(true) : nullptr);
      }
      expect_op(")");
      expect_block_end();
      int saved = loop_depth_;
      loop_depth_ = 0;
      s->body = parse_body({"endmacro"});
      loop_depth_ = saved;
      end_tag("endmacro");
    } else if (tag == "filter") {
      s->kind = StmtKind::kFilterBlock;
      s->filter = parse_filter_chain(nullptr, /*start_inline=*/true);
      expect_block_end();
      s->body = parse_body({"endfilter"});
      end_tag("endfilter");
    } else if (tag == "with") {
      s->kind = StmtKind::kWith;
      while (cur().kind != TokenKind::kBlockEnd) {
        if (!s->params.empty()) expect_op(",");
        s->params.push_back(expect_name());
        expect_op("=");
        s->defaults.push_back(parse_expression(true));
      }
      expect_block_end();
      s->body = parse_body({"endwith"});
      end_tag("endwith");
    } else if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail("'" + tag + "' outside of a loop");
      s->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
      expect_block_end();
    } else if (tag == "generation") {
      s->kind = StmtKind::kScope;
      expect_block_end();
      s->body = parse_body({"endgeneration"});
      end_tag("endgeneration");
    } else {
      --p_;
      fail("encountered unknown or unsupported tag '" + tag + "'");
    }
    return s;
  }

  // for-target / set-target: a name, names separated by commas, or (set only) ns.attr.
  ExprPtr parse_assign_target(bool allow_namespace) {
    if (allow_namespace && cur().kind == TokenKind::kName && peek().kind == TokenKind::kOp && peek().text == ".") {
      auto e = make(ExprKind::kGetAttr);
      auto obj = make(ExprKind::kName);
      obj->name = next().text;
      ++p_;  // '.'
      e->name = expect_name();
      e->children.push_back(std::move(obj));
      return e;
    }
    std::vector<ExprPtr> names;
    bool tuple = false;
    bool paren = skip_op("(");
    while (true) {
      auto n = make(ExprKind::kName);
      n->name = expect_name();
      if (n->name == "true" || n->name == "false" || n->name == "none" || n->name == "True" ||
          n->name == "False" || n->name == "None")
        fail("can't assign to literal '" + n->name + "'");
      names.push_back(std::move(n));
      if (!skip_op(",")) break;
      tuple = true;
      if (cur().kind != TokenKind::kName) break;
    }
    if (paren) expect_op(")");
    if (!tuple) return std::move(names[0]);
    auto t = make(ExprKind::kTuple);
    t->children = std::move(names);
    return t;
  }

  // ---- expressions ----

  bool is_tuple_end(std::initializer_list<std::string_view> extra) const {
    auto k = cur().kind;
    if (k == TokenKind::kVarEnd || k == TokenKind::kBlockEnd || k == TokenKind::kEof) return true;
    if (is_op(")")) return true;
    for (auto e : extra)
      if (is_name(e)) return true;
    return false;
  }

  ExprPtr parse_tuple(bool with_condexpr, std::initializer_list<std::string_view> extra, bool explicit_parens = false) {
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    int line = cur().line;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra)) break;
      items.push_back(parse_expression(with_condexpr));
      if (is_op(",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) fail("expected an expression, got " + describe(cur()));
    }
    auto t = make(ExprKind::kTuple);
    t->line = line;
    t->children = std::move(items);
    return t;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(*this);
    if (!with_condexpr) return parse_or();
    ExprPtr e = parse_or();
    while (is_name("if")) {
      auto c = make(ExprKind::kCond);
      ++p_;
      ExprPtr test = parse_or();
      ExprPtr other = skip_name("else") ? parse_expression(true) : nullptr;
      c->children.push_back(std::move(test));
      c->children.push_back(std::move(e));
      c->children.push_back(std::move(other));
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(ExprKind k, ExprPtr a, ExprPtr b, std::string op = {}) {
    auto e = make(k);
    e->line = a->line;
    e->name = std::move(op);
    e->children.push_back(std::move(a));
    e->children.push_back(std::move(b));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr l = parse_and();
    while (skip_name("or")) l = binary(ExprKind::kOr, std::move(l), parse_and());
    return l;
  }
  ExprPtr parse_and() {
    ExprPtr l = parse_not();
    while (skip_name("and")) l = binary(ExprKind::kAnd, std::move(l), parse_not());
    return l;
  }
  ExprPtr parse_not() {
    DepthGuard guard(*this);
    if (is_name("not")) {
      auto e = make(ExprKind::kNot);
      ++p_;
      e->children.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().kind == TokenKind::kOp &&
          (is_op("==") || is_op("!=") || is_op("<") || is_op(">") || is_op("<=") || is_op(">="))) {
        op = next().text;
      } else if (is_name("in")) {
        ++p_;
        op = "in";
      } else if (is_name("not") && peek().kind == TokenKind::kName && peek().text == "in") {
        p_ += 2;
        op = "notin";
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(ExprKind::kCompare);
        cmp->line = first->line;
        cmp->children.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->children.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }
  ExprPtr parse_math1() {
    ExprPtr l = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = next().text;
      l = binary(ExprKind::kBinary, std::move(l), parse_concat(), op);
    }
    return l;
  }
  ExprPtr parse_concat() {
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto e = make(ExprKind::kConcat);
    e->line = first->line;
    e->children.push_back(std::move(first));
    while (skip_op("~")) e->children.push_back(parse_math2());
    return e;
  }
  ExprPtr parse_math2() {
    ExprPtr l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = next().text;
      l = binary(ExprKind::kBinary, std::move(l), parse_pow(), op);
    }
    return l;
  }
  ExprPtr parse_pow() {
    ExprPtr l = parse_unary(true);
    while (skip_op("**")) l = binary(ExprKind::kBinary, std::move(l), parse_unary(true), "**");
    return l;
  }
  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      node = make(is_op("-") ? ExprKind::kNeg : ExprKind::kPos);
      ++p_;
      node->children.push_back(parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& tok = cur();
    auto lit = [&](Value v) {
      auto e = make(ExprKind::kLiteral);
      e->literal = std::move(v);
      ++p_;
      return e;
    };
    switch (tok.kind) {
      case TokenKind::kName: {
        const std::string& n = tok.text;
        if (n == "true" || n == "True") return lit(Value(true));
        if (n == "false" || n == "False") return lit(Value(false));
        if (n == "none" || n == "None") return lit(Value(None{}));
        auto e = make(ExprKind::kName);
        e->name = n;
        ++p_;
        return e;
      }
      case TokenKind::kString: {
        std::string s = tok.text;
        ++p_;
        while (cur().kind == TokenKind::kString) s += next().text;
        auto e = make(ExprKind::kLiteral);
        e->literal = Value(std::move(s));
        return e;
      }
      case TokenKind::kInt: {
        int64_t v = 0;
        auto r = std::from_chars(tok.text.data(), tok.text.data() + tok.text.size(), v);
        if (r.ec != std::errc()) fail("integer literal out of range: " + tok.text);
        return lit(Value(v));
      }
      case TokenKind::kFloat: return lit(Value(std::stod(tok.text)));
      case TokenKind::kOp:
        if (tok.text == "(") {
          ++p_;
          ExprPtr e = parse_tuple(true, {}, /*explicit_parens=*/true);
          expect_op(")");
          return e;
        }
        if (tok.text == "[") {
          auto e = make(ExprKind::kList);
          ++p_;
          while (!is_op("]")) {
            if (!e->children.empty()) expect_op(",");
            if (is_op("]")) break;
            e->children.push_back(parse_expression(true));
          }
          expect_op("]");
          return e;
        }
        if (tok.text == "{") {
          auto e = make(ExprKind::kDict);
          ++p_;
          while (!is_op("}")) {
            if (!e->children.empty()) expect_op(",");
            if (is_op("}")) break;
            e->children.push_back(parse_expression(true));
            expect_op(":");
            e->children.push_back(parse_expression(true));
          }
          expect_op("}");
          return e;
        }
        break;
      default: break;
    }
    fail("unexpected " + describe(tok));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".")) {
        ++p_;
        if (cur().kind == TokenKind::kInt) {
          auto e = make(ExprKind::kGetItem);
          auto key = make(ExprKind::kLiteral);
          key->literal = Value(static_cast<int64_t>(std::stoll(next().text)));
          e->children.push_back(std::move(node));
          e->children.push_back(std::move(key));
          node = std::move(e);
        } else {
          auto e = make(ExprKind::kGetAttr);
          e->name = expect_name();
          e->children.push_back(std::move(node));
          node = std::move(e);
        }
      } else if (is_op("[")) {
        ++p_;
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node), ExprKind::kCall);
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj) {
    std::vector<ExprPtr> parts;
    ExprPtr slice;
    while (true) {
      if (!parts.empty() || slice) fail("multiple subscripts are not supported");
      ExprPtr start, stop, step;
      bool is_slice = false;
      if (!is_op(":")) start = parse_expression(true);
      if (skip_op(":")) {
        is_slice = true;
        if (!is_op("]") && !is_op(",") && !is_op(":")) stop = parse_expression(true);
        if (skip_op(":") && !is_op("]") && !is_op(",")) step = parse_expression(true);
      }
      if (is_slice) {
        slice = make(ExprKind::kSlice);
        slice->children.push_back(std::move(obj));
        slice->children.push_back(std::move(start));
        slice->children.push_back(std::move(stop));
        slice->children.push_back(std::move(step));
      } else {
        parts.push_back(std::move(start));
      }
      if (!skip_op(",")) break;
    }
    expect_op("]");
    if (slice) return slice;
    auto e = make(ExprKind::kGetItem);
    e->children.push_back(std::move(obj));
    e->children.push_back(std::move(parts[0]));
    return e;
  }

  // `(args)` after a callee, filter or test: fills children[1..], num_positional, kwnames.
  void parse_call_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are not supported");
      if (cur().kind == TokenKind::kName && peek().kind == TokenKind::kOp && peek().text == "=") {
        e.kwnames.push_back(next().text);
        ++p_;
        e.children.push_back(parse_expression(true));
      } else {
        if (!e.kwnames.empty()) fail("invalid syntax for function call expression");
        e.children.push_back(parse_expression(true));
        ++e.num_positional;
      }
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee, ExprKind kind) {
    auto e = make(kind);
    e->children.push_back(std::move(callee));
    parse_call_args(*e);
    return e;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        node = parse_filter_chain(std::move(node), false, /*single=*/true);
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node), ExprKind::kCall);
      } else {
        return node;
      }
    }
  }

  // `|f(args)|g...`; operand may be null (filter blocks). single: parse one filter only.
  ExprPtr parse_filter_chain(ExprPtr node, bool start_inline = false, bool single = false) {
    while (is_op("|") || start_inline) {
      if (!start_inline) ++p_;
      start_inline = false;
      auto e = make(ExprKind::kFilter);
      e->name = expect_name();
      while (skip_op(".")) e->name += "." + expect_name();
      e->children.push_back(std::move(node));
      if (is_op("(")) parse_call_args(*e);
      node = std::move(e);
      if (single) break;
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    ++p_;  // 'is'
    auto e = make(ExprKind::kTest);
    e->negated = skip_name("not");
    e->name = expect_name();
    while (skip_op(".")) e->name += "." + expect_name();
    e->children.push_back(std::move(node));
    auto k = cur().kind;
    if (is_op("(")) {
      parse_call_args(*e);
    } else if ((k == TokenKind::kName || k == TokenKind::kString || k == TokenKind::kInt ||
                k == TokenKind::kFloat || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail("You cannot chain multiple tests with is");
      ExprPtr arg = parse_postfix(parse_primary());
      e->children.push_back(std::move(arg));
      e->num_positional = 1;
    }
    return e;
  }

  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxNesting) p.fail("template nested too deeply");
    }
    ~DepthGuard() { --p.depth_; }
  };

  std::vector<Token> t_;
  size_t p_ = 0;
  int loop_depth_ = 0;
  int depth_ = 0;
};

}  // namespace

Result<StmtList> parse_template(std::string_view source) {
  XI_ASSIGN_OR_RETURN(std::vector<Token> toks, tokenize(source));
  try {
    return Parser(std::move(toks)).parse_all();
  } catch (const SyntaxError& e) {
    return invalid_argument(e.what());
  }
}

}  // namespace xinfer::jinja
