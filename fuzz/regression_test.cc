// Every input kept in fuzz/regressions/<target>/ (a crasher the fuzzer found, fixed since) goes
// through the target's own harness (<target>_fuzz.cc): it must return, which means the parser
// returned or threw ConfigError; an abort, another exception or (under the sanitizer build) a
// memory error fails the test. The file names say what each one found.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {
namespace fs = std::filesystem;

TEST(FuzzRegression, EveryKeptInputIsHandled) {
  int inputs = 0;
  for (const auto& entry : fs::directory_iterator(BW_REGRESSIONS)) {
    if (!entry.is_regular_file() || entry.path().filename().string().front() == '.') continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string bytes = ss.str();
    SCOPED_TRACE(entry.path().filename().string());
    EXPECT_EQ(LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
              0);
    ++inputs;
  }
  EXPECT_GT(inputs, 0) << "no inputs in " << BW_REGRESSIONS;
}

}  // namespace
