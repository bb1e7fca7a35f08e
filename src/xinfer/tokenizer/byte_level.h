// GPT-2's reversible byte <-> printable-character map used by ByteLevel pre-tokenizers and decoders:
// printable Latin-1 bytes map to themselves, the other 68 bytes to U+0100.. in order.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace xinfer::tok {

struct ByteLevelMap {
  std::array<uint32_t, 256> byte_to_cp;   // byte -> code point
  std::array<std::string, 256> byte_to_utf8;  // byte -> that code point as UTF-8
  std::array<int16_t, 324> cp_to_byte;   // code point (< 324) -> byte, -1 if not in the map

  static const ByteLevelMap& get();
  // Maps every byte of `bytes` to its character.
  void encode(std::string_view bytes, std::string& out) const;
  // Maps each character of `text` back to its byte; false if some character is not in the map.
  bool decode(std::string_view text, std::string& out) const;
};

}  // namespace xinfer::tok
