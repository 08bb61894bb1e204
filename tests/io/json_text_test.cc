// json_text_test.cc — JSON text written by hand and base64 (io/json_text.h).
// Expected values: an independent JSON parser (nlohmann) reads every string
// back to its input (valid UTF-8) or to the input with each malformed byte
// replaced by U+FFFD (RFC 3629's rules, spelled out here per case); numbers
// read back (strtod / strtof) to the same double / float; base64 against the
// RFC 4648 section 10 test vectors.
#include "io/json_text.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

namespace attnflow::json_text {
namespace {

std::string Str(std::string_view s) {
  std::string o;
  AppendJsonString(&o, s);
  return o;
}

TEST(JsonText, StringsReadBackAndCannotCloseAScriptElement) {
  for (const std::string s : {std::string(""), std::string("plain"), std::string("q\"b\\s/"),
                              std::string("tab\tnl\ncr\r"), std::string("\x01\x1f\x7f", 3),
                              std::string("nul\0in", 6), std::string("</script><b>"),
                              std::string("caf\xc3\xa9 \xe2\x86\x92 \xf0\x9f\x98\x80")}) {
    const std::string out = Str(s);
    EXPECT_EQ(nlohmann::json::parse(out).get<std::string>(), s) << out;
    EXPECT_EQ(out.find('<'), std::string::npos) << out;
    for (char c : out) EXPECT_GE(static_cast<unsigned char>(c), 0x20) << out;
  }
  EXPECT_EQ(Str("a<b"), "\"a\\u003cb\"");
  EXPECT_EQ(Str(std::string("\x01", 1)), "\"\\u0001\"");
}

TEST(JsonText, MalformedUtf8BecomesOneReplacementCharacterPerByte) {
  const std::string fffd = "\xef\xbf\xbd";
  const struct {
    std::string in, want;
  } cases[] = {
      {"\x80", fffd},                                  // stray continuation byte
      {"a\xc3", "a" + fffd},                           // truncated 2-byte sequence
      {"\xc0\xaf", fffd + fffd},                       // overlong '/' (C0 is never valid)
      {"\xe0\x80\xaf", fffd + fffd + fffd},            // overlong 3-byte form
      {"\xed\xa0\x80", fffd + fffd + fffd},            // a surrogate (U+D800)
      {"\xf4\x90\x80\x80", fffd + fffd + fffd + fffd}, // above U+10FFFF
      {"\xff", fffd},
      {"\xe2\x86", fffd + fffd},                       // truncated 3-byte sequence
      {"\xe2\x86\x92\xe2", "\xe2\x86\x92" + fffd},     // a good one, then a cut one
  };
  for (const auto& c : cases) {
    EXPECT_EQ(nlohmann::json::parse(Str(c.in)).get<std::string>(), c.want) << Str(c.in);
  }
}

TEST(JsonText, NumbersAreShortestRoundTripsAndNonFiniteAreStrings) {
  for (double v : {0.0, -0.0, 0.1, 1.0 / 3.0, 1e30, -2.5e-308, 4.9e-324, 123456789.0}) {
    std::string o;
    AppendJsonNumber(&o, v, false);
    EXPECT_EQ(std::strtod(o.c_str(), nullptr), v) << o;
    EXPECT_EQ(std::signbit(std::strtod(o.c_str(), nullptr)), std::signbit(v)) << o;
    std::string f;
    AppendJsonNumber(&f, v, true);
    EXPECT_EQ(std::strtof(f.c_str(), nullptr), static_cast<float>(v)) << f;
  }
  std::string o;
  AppendJsonNumber(&o, 0.1, false);
  EXPECT_EQ(o, "0.1");
  o.clear();
  AppendJsonNumber(&o, 0.1, true);  // the float nearest 0.1, shortest form
  EXPECT_EQ(o, "0.1");
  o.clear();
  AppendJsonNumber(&o, static_cast<double>(0.1f), false);  // the same float as a double
  EXPECT_EQ(o, "0.10000000149011612");
  o.clear();
  AppendJsonNumber(&o, std::numeric_limits<double>::quiet_NaN(), false);
  AppendJsonNumber(&o, -std::numeric_limits<double>::infinity(), true);
  AppendJsonNumber(&o, std::numeric_limits<double>::infinity(), false);
  EXPECT_EQ(o, "\"NaN\"\"-Infinity\"\"Infinity\"");
  o.clear();
  AppendJsonNumber(&o, -1e300, true);  // finite as a double, -inf as a float
  EXPECT_EQ(o, "\"-Infinity\"");
  o.clear();
  AppendJsonIntArray(&o, {});
  AppendJsonIntArray(&o, {3, -1, int64_t{1} << 40});
  EXPECT_EQ(o, "[][3,-1,1099511627776]");
}

TEST(JsonText, Base64IsRfc4648AndTheDecoderRefusesAnythingElse) {
  const struct {
    std::string raw, b64;
  } vectors[] = {{"", ""},           {"f", "Zg=="},         {"fo", "Zm8="},
                 {"foo", "Zm9v"},    {"foob", "Zm9vYg=="},  {"fooba", "Zm9vYmE="},
                 {"foobar", "Zm9vYmFy"}, {std::string("\xff\xfe\x00", 3), "//4A"}};
  for (const auto& v : vectors) {
    std::string enc;
    AppendBase64(&enc, reinterpret_cast<const unsigned char*>(v.raw.data()), v.raw.size());
    EXPECT_EQ(enc, v.b64);
    std::string dec = "junk";
    ASSERT_TRUE(DecodeBase64(v.b64, &dec)) << v.b64;
    EXPECT_EQ(dec, v.raw);
  }
  std::string out;
  for (const char* bad : {"Zg=", "Z===", "Zg==Zg==", "Zm9v!A==", "=Zg=", "Zm=v", "Zm9", "Zg=A"})
    EXPECT_FALSE(DecodeBase64(bad, &out)) << bad;
}

}  // namespace
}  // namespace attnflow::json_text
