#include "tokenizer/pattern.h"

#include <fmt/format.h>

#include <optional>

#include "core/error.h"
#include "tokenizer/unicode_delta.h"

namespace bw::tokenizer {
namespace {

std::string delta_items(std::string_view category) {
  std::string out;
  for (const CodeRange& r : unicode_delta(category)) {
    out += r.first == r.last
               ? fmt::format("\\x{{{:X}}}", static_cast<uint32_t>(r.first))
               : fmt::format("\\x{{{:X}}}-\\x{{{:X}}}", static_cast<uint32_t>(r.first),
                             static_cast<uint32_t>(r.last));
  }
  return out;
}

// The class items (without brackets) of a general category with its delta.
std::string category_items(std::string_view category) {
  return fmt::format("\\p{{{}}}{}", category, delta_items(category));
}

std::string word_items() {
  return category_items("L") + category_items("M") + category_items("Nd") + category_items("Pc");
}

class Translator {
 public:
  Translator(std::string_view p, std::string_view where) : p_(p), where_(where) {}

  std::string run() {
    while (i_ < p_.size()) {
      const char c = p_[i_];
      if (c == '\\') {
        escape(false);
      } else if (c == '[') {
        bracket_class();
      } else if (c == '(' && i_ + 1 < p_.size() && p_[i_ + 1] == '?') {
        options();
      } else {
        out_ += c;
        ++i_;
      }
    }
    return out_;
  }

 private:
  [[noreturn]] void unsupported(std::string_view what) const {
    throw ConfigError(fmt::format(
        "{}: the regex construct {} at offset {} of /{}/ is not supported (it has no exact "
        "PCRE2 form); supported: the syntax Oniguruma and PCRE2 share, with \\s \\d \\w \\h and "
        "\\p{{..}} translated",
        where_, what, i_, p_));
  }

  // A property name after \p or \P: "{L}", "{^L}" or one letter; returns (name, negated).
  std::pair<std::string, bool> property(size_t at, size_t* end) const {
    if (at < p_.size() && p_[at] == '{') {
      const size_t close = p_.find('}', at);
      if (close == std::string_view::npos) unsupported("an unterminated \\p{");
      std::string name(p_.substr(at + 1, close - at - 1));
      bool neg = false;
      if (!name.empty() && name[0] == '^') {
        neg = true;
        name.erase(0, 1);
      }
      *end = close + 1;
      return {name, neg};
    }
    if (at >= p_.size()) unsupported("a \\p without a name");
    *end = at + 1;
    return {std::string(1, p_[at]), false};
  }

  // The replacement of a one-letter escape outside / inside a bracket class; nullopt: copy it.
  static std::optional<std::string> outside(char e) {
    switch (e) {
      case 's':
        return "\\p{White_Space}";
      case 'S':
        return "\\P{White_Space}";
      case 'd':
        return "[" + category_items("Nd") + "]";
      case 'D':
        return "[^" + category_items("Nd") + "]";
      case 'w':
        return "[" + word_items() + "]";
      case 'W':
        return "[^" + word_items() + "]";
      case 'h':
        return "[0-9a-fA-F]";
      case 'H':
        return "[^0-9a-fA-F]";
      default:
        return std::nullopt;
    }
  }
  std::optional<std::string> inside(char e) const {
    switch (e) {
      case 's':
        return "\\p{White_Space}";
      case 'S':
        return "\\P{White_Space}";
      case 'd':
        return category_items("Nd");
      case 'w':
        return word_items();
      case 'h':
        return "0-9a-fA-F";
      case 'D':
      case 'W':
      case 'H':
        unsupported(fmt::format("\\{} inside a bracket class", e));
      default:
        return std::nullopt;
    }
  }

  // \p{X} or \P{X}: a general category with a delta becomes a class (or its items inside one).
  void property_escape(bool in_class) {
    const char e = p_[i_ + 1];
    size_t end = 0;
    auto [name, neg] = property(i_ + 2, &end);
    neg = neg != (e == 'P');
    if (unicode_delta(name).empty()) {
      out_.append(p_.substr(i_, end - i_));
    } else if (!in_class) {
      out_ += (neg ? "[^" : "[") + category_items(name) + "]";
    } else if (neg) {
      unsupported(fmt::format("\\P{{{}}} inside a bracket class", name));
    } else {
      out_ += category_items(name);
    }
    i_ = end;
  }

  // An escape; `in_class` inside a bracket class.
  void escape(bool in_class) {
    if (i_ + 1 >= p_.size()) {
      out_ += '\\';
      ++i_;
      return;
    }
    const char e = p_[i_ + 1];
    if (e == 'p' || e == 'P') return property_escape(in_class);
    if (e == 'Q') {
      const size_t close = p_.find("\\E", i_ + 2);
      const size_t end = close == std::string_view::npos ? p_.size() : close + 2;
      out_.append(p_.substr(i_, end - i_));
      i_ = end;
      return;
    }
    if (auto r = in_class ? inside(e) : outside(e)) {
      out_ += *r;
    } else {
      out_.append(p_.substr(i_, 2));
    }
    i_ += 2;
  }

  // A bracket class [...]: copied item by item, with the escapes translated in place.
  void bracket_class() {
    out_ += '[';
    ++i_;
    if (i_ < p_.size() && p_[i_] == '^') {
      out_ += '^';
      ++i_;
    }
    if (i_ < p_.size() && p_[i_] == ']') {  // a leading ']' is a literal
      out_ += ']';
      ++i_;
    }
    while (i_ < p_.size() && p_[i_] != ']') {
      const char c = p_[i_];
      if (c == '[') {
        if (i_ + 1 < p_.size() && p_[i_ + 1] == ':') {  // POSIX [:alpha:]
          const size_t close = p_.find(":]", i_ + 2);
          if (close == std::string_view::npos) unsupported("an unterminated [:");
          out_.append(p_.substr(i_, close + 2 - i_));
          i_ = close + 2;
          continue;
        }
        unsupported("a nested bracket class");
      }
      if (c == '&' && i_ + 1 < p_.size() && p_[i_ + 1] == '&')
        unsupported("a class intersection &&");
      if (c == '\\') {
        escape(true);
      } else {
        out_ += c;
        ++i_;
      }
    }
    if (i_ >= p_.size()) unsupported("an unterminated bracket class");
    out_ += ']';
    ++i_;
  }

  // "(?" followed by option letters: Ruby's m (dot matches newline) is PCRE2's s.
  void options() {
    size_t j = i_ + 2;
    while (j < p_.size() && (p_[j] == 'i' || p_[j] == 'm' || p_[j] == 'x' || p_[j] == '-')) ++j;
    if (j == i_ + 2 || j >= p_.size() || (p_[j] != ')' && p_[j] != ':')) {
      out_ += "(?";
      i_ += 2;
      return;
    }
    out_ += "(?";
    for (size_t k = i_ + 2; k < j; ++k) out_ += p_[k] == 'm' ? 's' : p_[k];
    i_ = j;
  }

  std::string_view p_;
  std::string_view where_;
  size_t i_ = 0;
  std::string out_;
};

}  // namespace

std::string onig_to_pcre2(std::string_view pattern, std::string_view where) {
  return Translator(pattern, where).run();
}

}  // namespace bw::tokenizer
