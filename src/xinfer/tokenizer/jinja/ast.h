// AST of a parsed template. Expressions and statements are plain tagged structs; which fields are
// used depends on `kind` (documented per enumerator). The tree is immutable after parsing and shared
// by every render of the Template (and by macro values created during a render).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "xinfer/tokenizer/jinja/value.h"

namespace xinfer::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  kLiteral,  // literal
  kName,     // name
  kList,     // children: items
  kTuple,    // children: items
  kDict,     // children: key0, value0, key1, value1, ...
  kGetAttr,  // children[0]: object; name: attribute
  kGetItem,  // children[0]: object; children[1]: key
  kSlice,    // children[0]: object; children[1..3]: start, stop, step (each may be null)
  kCall,     // children[0]: callee; then positional args; then keyword args (names in kwnames)
  kFilter,   // name; children[0]: operand (null inside {% filter %} / block set); then args as kCall
  kTest,     // name, negated; children[0]: operand; then args as kCall
  kNeg,      // children[0]
  kPos,      // children[0]
  kNot,      // children[0]
  kAnd,      // children[0], children[1]
  kOr,       // children[0], children[1]
  kBinary,   // name: + - * / // % **; children[0], children[1]
  kConcat,   // children: operands of ~
  kCompare,  // children[0]; then children[i + 1] compared with ops[i] (== != < > <= >= in notin)
  kCond,     // children[0]: test; children[1]: value if true; children[2]: value if false (may be null)
};

struct Expr {
  ExprKind kind;
  int line = 0;
  Value literal;
  std::string name;
  bool negated = false;
  std::vector<ExprPtr> children;
  size_t num_positional = 0;          // kCall/kFilter/kTest: positional args among children[1..]
  std::vector<std::string> kwnames;   // kCall/kFilter/kTest: names of the trailing keyword args
  std::vector<std::string> ops;       // kCompare
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using StmtList = std::vector<StmtPtr>;

enum class StmtKind {
  kData,        // text
  kPrint,       // expr
  kIf,          // conds[i] guards bodies[i]; else_body
  kFor,         // target, expr (iterable), cond (filter, may be null), body, else_body
  kSet,         // target (kName, kTuple of kName, or kGetAttr on a namespace name), expr
  kBlockSet,    // target, filter (chain with null operand, may be null), body
  kMacro,       // name, params, defaults (null = required), body
  kFilterBlock, // filter, body
  kWith,        // params (names), defaults (values), body
  kBreak,
  kContinue,
  kScope,       // body (the {% generation %} block of transformers' AssistantTracker)
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;
  std::string name;
  ExprPtr expr, cond, target, filter;
  std::vector<ExprPtr> conds;
  std::vector<StmtList> bodies;
  StmtList body, else_body;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;
};

}  // namespace xinfer::jinja
