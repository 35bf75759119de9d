#include "schedule/csv.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/file_io.h"

namespace bw::schedule {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

[[noreturn]] void bad_cell(const CsvOptions& o, int line, int col, std::string_view cell,
                           std::string_view why) {
  throw ConfigError(
      fmt::format("{}:{}:{}: '{}' is not an action ({}); expected "
                  "<chunk><KIND><microbatch> like 3F1 or 5SEND_B2",
                  o.source, line, col, cell, why));
}

// Appends the actions of one cell (one action, or a PyTorch OVERLAP_F_B pair).
void parse_cell(std::string_view cell, const CsvOptions& o, int line, int col,
                std::vector<Action>& out) {
  if (cell.front() == '(') {
    const auto close = cell.find(')');
    if (close == std::string_view::npos) bad_cell(o, line, col, cell, "unclosed '('");
    if (trim(cell.substr(close + 1)) != "OVERLAP_F_B")
      bad_cell(o, line, col, cell, "only (a;b)OVERLAP_F_B groups are understood");
    std::string_view inner = cell.substr(1, close - 1);
    std::vector<Action> parts;
    size_t start = 0;
    while (start <= inner.size()) {
      auto end = inner.find(';', start);
      if (end == std::string_view::npos) end = inner.size();
      auto part = trim(inner.substr(start, end - start));
      if (!part.empty()) {
        auto a = parse_action(part);
        if (!a) bad_cell(o, line, col, part, "inside an OVERLAP_F_B group");
        if (!is_compute(a->kind))
          bad_cell(o, line, col, cell, "an OVERLAP_F_B group holds compute actions only");
        parts.push_back(*a);
      }
      start = end + 1;
    }
    if (parts.size() != 2)
      bad_cell(o, line, col, cell,
               fmt::format("an OVERLAP_F_B group pairs two compute actions, this one has {}",
                           parts.size()));
    out.push_back({ActionKind::OVERLAP_F_B, -1, -1});
    out.insert(out.end(), parts.begin(), parts.end());
    return;
  }
  auto a = parse_action(cell);
  if (!a) {
    std::string why = "unknown kind or missing number";
    size_t i = 0;
    while (i < cell.size() && std::isdigit(static_cast<unsigned char>(cell[i]))) ++i;
    size_t j = cell.size();
    while (j > i && std::isdigit(static_cast<unsigned char>(cell[j - 1]))) --j;
    const auto kind = parse_kind(cell.substr(i, j - i));
    if (i == 0)
      why = "it does not start with a chunk number";
    else if (kind && is_chunk_action(*kind))
      why = fmt::format("{} names a chunk only, without a microbatch: {}{}", kind_name(*kind),
                        cell.substr(0, i), kind_name(*kind));
    else if (!std::isdigit(static_cast<unsigned char>(cell.back())))
      why = "it does not end with a microbatch number";
    bad_cell(o, line, col, cell, why);
  }
  out.push_back(*a);
}

}  // namespace

Schedule read_csv(std::istream& in, const CsvOptions& options) {
  std::vector<std::vector<Action>> rows;
  std::vector<std::vector<std::pair<int, int>>> where;  // (line, col) of each action
  std::string text;
  int line_no = 0;
  int last_nonempty = 0;
  while (std::getline(in, text)) {
    ++line_no;
    std::vector<Action> row;
    std::vector<std::pair<int, int>> row_where;
    std::string_view rest(text);
    size_t offset = 0;
    bool any = false;
    while (true) {
      const auto comma = rest.find(',', offset);
      const auto end = comma == std::string_view::npos ? rest.size() : comma;
      std::string_view raw = rest.substr(offset, end - offset);
      std::string_view cell = trim(raw);
      if (!cell.empty()) {
        const int col = static_cast<int>(offset + (cell.data() - raw.data())) + 1;
        const size_t before = row.size();
        parse_cell(cell, options, line_no, col, row);
        for (size_t i = before; i < row.size(); ++i) row_where.emplace_back(line_no, col);
        any = true;
      }
      if (comma == std::string_view::npos) break;
      offset = comma + 1;
    }
    if (any) last_nonempty = line_no;
    rows.push_back(std::move(row));
    where.push_back(std::move(row_where));
  }
  rows.resize(last_nonempty);
  where.resize(last_nonempty);
  if (rows.empty())
    throw ConfigError(fmt::format("{}: no actions (an empty schedule)", options.source));

  if (rows.size() > static_cast<size_t>(kMaxCsvDevices))
    throw ConfigError(fmt::format("{}: {} rows (devices), more than the limit of {}",
                                  options.source, rows.size(), kMaxCsvDevices));
  Schedule s;
  s.kind = options.kind;
  s.num_devices = static_cast<int>(rows.size());
  int max_chunk = -1, max_mb = -1;
  for (size_t d = 0; d < rows.size(); ++d)
    for (size_t k = 0; k < rows[d].size(); ++k) {
      const Action& a = rows[d][k];
      // Ids size the validator's and simulator's tables: bound them before anything is sized.
      if (a.chunk < -1 || a.chunk >= kMaxCsvChunks || a.microbatch < -1 ||
          a.microbatch >= kMaxCsvMicrobatches)
        throw ConfigError(fmt::format(
            "{}:{}:{}: {} has chunk {} and microbatch {}; the limits are chunk < {} and "
            "microbatch < {}",
            options.source, where[d][k].first, where[d][k].second, to_string(a), a.chunk,
            a.microbatch, kMaxCsvChunks, kMaxCsvMicrobatches));
      max_chunk = std::max(max_chunk, a.chunk);  // -1 for an OVERLAP_F_B marker
      max_mb = std::max(max_mb, a.microbatch);
    }
  if (int64_t{max_chunk + 1} * (max_mb + 1) > kMaxCsvChunkMicrobatches)
    throw ConfigError(fmt::format(
        "{}: {} chunks x {} microbatches = {} (chunk, microbatch) pairs, more than the limit of {}",
        options.source, max_chunk + 1, max_mb + 1, int64_t{max_chunk + 1} * (max_mb + 1),
        kMaxCsvChunkMicrobatches));
  if (options.chunk_device) {
    s.chunk_device = *options.chunk_device;
    s.num_chunks = static_cast<int>(s.chunk_device.size());
    if (max_chunk >= s.num_chunks)
      throw ConfigError(fmt::format("{}: actions name chunk {} but the placement has {} chunks",
                                    options.source, max_chunk, s.num_chunks));
  } else {
    s.num_chunks = max_chunk + 1;
    s.chunk_device.assign(s.num_chunks, -1);
    for (int d = 0; d < s.num_devices; ++d)
      for (size_t k = 0; k < rows[d].size(); ++k) {
        const Action& a = rows[d][k];
        if (!is_compute(a.kind)) continue;
        int& placed = s.chunk_device[a.chunk];
        if (placed >= 0 && placed != d)
          throw ConfigError(fmt::format(
              "{}:{}:{}: {} runs on device {} but chunk {} already ran on device {}; a chunk "
              "lives on one device",
              options.source, where[d][k].first, where[d][k].second, to_string(a), d, a.chunk,
              placed));
        placed = d;
      }
    for (int c = 0; c < s.num_chunks; ++c)
      if (s.chunk_device[c] < 0)
        throw ConfigError(fmt::format(
            "{}: chunk {} never runs a compute action, so its device is unknown; pass the "
            "placement",
            options.source, c));
  }
  s.num_microbatches = max_mb + 1;
  s.actions = std::move(rows);
  s.chunk_stage = options.chunk_stage;
  return s;
}

Schedule read_csv_file(const std::string& path, CsvOptions options) {
  std::istringstream in(io::read_file(path, io::kMaxTableBytes, "schedule CSV"));
  if (options.source == "csv") options.source = path;
  return read_csv(in, options);
}

void write_csv(std::ostream& out, const Schedule& s) {
  for (const auto& list : s.actions) {
    for (size_t k = 0; k < list.size(); ++k) {
      if (k) out << ',';
      if (list[k].kind == ActionKind::OVERLAP_F_B && k + 2 < list.size()) {
        out << '(' << to_string(list[k + 1]) << ';' << to_string(list[k + 2]) << ")OVERLAP_F_B";
        k += 2;
      } else {
        out << to_string(list[k]);
      }
    }
    out << '\n';
  }
}

std::string to_csv(const Schedule& s) {
  std::ostringstream out;
  write_csv(out, s);
  return out.str();
}

void write_csv_file(const std::string& path, const Schedule& s) {
  io::write_file(path, to_csv(s), "schedule CSV");
}

}  // namespace bw::schedule
