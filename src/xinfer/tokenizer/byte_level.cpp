#include "xinfer/tokenizer/byte_level.h"

#include "xinfer/tokenizer/utf8.h"

namespace xinfer::tok {

const ByteLevelMap& ByteLevelMap::get() {
  static const ByteLevelMap map = [] {
    ByteLevelMap m;
    m.cp_to_byte.fill(-1);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      m.byte_to_cp[b] = printable ? b : next++;
    }
    for (uint32_t b = 0; b < 256; ++b) {
      append_codepoint(m.byte_to_cp[b], m.byte_to_utf8[b]);
      m.cp_to_byte[m.byte_to_cp[b]] = static_cast<int16_t>(b);
    }
    return m;
  }();
  return map;
}

void ByteLevelMap::encode(std::string_view bytes, std::string& out) const {
  for (char c : bytes) out += byte_to_utf8[static_cast<uint8_t>(c)];
}

bool ByteLevelMap::decode(std::string_view text, std::string& out) const {
  const size_t start = out.size();
  size_t i = 0;
  while (i < text.size()) {
    const uint32_t cp = next_codepoint(text, i);
    if (cp >= cp_to_byte.size() || cp_to_byte[cp] < 0) {
      out.resize(start);
      return false;
    }
    out.push_back(static_cast<char>(cp_to_byte[cp]));
  }
  return true;
}

}  // namespace xinfer::tok
