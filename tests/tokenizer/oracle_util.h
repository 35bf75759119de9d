// The oracle's data for the tokenizer and dataprep tests: oracle.py (Hugging Face `tokenizers`)
// run once per script and `tokenizers` version into a cache folder, under a lock so that
// parallel test processes wait for one build instead of each making their own; and the readers
// and comparison of its files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace bw::tokenizer::testing {

// The folder holding the oracle's outputs (oracle.py "build"), made if needed. On any problem
// (BW_PYTHON missing, no `tokenizers`, the script failing) returns "" and sets *error to one line
// saying what to install or what failed.
std::string oracle_dir(std::string* error);

// Runs `python oracle.py args...`; "" on success, else the error (with the output's tail).
std::string run_oracle(const std::vector<std::string>& args);

std::vector<std::string> read_docs(const std::string& path);
// Writes `docs` in the corpus.bin format that read_docs and `oracle.py encode` read.
void write_docs(const std::string& path, const std::vector<std::string>& docs);
std::vector<std::vector<uint32_t>> read_ids(const std::string& path);

// "" when equal, else the first mismatches: document, position, our ids and theirs around it,
// and the text there (found by decoding their ids before it with `tok`).
std::string compare_ids(const std::vector<std::vector<uint32_t>>& ours,
                        const std::vector<std::vector<uint32_t>>& theirs,
                        const std::vector<std::string>& docs, const Tokenizer& tok);

// A document's bytes for a message: printable ASCII as is, the rest escaped, cut to `max`.
std::string escape(const std::string& s, size_t max = 160);

}  // namespace bw::tokenizer::testing
