#include "oracle_util.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace bw::tokenizer::testing {
namespace {
namespace fs = std::filesystem;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs argv with stdout and stderr into `log`; returns the exit status (-1: could not start).
int run(const std::vector<std::string>& argv, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string tail(const std::string& s, size_t n = 2000) {
  return s.size() <= n ? s : "..." + s.substr(s.size() - n);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// The `tokenizers` version of BW_PYTHON, or "" with *error set.
std::string tokenizers_version(std::string* error) {
  const std::string python = BW_PYTHON;
  const std::string fix = fmt::format(
      "`python3 -m venv .venv && .venv/bin/pip install tokenizers` in the source folder "
      "(bash scripts/setup.sh does it), or configure with -DBW_PYTHON=<a python with tokenizers>");
  if (access(python.c_str(), X_OK) != 0) {
    *error = fmt::format("the tokenizer oracle needs BW_PYTHON={}, which does not exist: run {}",
                         python, fix);
    return "";
  }
  const std::string log = fs::path(BW_ORACLE_CACHE).string() + fmt::format(".version.{}", getpid());
  fs::create_directories(fs::path(log).parent_path());
  const int rc =
      run({python, "-c", "import tokenizers, sys; sys.stdout.write(tokenizers.__version__)"}, log);
  const std::string out = slurp(log);
  fs::remove(log);
  if (rc != 0) {
    *error = fmt::format(
        "the tokenizer oracle needs Hugging Face `tokenizers` in {}, which cannot "
        "import it: run `{} -m pip install tokenizers` (or {})",
        python, python, fix);
    return "";
  }
  return out;
}

}  // namespace

std::string run_oracle(const std::vector<std::string>& args) {
  std::string error;
  if (tokenizers_version(&error).empty()) return error;
  std::vector<std::string> argv = {BW_PYTHON, BW_ORACLE_SCRIPT};
  argv.insert(argv.end(), args.begin(), args.end());
  const std::string log = fmt::format("{}.run.{}.log", BW_ORACLE_CACHE, getpid());
  const int rc = run(argv, log);
  const std::string out = slurp(log);
  fs::remove(log);
  if (rc == 0) return "";
  return fmt::format("oracle.py {} failed (exit status {}):\n{}", fmt::join(args, " "), rc,
                     tail(out));
}

std::string oracle_dir(std::string* error) {
  const std::string version = tokenizers_version(error);
  if (version.empty()) return "";
  const std::string key =
      fmt::format("{:016x}", fnv1a(slurp(BW_ORACLE_SCRIPT) + "\n" + version + "\n" + BW_PYTHON));
  const fs::path root = BW_ORACLE_CACHE;
  const fs::path dir = root / fmt::format("tokenizers-{}-{}", version, key);
  if (fs::exists(dir / "done")) return dir.string();
  fs::create_directories(root);
  // One builder at a time; the others wait here and then find it done.
  const int lock = open((root / ".lock").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  flock(lock, LOCK_EX);
  std::string result = dir.string();
  if (!fs::exists(dir / "done")) {
    const fs::path tmp = root / fmt::format("{}.tmp", key);
    fs::remove_all(tmp);
    const std::string err = run_oracle({"build", tmp.string()});
    if (!err.empty()) {
      *error = err;
      result = "";
    } else {
      fs::remove_all(dir);
      fs::rename(tmp, dir);
    }
  }
  flock(lock, LOCK_UN);
  close(lock);
  return result;
}

namespace {

uint32_t u32(const std::string& s, size_t* at) {
  uint32_t v = 0;
  std::memcpy(&v, s.data() + *at, 4);
  *at += 4;
  return v;
}

}  // namespace

std::vector<std::string> read_docs(const std::string& path) {
  const std::string s = slurp(path);
  std::vector<std::string> docs;
  if (s.size() < 12 || s.compare(0, 8, "BWCORPUS") != 0) return docs;
  size_t at = 8;
  const uint32_t n = u32(s, &at);
  docs.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t len = u32(s, &at);
    docs.push_back(s.substr(at, len));
    at += len;
  }
  return docs;
}

void write_docs(const std::string& path, const std::vector<std::string>& docs) {
  std::ofstream out(path, std::ios::binary);
  const auto u32 = [&](uint32_t v) { out.write(reinterpret_cast<const char*>(&v), 4); };
  out.write("BWCORPUS", 8);
  u32(static_cast<uint32_t>(docs.size()));
  for (const auto& d : docs) {
    u32(static_cast<uint32_t>(d.size()));
    out.write(d.data(), static_cast<std::streamsize>(d.size()));
  }
}

std::vector<std::vector<uint32_t>> read_ids(const std::string& path) {
  const std::string s = slurp(path);
  std::vector<std::vector<uint32_t>> out;
  if (s.size() < 4) return out;
  size_t at = 0;
  const uint32_t n = u32(s, &at);
  out.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t len = u32(s, &at);
    out[i].resize(len);
    std::memcpy(out[i].data(), s.data() + at, 4 * size_t{len});
    at += 4 * size_t{len};
  }
  return out;
}

std::string escape(const std::string& s, size_t max) {
  std::string out;
  for (unsigned char c : s.substr(0, max)) {
    if (c >= 0x20 && c < 0x7F && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  if (s.size() > max) out += "...";
  return out;
}

std::string compare_ids(const std::vector<std::vector<uint32_t>>& ours,
                        const std::vector<std::vector<uint32_t>>& theirs,
                        const std::vector<std::string>& docs, const Tokenizer& tok) {
  std::string out;
  if (ours.size() != theirs.size())
    out += fmt::format("{} documents here, {} from tokenizers\n", ours.size(), theirs.size());
  size_t bad = 0;
  for (size_t d = 0; d < std::min(ours.size(), theirs.size()); ++d) {
    const auto& a = ours[d];
    const auto& b = theirs[d];
    if (a == b) continue;
    if (++bad > 5) continue;
    size_t pos = 0;
    while (pos < a.size() && pos < b.size() && a[pos] == b[pos]) ++pos;
    const size_t from = pos >= 3 ? pos - 3 : 0;
    const auto window = [&](const std::vector<uint32_t>& v) {
      std::vector<uint32_t> w(v.begin() + static_cast<ptrdiff_t>(std::min(from, v.size())),
                              v.begin() + static_cast<ptrdiff_t>(std::min(pos + 8, v.size())));
      return fmt::format("{}", fmt::join(w, " "));
    };
    const std::string doc = d < docs.size() ? docs[d] : "";
    const size_t offset =
        tok.decode_bytes(std::span<const uint32_t>(b.data(), std::min(pos, b.size()))).size();
    const size_t at = std::min(offset >= 16 ? offset - 16 : 0, doc.size());
    out += fmt::format(
        "document {} ({} bytes): first difference at id {} of {} here / {} there, near byte "
        "{}\n  ours   [{}..]: {}\n  theirs [{}..]: {}\n  text from byte {}: {}\n",
        d, doc.size(), pos, a.size(), b.size(), offset, from, window(a), from, window(b), at,
        escape(doc.substr(at), 80));
  }
  if (bad > 0) out += fmt::format("{} of {} documents differ\n", bad, theirs.size());
  return out;
}

}  // namespace bw::tokenizer::testing
