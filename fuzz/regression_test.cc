// Every input kept in fuzz/regressions/<target>/ (a crasher the fuzzer found, fixed since) goes
// through the target's own harness (<target>_fuzz.cc): it must return, which means the parser
// returned or threw ConfigError (the harness swallows only that). Any other exception that leaves
// the harness fails this input's check, named by its file, and the loop goes on to the others; an
// abort, a trap of the harness's own checks or (under the sanitizer build) a memory error kills
// the test process, which fails too. The file names say what each one found.
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
    // libFuzzer reserves non-zero return values; what can fail is an escaping exception.
    EXPECT_NO_THROW(
        LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()))
        << "a kept input escaped the harness with an exception other than ConfigError";
    ++inputs;
  }
  EXPECT_GT(inputs, 0) << "no inputs in " << BW_REGRESSIONS;
}

}  // namespace
