// Python str semantics on UTF-8 std::string: what the jinja2 interpreter needs to reproduce CPython's
// string behaviour byte for byte (len/index/slice count code points; strip/split/isspace use Python's
// whitespace set; upper/lower use the C.UTF-8 locale's simple case mapping, so the rare one-to-many
// mappings such as 'ß'.upper() == 'SS' are not reproduced).
//
// Invariant: every function accepts any byte string; invalid UTF-8 bytes are treated as one code point
// each (U+FFFD-like), so nothing here ever fails or reads out of bounds.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace xinfer::jinja::py {

// Decodes UTF-8 into code points (invalid bytes map to 0xDC00 + byte, like Python's surrogateescape).
std::u32string decode(std::string_view s);
std::string encode(std::u32string_view s);
void append_utf8(std::string& out, char32_t cp);

bool is_ascii(std::string_view s);
int64_t length(std::string_view s);  // code points

bool is_space(char32_t c);  // str.isspace()
bool is_alpha(char32_t c);
bool is_digit(char32_t c);
bool is_upper(char32_t c);
bool is_lower(char32_t c);
char32_t to_upper(char32_t c);
char32_t to_lower(char32_t c);
bool is_printable(char32_t c);  // approximate str.isprintable() for repr()

std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string capitalize(std::string_view s);  // str.capitalize()
std::string title(std::string_view s);       // str.title()

// chars == nullopt strips whitespace, else any of the given code points.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// sep == nullopt: split on whitespace runs. maxsplit < 0: unlimited.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> splitlines(std::string_view s, bool keepends = false);
std::string replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count);
int64_t count(std::string_view s, std::string_view sub);
// Code-point index of the first/last occurrence, -1 if none.
int64_t find(std::string_view s, std::string_view sub, bool reverse);

// Python repr() of a str: quotes chosen like CPython, escapes for non-printables.
std::string repr(std::string_view s);
// Python float repr(): shortest round-trip digits, '1.0', '1e+16', '1e-05', 'inf', 'nan'.
std::string float_repr(double d);

// Python slice of a sequence of length n -> selected indices.
std::vector<int64_t> slice_indices(int64_t n, std::optional<int64_t> start, std::optional<int64_t> stop,
                                   std::optional<int64_t> step);

}  // namespace xinfer::jinja::py
