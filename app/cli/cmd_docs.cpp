// The installed documentation of stagecraft-cli, made from its command table (main.cpp) so it
// cannot drift from the program: man pages (`help --man [COMMAND]`) and the bash completion
// (`help --bash-completion`). The build writes them into the packages (app/CMakeLists.txt).
#include <cctype>
#include <cstdio>
#include <set>
#include <string>

#include "commands.h"

namespace stagecraft::cli {

namespace {

// Text for roff: backslashes and hyphens escaped, no line starting with a control character.
std::string roff(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\') {
      out += "\\e";
    } else if (c == '-') {
      out += "\\-";
    } else {
      out += c;
    }
  }
  if (!out.empty() && (out[0] == '.' || out[0] == '\'')) out = "\\&" + out;
  return out;
}

// The options a usage line names: every "--word" in it.
std::set<std::string> options_of(const std::string& usage) {
  std::set<std::string> out;
  for (size_t at = usage.find("--"); at != std::string::npos; at = usage.find("--", at + 2)) {
    size_t end = at + 2;
    while (end < usage.size() && (std::isalnum(static_cast<unsigned char>(usage[end])) || usage[end] == '-')) ++end;
    if (end > at + 2) out.insert(usage.substr(at, end - at));
  }
  return out;
}

void common_sections() {
  std::printf(".SH EXIT STATUS\n0 success, 1 the operation failed, 2 invalid input (file, YAML, key, value or option).\n"
              "Errors go to standard error, one line per problem, each naming what to fix.\n"
              ".SH ENVIRONMENT\n.TP\n.B STAGECRAFT_DB\nthe run history (default \\fI$XDG_DATA_HOME/stagecraft/runs.sqlite\\fR).\n"
              ".TP\n.B STAGECRAFT_WORKER\nthe worker program for this machine's ranks (default: stagecraft\\-worker beside "
              "stagecraft\\-cli, \\fI/usr/bin/stagecraft\\-worker\\fR when installed).\n"
              ".SH FILES\n.TP\n.I /usr/share/stagecraft/configs\nexample run configurations.\n");
}

}  // namespace

int print_man(const std::string& command) {
  const char* version = STAGECRAFT_VERSION;
  for (const auto& c : commands()) {
    if (command != c.name) continue;
    std::printf(".TH STAGECRAFT\\-CLI\\-%s 1 \"\" \"Stagecraft %s\" \"User Commands\"\n", roff(c.name).c_str(), version);
    std::printf(".SH NAME\nstagecraft\\-cli\\-%s \\- %s\n", roff(c.name).c_str(), roff(c.summary).c_str());
    std::printf(".SH SYNOPSIS\n.B stagecraft\\-cli\n%s\n", roff(c.usage).c_str());
    std::printf(".SH DESCRIPTION\n%s\n", roff(c.summary).c_str());
    std::printf(".PP\nkey=value arguments override keys of the configuration (`stagecraft\\-cli plan CONFIG parallel.tp=2`); "
                "the keys are listed in \\fI/usr/share/doc/stagecraft/docs/configuration.md\\fR.\n");
    common_sections();
    std::printf(".SH SEE ALSO\n.BR stagecraft\\-cli (1)\n");
    return 0;
  }
  if (!command.empty()) {
    std::fprintf(stderr, "stagecraft-cli: error: help --man %s: no such command; run stagecraft-cli help for the list\n", command.c_str());
    return 2;
  }
  std::printf(".TH STAGECRAFT\\-CLI 1 \"\" \"Stagecraft %s\" \"User Commands\"\n", version);
  std::printf(".SH NAME\nstagecraft\\-cli \\- plan and run hybrid\\-parallel (DP x TP x PP) training from the command line\n");
  std::printf(".SH SYNOPSIS\n");
  for (const auto& c : commands()) std::printf(".B stagecraft\\-cli\n%s\n.br\n", roff(c.usage).c_str());
  std::printf(".SH DESCRIPTION\nStagecraft plans hybrid\\-parallel training of transformer models \\(em which GPU ranks form every "
              "tensor, data and pipeline parallel group, which layers sit on which stage, what every GPU holds in memory and how "
              "long a step takes \\(em and runs the plan with its own engine on this machine or on remote nodes over SSH, or "
              "launches another framework's program with the same layout.\n.SH COMMANDS\n");
  for (const auto& c : commands()) {
    std::printf(".TP\n.B %s\n%s\n.br\nUsage: stagecraft\\-cli %s\n.br\nSee \\fBstagecraft\\-cli\\-%s\\fR(1).\n", roff(c.name).c_str(),
                roff(c.summary).c_str(), roff(c.usage).c_str(), roff(c.name).c_str());
  }
  common_sections();
  std::printf(".SH SEE ALSO\n.BR stagecraft (1),\n.BR stagecraft\\-worker (1)\n");
  return 0;
}

int print_bash_completion() {
  std::string names;
  for (const auto& c : commands()) names += std::string(names.empty() ? "" : " ") + c.name;
  std::printf("# bash completion for stagecraft-cli (made by stagecraft-cli help --bash-completion)\n"
              "_stagecraft_cli() {\n"
              "  local cur=\"${COMP_WORDS[COMP_CWORD]}\" cmd=\"${COMP_WORDS[1]}\"\n"
              "  if [ \"$COMP_CWORD\" -eq 1 ]; then\n"
              "    COMPREPLY=($(compgen -W \"%s help --help --version\" -- \"$cur\"))\n"
              "    return\n"
              "  fi\n"
              "  local opts=\"\"\n"
              "  case \"$cmd\" in\n",
              names.c_str());
  for (const auto& c : commands()) {
    std::string opts = "--help";
    for (const auto& o : options_of(c.usage)) opts += " " + o;
    std::printf("    %s) opts=\"%s\" ;;\n", c.name, opts.c_str());
  }
  std::printf("    help) COMPREPLY=($(compgen -W \"%s\" -- \"$cur\")); return ;;\n"
              "  esac\n"
              "  if [[ \"$cur\" == -* ]]; then\n"
              "    COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\"))\n"
              "  else\n"
              "    COMPREPLY=($(compgen -f -- \"$cur\"))\n"
              "  fi\n"
              "}\n"
              "complete -o filenames -F _stagecraft_cli stagecraft-cli\n",
              names.c_str());
  return 0;
}

}  // namespace stagecraft::cli
