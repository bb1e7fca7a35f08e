#include "xinfer/tokenizer/jinja/interpreter.h"

#include "xinfer/tokenizer/jinja/builtins.h"
#include "xinfer/tokenizer/jinja/py_text.h"

namespace xinfer::jinja {

namespace {

constexpr int kMaxCallDepth = 256;

// A TemplateError that already carries its line, so outer statements do not prefix it again.
class LocatedError : public TemplateError {
 public:
  LocatedError(int line, const std::string& m) : TemplateError("line " + std::to_string(line) + ": " + m) {}
};

class Interpreter {
 public:
  Interpreter(std::shared_ptr<Scope> root, std::string* out) : scope_(std::move(root)), out_(out) {}

  enum class Flow { kNormal, kBreak, kContinue };

  Flow exec(const StmtList& body) {
    for (const auto& s : body) {
      Flow f = exec_located(*s);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

 private:
  Flow exec_located(const Stmt& s) {
    try {
      return exec(s);
    } catch (const RaisedError&) {
      throw;
    } catch (const LocatedError&) {
      throw;
    } catch (const TemplateError& e) {
      throw LocatedError(s.line, e.what());
    }
  }

  // Scope guard: makes `next` current until destruction.
  struct ScopeSwap {
    Interpreter& in;
    std::shared_ptr<Scope> saved;
    ScopeSwap(Interpreter& i, std::shared_ptr<Scope> next) : in(i), saved(std::move(i.scope_)) { in.scope_ = std::move(next); }
    ~ScopeSwap() { in.scope_ = std::move(saved); }
  };
  struct OutSwap {
    Interpreter& in;
    std::string* saved;
    OutSwap(Interpreter& i, std::string* next) : in(i), saved(i.out_) { in.out_ = next; }
    ~OutSwap() { in.out_ = saved; }
  };

  std::shared_ptr<Scope> child_scope() {
    auto s = std::make_shared<Scope>();
    s->parent = scope_;
    return s;
  }

  Value lookup(const std::string& name) const {
    for (const Scope* s = scope_.get(); s; s = s->parent.get()) {
      auto it = s->vars.find(name);
      if (it != s->vars.end()) return it->second;
    }
    return Value::undefined("'" + name + "' is undefined");
  }

  void assign(const Expr& target, const Value& v) {
    if (target.kind == ExprKind::kName) {
      scope_->vars[target.name] = v;
    } else if (target.kind == ExprKind::kTuple) {
      ValueList items = v.iterate();
      size_t n = target.children.size();
      if (items.size() > n) throw TemplateError("too many values to unpack (expected " + std::to_string(n) + ")");
      if (items.size() < n)
        throw TemplateError("not enough values to unpack (expected " + std::to_string(n) + ", got " + std::to_string(items.size()) + ")");
      for (size_t i = 0; i < n; ++i) assign(*target.children[i], items[i]);
    } else {  // ns.attr
      Value ns = lookup(target.children[0]->name);
      if (!ns.is_namespace()) throw TemplateError("cannot assign attribute on non-namespace object");
      ns.mutable_dict().set(target.name, v);
    }
  }

  Flow exec(const Stmt& s) {
    switch (s.kind) {
      case StmtKind::kData: *out_ += s.text; break;
      case StmtKind::kPrint: *out_ += eval(*s.expr).str(); break;
      case StmtKind::kIf:
        for (size_t i = 0; i < s.conds.size(); ++i)
          if (eval(*s.conds[i]).truthy()) return exec(s.bodies[i]);
        return exec(s.else_body);
      case StmtKind::kFor: return exec_for(s);
      case StmtKind::kSet: assign(*s.target, eval(*s.expr)); break;
      case StmtKind::kBlockSet: {  // the body has its own scope: its assignments do not leak
        std::string buf;
        {
          OutSwap o(*this, &buf);
          ScopeSwap swap(*this, child_scope());
          exec(s.body);
        }
        assign(*s.target, s.filter ? apply_block_filter(*s.filter, Value(buf)) : Value(buf));
        break;
      }
      case StmtKind::kFilterBlock: {
        std::string buf;
        {
          OutSwap o(*this, &buf);
          ScopeSwap swap(*this, child_scope());
          exec(s.body);
        }
        *out_ += apply_block_filter(*s.filter, Value(buf)).str();
        break;
      }
      case StmtKind::kMacro: {
        const Stmt* m = &s;
        std::shared_ptr<Scope> closure = scope_;
        scope_->vars[s.name] = Value::function(s.name, [this, m, closure](CallArgs& a) { return call_macro(*m, closure, a); });
        break;
      }
      case StmtKind::kWith: {
        auto sc = child_scope();
        for (size_t i = 0; i < s.params.size(); ++i) sc->vars[s.params[i]] = eval(*s.defaults[i]);
        ScopeSwap swap(*this, sc);
        return exec(s.body);
      }
      case StmtKind::kBreak: return Flow::kBreak;
      case StmtKind::kContinue: return Flow::kContinue;
      case StmtKind::kScope: return exec(s.body);
    }
    return Flow::kNormal;
  }

  Flow exec_for(const Stmt& s) {
    ValueList items = eval(*s.expr).iterate();
    if (s.cond) {
      ValueList kept;
      for (const Value& item : items) {
        ScopeSwap swap(*this, child_scope());
        assign(*s.target, item);
        if (eval(*s.cond).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {  // the else body, like the loop body, has its own scope
      ScopeSwap swap(*this, child_scope());
      return exec(s.else_body);
    }
    auto n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      ScopeSwap swap(*this, child_scope());
      DictItems loop = {{"index", Value(i + 1)},       {"index0", Value(i)},
                        {"revindex", Value(n - i)},    {"revindex0", Value(n - i - 1)},
                        {"first", Value(i == 0)},      {"last", Value(i == n - 1)},
                        {"length", Value(n)},          {"depth", Value(int64_t{1})},
                        {"depth0", Value(int64_t{0})}};
      if (i > 0) loop.emplace_back("previtem", items[static_cast<size_t>(i - 1)]);
      if (i + 1 < n) loop.emplace_back("nextitem", items[static_cast<size_t>(i + 1)]);
      loop.emplace_back("cycle", Value::function("cycle", [i](CallArgs& a) -> Value {
        if (a.args.empty()) throw TemplateError("no items for cycling given");
        return a.args[static_cast<size_t>(i) % a.args.size()];
      }));
      scope_->vars["loop"] = Value::dict(std::move(loop));
      assign(*s.target, items[static_cast<size_t>(i)]);
      if (exec(s.body) == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  Value call_macro(const Stmt& m, const std::shared_ptr<Scope>& closure, CallArgs& a) {
    if (depth_ >= kMaxCallDepth) throw TemplateError("maximum recursion depth exceeded in macro '" + m.name + "'");
    auto sc = std::make_shared<Scope>();
    sc->parent = closure;
    ValueList varargs;
    for (size_t i = 0; i < a.args.size(); ++i) {
      if (i < m.params.size()) sc->vars[m.params[i]] = a.args[i];
      else varargs.push_back(a.args[i]);
    }
    DictItems kwargs;
    for (auto& [k, v] : a.kwargs) {
      bool is_param = std::find(m.params.begin(), m.params.end(), k) != m.params.end();
      if (is_param && sc->vars.count(k)) throw TemplateError("macro '" + m.name + "' got multiple values for argument '" + k + "'");
      if (is_param) sc->vars[k] = v;
      else kwargs.emplace_back(k, v);
    }
    ScopeSwap swap(*this, sc);
    for (size_t i = 0; i < m.params.size(); ++i) {
      if (sc->vars.count(m.params[i])) continue;
      sc->vars[m.params[i]] = m.defaults[i] ? eval(*m.defaults[i])
                                            : Value::undefined("parameter '" + m.params[i] + "' was not provided");
    }
    sc->vars["varargs"] = Value::list(std::move(varargs));
    sc->vars["kwargs"] = Value::dict(std::move(kwargs));
    std::string buf;
    OutSwap o(*this, &buf);
    ++depth_;
    try {
      exec(m.body);
    } catch (...) {
      --depth_;
      throw;
    }
    --depth_;
    return Value(buf);
  }

  Value apply_block_filter(const Expr& f, const Value& input) {
    block_input_ = input;
    return eval(f);
  }

  CallArgs eval_args(const Expr& e) {
    CallArgs a;
    size_t first = 1, npos = e.num_positional;
    for (size_t i = 0; i < npos; ++i) a.args.push_back(eval(*e.children[first + i]));
    for (size_t k = 0; k < e.kwnames.size(); ++k) a.kwargs.emplace_back(e.kwnames[k], eval(*e.children[first + npos + k]));
    return a;
  }

  std::optional<int64_t> slice_arg(const Expr* e) {
    if (!e) return std::nullopt;
    Value v = eval(*e);
    if (v.is_none()) return std::nullopt;
    if (!v.is_int() && !v.is_bool()) {
      v.require_defined();
      throw TemplateError("slice indices must be integers or None");
    }
    return v.as_int();
  }

  Value eval(const Expr& e) {
    switch (e.kind) {
      case ExprKind::kLiteral: return e.literal;
      case ExprKind::kName: return lookup(e.name);
      case ExprKind::kList:
      case ExprKind::kTuple: {
        ValueList items;
        for (const auto& c : e.children) items.push_back(eval(*c));
        return Value::list(std::move(items), e.kind == ExprKind::kTuple);
      }
      case ExprKind::kDict: {
        Value d = Value::dict();
        for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
          Value k = eval(*e.children[i]);
          if (!k.is_string()) throw TemplateError("only string keys are supported in dict literals");
          d.mutable_dict().set(k.as_string(), eval(*e.children[i + 1]));
        }
        return d;
      }
      case ExprKind::kGetAttr: return get_attr(eval(*e.children[0]), e.name);
      case ExprKind::kGetItem: {
        Value obj = eval(*e.children[0]);
        return get_item(obj, eval(*e.children[1]));
      }
      case ExprKind::kSlice: {
        Value obj = eval(*e.children[0]);
        obj.require_defined();
        auto start = slice_arg(e.children[1].get()), stop = slice_arg(e.children[2].get()),
             step = slice_arg(e.children[3].get());
        if (step && *step == 0) throw TemplateError("slice step cannot be zero");
        if (obj.is_list()) {
          const ValueList& items = obj.as_list();
          ValueList out;
          for (int64_t i : py::slice_indices(static_cast<int64_t>(items.size()), start, stop, step))
            out.push_back(items[static_cast<size_t>(i)]);
          return Value::list(std::move(out), obj.is_tuple());
        }
        if (obj.is_string()) {
          std::u32string u = py::decode(obj.as_string()), out;
          for (int64_t i : py::slice_indices(static_cast<int64_t>(u.size()), start, stop, step))
            out.push_back(u[static_cast<size_t>(i)]);
          return Value(py::encode(out));
        }
        if (obj.is_dict()) throw TemplateError("unhashable type: 'slice'");
        throw TemplateError("'" + obj.type_name() + "' object is not subscriptable");
      }
      case ExprKind::kCall: {
        Value fn = eval(*e.children[0]);
        CallArgs a = eval_args(e);
        fn.require_defined();
        if (!fn.is_function()) throw TemplateError("'" + fn.type_name() + "' object is not callable");
        return fn.as_function().fn(a);
      }
      case ExprKind::kFilter: {
        Value v = e.children[0] ? eval(*e.children[0]) : block_input_;
        CallArgs a = eval_args(e);
        return apply_filter(e.name, v, a);
      }
      case ExprKind::kTest: {
        Value v = eval(*e.children[0]);
        CallArgs a = eval_args(e);
        return Value(apply_test(e.name, v, a) != e.negated);
      }
      case ExprKind::kNeg:
      case ExprKind::kPos: {
        Value v = eval(*e.children[0]);
        v.require_defined();
        if (!v.is_number()) throw TemplateError("bad operand type for unary " + std::string(e.kind == ExprKind::kNeg ? "-" : "+") + ": '" + v.type_name() + "'");
        if (e.kind == ExprKind::kPos) return v.is_float() ? v : Value(v.as_int());
        return v.is_float() ? Value(-v.as_double()) : binary_op("-", Value(int64_t{0}), v);
      }
      case ExprKind::kNot: return Value(!eval(*e.children[0]).truthy());
      case ExprKind::kAnd: {
        Value l = eval(*e.children[0]);
        return l.truthy() ? eval(*e.children[1]) : l;
      }
      case ExprKind::kOr: {
        Value l = eval(*e.children[0]);
        return l.truthy() ? l : eval(*e.children[1]);
      }
      case ExprKind::kBinary: {
        Value l = eval(*e.children[0]);
        Value r = eval(*e.children[1]);
        return binary_op(e.name, l, r);
      }
      case ExprKind::kConcat: {
        std::string s;
        for (const auto& c : e.children) s += eval(*c).str();
        return Value(s);
      }
      case ExprKind::kCompare: {
        Value l = eval(*e.children[0]);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value r = eval(*e.children[i + 1]);
          const std::string& op = e.ops[i];
          bool ok;
          if (op == "==") ok = py_equal(l, r);
          else if (op == "!=") ok = !py_equal(l, r);
          else if (op == "<") ok = py_less(l, r);
          else if (op == ">") ok = py_less(r, l);
          else if (op == "<=") ok = !py_less(r, l);
          else if (op == ">=") ok = !py_less(l, r);
          else if (op == "in") ok = contains(r, l);
          else ok = !contains(r, l);
          if (!ok) return Value(false);
          l = std::move(r);
        }
        return Value(true);
      }
      case ExprKind::kCond:
        if (eval(*e.children[0]).truthy()) return eval(*e.children[1]);
        if (e.children[2]) return eval(*e.children[2]);
        return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                                " evaluated to false and no else section was defined.");
    }
    throw TemplateError("internal: unknown expression kind");
  }

  std::shared_ptr<Scope> scope_;
  std::string* out_;
  Value block_input_;
  int depth_ = 0;
};

}  // namespace

std::string interpret(const StmtList& body, std::shared_ptr<Scope> root) {
  std::string out;
  Interpreter in(std::move(root), &out);
  in.exec(body);
  return out;
}

}  // namespace xinfer::jinja
