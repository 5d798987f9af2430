// What each edge does to the core's words and to the user's: option names in resource-limit
// messages (word_options), byte counts on the command line (io::parse_bytes), and the profile
// formats named when the other one is given.
#include <gtest/gtest.h>

#include <string>

#include "io/byte_units.hpp"
#include "io/json_io.hpp"
#include "remat/errors.hpp"

namespace remat {
namespace {

TEST(WordOptions, EachEdgeNamesItsOwnOptions) {
  const std::string core =
      "dp needs 9 bytes; use {solver=sliding_hirschberg} or {solver=exact} (or raise "
      "{max_planner_bytes})";
  EXPECT_EQ(word_options(core, OptionStyle::kCommandLine),
            "dp needs 9 bytes; use --solver sliding_hirschberg or --solver exact (or raise "
            "--max-planner-bytes)");
  EXPECT_EQ(word_options(core, OptionStyle::kPython),
            "dp needs 9 bytes; use solver=\"sliding_hirschberg\" or solver=\"exact\" (or raise "
            "max_planner_bytes=)");
}

TEST(WordOptions, OtherBracesStayAsTheyAre) {
  for (const std::string text :
       {"a {b c} d", "{", "}", "{}", "x {Solver=exact}", "{a=}", "{a", "{{a}"}) {
    const std::string expected = text == "{{a}" ? "{--a" : text;
    EXPECT_EQ(word_options(text, OptionStyle::kCommandLine), expected) << text;
  }
}

std::string bytes_error(const std::string& text) {
  try {
    io::parse_bytes(text, "budget");
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ParseBytes, ReadsUnitsAsThePythonPackageDoes) {
  EXPECT_EQ(io::parse_bytes("0", "budget"), 0);
  EXPECT_EQ(io::parse_bytes("2147483648", "budget"), 2147483648);
  EXPECT_EQ(io::parse_bytes("30MB", "budget"), 30000000);
  EXPECT_EQ(io::parse_bytes(" 30 mb ", "budget"), 30000000);
  EXPECT_EQ(io::parse_bytes("1.5GiB", "budget"), 1610612736);
  EXPECT_EQ(io::parse_bytes(".5KB", "budget"), 500);
  EXPECT_EQ(io::parse_bytes("2e3kib", "budget"), 2048000);
  EXPECT_EQ(io::parse_bytes("7b", "budget"), 7);
  EXPECT_EQ(io::parse_bytes("1.9", "budget"), 1);  // rounded down
  EXPECT_EQ(io::parse_bytes("1TB", "budget"), 1000000000000);
  EXPECT_EQ(io::parse_bytes("1TiB", "budget"), 1099511627776);
  EXPECT_EQ(io::parse_bytes("5\u00a0MB", "budget"), 5000000);  // Unicode space, as \s in Python
}

TEST(ParseBytes, ReadsDecimalsExactly) {
  // Through a double, 1.005 KB is 1004.9999999999999 bytes and 0.29 MB 289999.99999999994.
  EXPECT_EQ(io::parse_bytes("1.005KB", "budget"), 1005);
  EXPECT_EQ(io::parse_bytes("0.29MB", "budget"), 290000);
  EXPECT_EQ(io::parse_bytes("4611686018427387903", "budget"), 4611686018427387903);  // 2^62 - 1
  EXPECT_EQ(io::parse_bytes("000123.4560e1", "budget"), 1234);
  EXPECT_EQ(io::parse_bytes("1" + std::string(40, '0') + "e-40TiB", "budget"), 1099511627776);
  EXPECT_EQ(io::parse_bytes("0.9999999999999999999999", "budget"), 0);
  EXPECT_EQ(io::parse_bytes("1e-999999999999", "budget"), 0);
  EXPECT_EQ(bytes_error("1e999999999999"), "budget: '1e999999999999' is too large");
}

TEST(ParseBytes, ErrorsNameTheFieldAndQuoteTheText) {
  EXPECT_EQ(bytes_error("30 XB"),
            "budget: cannot read '30 XB' as bytes (write e.g. 2147483648, '2GiB', '1.5GB', "
            "'512MiB')");
  for (const char* bad :
       {"", "MB", "-5", "+5", "5.", "1e", "1.2.3", "1,5GB", "0x10", "inf", "5 M B"}) {
    EXPECT_NE(bytes_error(bad).find("budget: cannot read"), std::string::npos) << bad;
  }
  EXPECT_EQ(bytes_error("1e999"), "budget: '1e999' is too large");
  EXPECT_EQ(bytes_error("4611686018427387904"), "budget: '4611686018427387904' is too large");
  EXPECT_EQ(bytes_error("5e18"), "budget: '5e18' is too large");
  EXPECT_EQ(bytes_error("it's"),
            "budget: cannot read \"it's\" as bytes (write e.g. 2147483648, '2GiB', '1.5GB', "
            "'512MiB')");
}

std::string profile_error(bool eager, const std::string& text) {
  try {
    if (eager) {
      io::read_eager_profile(text);
    } else {
      io::read_profile(text);
    }
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Profiles, TheOtherFormatIsNamed) {
  const std::string chain = R"({"layers": [{"activation_bytes": 4, "forward_time": 1}]})";
  const std::string eager =
      R"({"input_bytes": 4, "layers": [{"saved_bytes": 4, "output_bytes": 4, "forward_time": 1}]})";
  EXPECT_EQ(profile_error(false, chain), "(no error)");
  EXPECT_EQ(profile_error(true, eager), "(no error)");
  EXPECT_NE(profile_error(true, chain).find("input: this is a chain profile"), std::string::npos);
  EXPECT_NE(profile_error(false, eager).find("input: this is an eager profile"), std::string::npos);
  // A layer with neither format's fields is still a missing field, by name.
  EXPECT_NE(profile_error(true, R"({"input_bytes": 1, "layers": [{"forward_time": 1}]})")
                .find("layers[0]: saved_bytes is missing"),
            std::string::npos);
}

}  // namespace
}  // namespace remat
