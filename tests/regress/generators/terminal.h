// terminal.h — generator of hostile text for the terminal (issue 34, class
// "terminal output"): control sequences a file may carry in any string the
// CLI prints (names, notes, tokens, stage names, paths), and the check that
// none reaches the terminal raw.
//
// Rule (tools/cli/cli_common.h EscapeText/EscapeLine, docs/errors.md): every
// string the CLI did not write itself is printed with C0 controls (but \n
// and \t in multi-line text), DEL, the C1 controls U+0080..U+009F, the
// bidirectional overrides/isolates and invalid UTF-8 as \xNN.
//
// Used by tests/fault/fault_hostile3_test.cc. Deterministic.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace attnflow::regress {

// Each string carries at least one byte sequence that must not be printed.
inline std::vector<std::string> HostileStrings() {
  return {
      "\x1b[2J\x1b[H cleared",                   // CSI: clear screen, home
      "\x1b]0;owned title\x07",                  // OSC: window title, BEL
      "\x1b]8;;http://example.invalid\x1b\\link\x1b]8;;\x1b\\",  // OSC 8 hyperlink
      "\x1b]52;c;cm0gLXJmIH4=\x07",              // OSC 52: set the clipboard
      "red \x1b[31mRED\x1b[0m",                  // SGR colours
      "c1 \xc2\x9b" "31m csi",                   // U+009B (C1 CSI) as UTF-8
      "raw \x9b" "31m",                          // 8-bit CSI (invalid UTF-8)
      "bidi \xe2\x80\xae" "txt.exe",             // U+202E RIGHT-TO-LEFT OVERRIDE
      "iso \xe2\x81\xa6" "x\xe2\x81\xa9",        // U+2066 / U+2069 isolates
      "bs abc\x08\x08\x08xyz",                   // backspaces overwrite
      "cr fake\rPASS",                           // carriage return
      "del \x7f",                                // DEL
      "line\nATTNFLOW: ALL CHECKS PASS",         // a forged line (one-line fields)
  };
}

// The first forbidden sequence in `out` (terminal output), or "" if none:
// C0 controls other than \n and \t, DEL, bytes that are not valid UTF-8
// (a raw 8-bit C1 such as 0x9B), the C1 controls U+0080..U+009F and the
// bidi overrides/isolates U+202A..U+202E, U+2066..U+2069.
inline std::string ForbiddenIn(std::string_view out) {
  size_t i = 0;
  while (i < out.size()) {
    const unsigned char c = static_cast<unsigned char>(out[i]);
    const std::string at = " at byte " + std::to_string(i);
    if (c < 0x80) {
      if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
        return "control byte " + std::to_string(c) + at;
      }
      ++i;
      continue;
    }
    size_t n = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || i + n > out.size()) return "invalid UTF-8" + at;
    uint32_t cp = c & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
    for (size_t k = 1; k < n; ++k) {
      const unsigned char d = static_cast<unsigned char>(out[i + k]);
      if ((d & 0xC0) != 0x80) return "invalid UTF-8" + at;
      cp = (cp << 6) | (d & 0x3F);
    }
    if (cp >= 0x80 && cp <= 0x9F) return "C1 control U+00" + std::to_string(cp) + at;
    if ((cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069)) {
      return "bidi control" + at;
    }
    i += n;
  }
  return "";
}

}  // namespace attnflow::regress
