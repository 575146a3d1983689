// The option machinery shared by every command: parsing the command line and the INI file,
// strict numbers, the text and JSON forms of values.
#include "config/option_table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

namespace dslide::options {

namespace {

/// Boost's "unrecognised option '--epoch'", with the options it abbreviates (abbreviations
/// are not accepted: a later option sharing the prefix would change their meaning).
std::string UnknownOptionMessage(const po::unknown_option& e, const po::options_description& all) {
  std::string msg = e.what();
  std::string name = e.get_option_name();
  while (!name.empty() && name[0] == '-') name.erase(0, 1);
  if (name.empty()) return msg;
  std::string matches;
  for (const auto& opt : all.options()) {
    const std::string& full = opt->long_name();
    if (full.size() > name.size() && full.compare(0, name.size(), name) == 0)
      matches += (matches.empty() ? "--" : " or --") + full;
  }
  if (!matches.empty())
    msg += " (options must be spelled out in full: did you mean " + matches + "?)";
  return msg;
}

/// The lines of an INI file that apply to `command`: those before any [section] header and
/// those under [command]; lines under another command's header are left out (one file can
/// hold the settings of train, eval and predict). A header that names no command is an
/// error naming the file and line.
std::string IniForCommand(std::istream& in, const std::string& path, const std::string& command) {
  static const char* const kCommands[] = {"gen",   "train",  "eval",   "predict",
                                          "bench", "export", "convert"};
  // The key of a "key = value" line ("" for blank lines and comments).
  auto key_of = [](const std::string& line) {
    const size_t a = line.find_first_not_of(" \t\r");
    if (a == std::string::npos || line[a] == '#' || line[a] == ';') return std::string();
    const size_t eq = line.find('=', a);
    if (eq == std::string::npos) return std::string();
    const size_t b = line.find_last_not_of(" \t", eq == 0 ? 0 : eq - 1);
    return b == std::string::npos || b < a ? std::string() : line.substr(a, b - a + 1);
  };
  std::vector<std::string> lines;
  std::vector<int> where;  // per line: 0 before any section, 1 in this command's, 2 another's
  int section = 0;
  std::string line;
  for (int64_t ln = 1; std::getline(in, line); ++ln) {
    const size_t a = line.find_first_not_of(" \t\r");
    if (a != std::string::npos && line[a] == '[') {
      const size_t b = line.find(']', a);
      const size_t rest = b == std::string::npos ? b : line.find_first_not_of(" \t\r", b + 1);
      const std::string name = b == std::string::npos ? "" : line.substr(a + 1, b - a - 1);
      const bool known = std::any_of(std::begin(kCommands), std::end(kCommands),
                                     [&](const char* c) { return name == c; });
      DSLIDE_CHECK(known && (rest == std::string::npos || line[rest] == '#' || line[rest] == ';'),
                   "config file '", path, "' line ", ln, ": section '", line.substr(a),
                   "' is not one of [gen], [train], [eval], [predict], [bench], [export], "
                   "[convert] (keys before any section apply to every command)");
      section = name == command ? 1 : 2;
      lines.emplace_back();  // line numbers stay those of the file
      where.push_back(2);
      continue;
    }
    lines.push_back(line);
    where.push_back(section);
  }
  // A key of the command's section overrides the same key before any section.
  std::set<std::string> own;
  for (size_t i = 0; i < lines.size(); ++i)
    if (where[i] == 1) own.insert(key_of(lines[i]));
  own.erase("");
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    const bool keep = where[i] == 1 || (where[i] == 0 && own.count(key_of(lines[i])) == 0);
    out += keep ? lines[i] + '\n' : std::string("\n");
  }
  return out;
}

}  // namespace

uint64_t ParseUnsigned(const std::string& option, const std::string& value) {
  uint64_t v = 0;
  bool ok = !value.empty();
  for (char ch : value) {
    const unsigned d = static_cast<unsigned>(ch - '0');
    if (d > 9 || v > (UINT64_MAX - d) / 10) {
      ok = false;
      break;
    }
    v = v * 10 + d;
  }
  DSLIDE_CHECK(ok, "option --", option, ": must be an integer in [0, ", UINT64_MAX, "], got '",
               value, "'");
  return v;
}

/// The shortest text that reads back as v (0.05, not 0.050000000000000003).
std::string Text(double v) {
  char buf[32];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {  // 10, not 1e+01
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}
std::string Text(bool v) { return v ? "true" : "false"; }
std::string Text(const std::string& v) { return v; }

std::string AutoOr(int v) { return v == 0 ? "auto" : std::to_string(v); }

/// Parses the command line, then the INI file named by --config (the command line wins).
/// Returns false when --help was asked for.
bool Parse(int argc, const char* const* argv, const po::options_description& desc,
           const std::string& usage, po::variables_map* vm, std::string* help) {
  po::options_description all;  // the usage line is printed above it, without Boost's ':'
  all.add_options()("help,h", "show this help")("config", po::value<std::string>(),
                                                "read options from an INI file (key = value)");
  all.add(desc);
  try {
    // No abbreviations ("--epoch" is not "--epochs"), and every token an option or its value.
    const po::parsed_options parsed =
        po::command_line_parser(argc, argv)
            .options(all)
            .style(po::command_line_style::default_style & ~po::command_line_style::allow_guessing)
            .run();
    for (const po::option& o : parsed.options) {
      if (o.position_key < 0 && !o.string_key.empty()) continue;
      const std::string arg = !o.original_tokens.empty() ? o.original_tokens.front()
                              : !o.value.empty()         ? o.value.front()
                                                         : std::string();
      throw Error(Concat("unexpected argument '", arg,
                         "' (neither an option nor an option's value; options take at most one "
                         "value, lists are comma separated)"));
    }
    po::store(parsed, *vm);
    if (vm->count("help")) {
      std::ostringstream os;
      os << usage << "\n" << all;
      *help = os.str();
      return false;
    }
    if (vm->count("config")) {
      const std::string path = (*vm)["config"].as<std::string>();
      std::error_code ec;
      DSLIDE_CHECK(!std::filesystem::is_directory(path, ec), "option --config: '", path,
                   "' is a folder; give an INI file (key = value lines)");
      std::ifstream in(path);
      DSLIDE_CHECK(in.good(), "option --config: cannot open '", path, "'");
      const std::string command = argc > 0 ? argv[0] : "";
      const std::string text = IniForCommand(in, path, command);
      std::istringstream body(text);
      try {
        po::store(po::parse_config_file(body, desc, /*allow_unregistered=*/false), *vm);
      } catch (const po::unknown_option& e) {
        // Name the line, and where it is a key before any section (which applies to every
        // command), say where a key of one command goes.
        std::string key = e.get_option_name();
        key.erase(0, key.find_first_not_of('-'));
        std::istringstream lines(text);
        std::string line;
        int64_t at = 0, ln = 0;
        while (at == 0 && std::getline(lines, line)) {
          ++ln;
          const size_t a = line.find_first_not_of(" \t");
          if (a != std::string::npos && line.compare(a, key.size(), key) == 0 &&
              line.find_first_not_of(" \t", a + key.size()) == line.find('=', a))
            at = ln;
        }
        bool before_sections = at > 0;  // no [section] header above the line
        std::ifstream again(path);
        for (int64_t i = 1; before_sections && i < at && std::getline(again, line); ++i) {
          const size_t a = line.find_first_not_of(" \t\r");
          before_sections = a == std::string::npos || line[a] != '[';
        }
        const std::string unknown = UnknownOptionMessage(e, all);
        const bool misspelt = unknown.find("did you mean") != std::string::npos;
        throw Error(Concat("config file '", path, "'", at > 0 ? Concat(" line ", at) : "", ": ",
                           unknown, ": not an option of ", command,
                           before_sections && !misspelt
                               ? " (keys before any section apply to every command: put a key "
                                 "of one command under its section, such as [train])"
                               : ""));
      } catch (const po::error& e) {
        throw Error(Concat("config file '", path, "': ", e.what()));
      }
    }
    po::notify(*vm);
  } catch (const po::unknown_option& e) {
    throw Error(UnknownOptionMessage(e, all));
  } catch (const po::error& e) {
    throw Error(e.what());
  }
  return true;
}

/// A string as a JSON string literal.
std::string JsonString(const std::string& v) {
  std::string out = "\"";
  for (char ch : v) {
    if (ch == '"' || ch == '\\') out += '\\';
    if (static_cast<unsigned char>(ch) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", ch);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}
std::string Json(const std::string& v) { return JsonString(v); }
std::string Json(bool v) { return v ? "true" : "false"; }

double ParseNumber(const std::string& option, const std::string& value) {
  char* end = nullptr;
  const double v = value.empty() ? 0.0 : std::strtod(value.c_str(), &end);
  DSLIDE_CHECK(!value.empty() && end == value.c_str() + value.size(), "option --", option,
               ": invalid value '", value, "' (expected a number)");
  return v;
}

int ParseAutoInt(const std::string& option, const std::string& value) {
  if (value == "auto") return 0;
  std::istringstream is(value);
  int v = 0;
  is >> v;
  DSLIDE_CHECK(!is.fail() && is.eof() && v >= 1, "option --", option, ": invalid value '", value,
               "' (expected auto or a positive integer)");
  return v;
}

double ParseAutoNumber(const std::string& option, const std::string& value,
                       bool (*in_range)(double), const char* expected) {
  if (value == "auto") return 0;
  std::istringstream is(value);
  double v = 0;
  is >> v;
  DSLIDE_CHECK(!is.fail() && is.eof() && in_range(v), "option --", option, ": invalid value '",
               value, "' (expected auto or ", expected, ")");
  return v;
}

bool ParseBool(const std::string& option, const std::string& value) {
  if (value == "true" || value == "1" || value == "yes" || value == "on") return true;
  if (value == "false" || value == "0" || value == "no" || value == "off") return false;
  throw Error(
      Concat("option --", option, ": invalid value '", value, "' (expected true or false)"));
}

}  // namespace dslide::options
