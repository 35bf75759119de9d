#include "core/json.h"

#include <gtest/gtest.h>

namespace bw::json {
namespace {

std::string message_of(auto fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Json, ReadsNumbersAndStrings) {
  Json j = Json::parse(R"({"a": 1.5, "n": 3, "s": "x"})");
  EXPECT_DOUBLE_EQ(get_number(j, "a", "obj"), 1.5);
  EXPECT_EQ(get_int(j, "n", "obj"), 3);
  EXPECT_EQ(get_string(j, "s", "obj"), "x");
}

TEST(Json, MissingFieldNamesFieldAndPlace) {
  Json j = Json::parse(R"({"a": 1})");
  std::string m = message_of([&] { get_number(j, "forward_ms", "layer 3"); });
  EXPECT_NE(m.find("layer 3"), std::string::npos) << m;
  EXPECT_NE(m.find("forward_ms"), std::string::npos) << m;
}

TEST(Json, WrongTypeAndNegativeAndFraction) {
  Json j = Json::parse(R"({"s": "x", "neg": -1, "f": 1.5})");
  EXPECT_NE(message_of([&] { get_number(j, "s", "o"); }).find("must be a number"),
            std::string::npos);
  EXPECT_NE(message_of([&] { get_non_negative(j, "neg", "o"); }).find(">= 0"), std::string::npos);
  EXPECT_NE(message_of([&] { get_int(j, "f", "o"); }).find("integer"), std::string::npos);
  EXPECT_NE(message_of([&] { get_string(j, "neg", "o"); }).find("string"), std::string::npos);
}

TEST(Json, MissingFileAndBadJsonAreConfigErrors) {
  EXPECT_NE(message_of([] { read_file("no/such/file.json"); }).find("cannot open"),
            std::string::npos);
  std::string path = ::testing::TempDir() + "/bad.json";
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    std::fputs("{not json", f);
    std::fclose(f);
  }
  EXPECT_NE(message_of([&] { read_file(path); }).find("not valid JSON"), std::string::npos);
}

TEST(Json, HugeNumbersAreConfigErrorsNotWrappedIntegers) {
  std::string path = ::testing::TempDir() + "/huge.json";
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    std::fputs("{\"a\": 1e400}", f);
    std::fclose(f);
  }
  EXPECT_NE(message_of([&] { read_file(path); }).find("huge.json"), std::string::npos);
  Json j = Json::parse(R"({"big": 1e30, "ok": 12, "neg": -1e19})");
  EXPECT_NE(message_of([&] { get_int(j, "big", "o"); }).find("out of range"), std::string::npos);
  EXPECT_NE(message_of([&] { get_int(j, "neg", "o"); }).find("out of range"), std::string::npos);
  EXPECT_EQ(get_int_in(j, "ok", "o", 1, 12), 12);
  EXPECT_NE(message_of([&] { get_int_in(j, "ok", "o", 1, 11); }).find("[1, 11]"),
            std::string::npos);
}

}  // namespace
}  // namespace bw::json
