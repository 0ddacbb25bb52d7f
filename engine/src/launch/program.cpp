// Another program's command line and files. See program.h.
#include "stagecraft/launch/program.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "stagecraft/core/text.h"
#include "stagecraft/interop/frameworks.h"

#include <unistd.h>

namespace stagecraft::launch {

namespace {

// The run's name as a file name: letters, digits, '.', '_' and '-'; anything else becomes '_'.
std::string file_stem(const std::string& name) {
  std::string out;
  for (char c : name) {
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    out += keep ? c : '_';
  }
  if (out.empty() || out.front() == '.') out.insert(out.begin(), 'r');
  return out;
}

// The words of a launch-script export between `NAME=(` and `)` (Megatron-LM's MEGATRON_ARGS,
// torchtitan's TORCHTITAN_ARGS), one argument (and its value) a line.
Result<std::vector<std::string>> script_args(const std::string& script, const std::string& name, std::string_view framework) {
  const std::string open = name + "=(\n";
  const size_t begin = script.find(open);
  const size_t end = begin == std::string::npos ? begin : script.find("\n)\n", begin);
  if (begin == std::string::npos || end == std::string::npos) {
    return Status::internal("launch.framework=" + std::string(framework) + ": the export holds no " + name + " list");
  }
  auto words = split_words(std::string_view(script).substr(begin + open.size(), end - begin - open.size()));
  if (!words.ok()) {
    return Status::internal("launch.framework=" + std::string(framework) + ": the export's arguments do not split: " + words.status().message());
  }
  return words;
}

}  // namespace

bool is_python_program(std::string_view path) { return path.size() > 3 && path.substr(path.size() - 3) == ".py"; }

Result<ProgramCommand> program_command(const config::RunConfig& config, const std::vector<std::string>& extra, const std::string& files_dir) {
  const config::LaunchConfig& l = config.launch;
  if (l.program.empty()) {
    return Status::invalid_input("launch.program: no program; give --worker PROGRAM or set launch.program");
  }
  ProgramCommand cmd;
  // Megatron-LM's validate_args (megatron/training/arguments.py) asserts
  // CUDA_DEVICE_MAX_CONNECTIONS=1 with tensor or context parallelism on GPUs before Blackwell: the
  // rank's command sets it through env(1), on this machine, over SSH and under srun alike.
  if (l.framework == config::LaunchFramework::kMegatron && (config.parallel.tp > 1 || config.parallel.cp > 1)) {
    cmd.argv.insert(cmd.argv.end(), {"env", "CUDA_DEVICE_MAX_CONNECTIONS=1"});
  }
  if (is_python_program(l.program)) {
    if (l.python.empty()) return Status::invalid_input("launch.python: no interpreter for " + l.program + "; set launch.python (e.g. python3)");
    cmd.argv.push_back(l.python);
  }
  cmd.argv.push_back(l.program);

  if (l.framework != config::LaunchFramework::kNone) {
    const auto to = l.framework == config::LaunchFramework::kMegatron     ? interop::Framework::kMegatron
                    : l.framework == config::LaunchFramework::kTorchtitan ? interop::Framework::kTorchtitan
                                                                          : interop::Framework::kDeepspeed;
    const std::string_view name = config::to_string(l.framework);
    auto exported = interop::export_files(config, to);
    if (!exported.ok()) return Status::invalid_input("launch.framework=" + std::string(name) + ": " + exported.status().message());
    cmd.notes = exported->notes;
    if (to == interop::Framework::kMegatron || to == interop::Framework::kTorchtitan) {
      auto words = script_args(exported->files.front().text, to == interop::Framework::kMegatron ? "MEGATRON_ARGS" : "TORCHTITAN_ARGS", name);
      if (!words.ok()) return words.status();
      cmd.argv.insert(cmd.argv.end(), words->begin(), words->end());
    } else {
      const std::string path = files_dir + "/" + file_stem(config.name) + "-ds_config.json";
      cmd.files.push_back({path, exported->files.front().text});
      cmd.argv.insert(cmd.argv.end(), {"--deepspeed", "--deepspeed_config", path});
    }
  }

  if (!l.args.empty()) {
    auto words = split_words(l.args);
    if (!words.ok()) return Status::invalid_input("launch.args: " + words.status().message());
    cmd.argv.insert(cmd.argv.end(), words->begin(), words->end());
  }
  cmd.argv.insert(cmd.argv.end(), extra.begin(), extra.end());
  return cmd;
}

Result<ProgramCommand> prepare_program(const config::RunConfig& config, const std::vector<std::string>& extra, const std::string& dir,
                                       const std::string& files_dir) {
  auto cmd = program_command(config, extra, files_dir);
  if (!cmd.ok()) return cmd;
  for (const ProgramFile& f : cmd->files) {
    const std::filesystem::path path = std::filesystem::path(dir) / f.path;
    std::error_code ec;
    std::filesystem::create_directories(path.parent_path(), ec);
    if (ec) return Status::io_error(path.parent_path().string() + ": cannot create the directory: " + ec.message());
    const std::filesystem::path tmp = path.string() + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out << f.text;
      if (!out.flush()) return Status::io_error(tmp.string() + ": cannot write the file");
    }
    std::filesystem::rename(tmp, path, ec);
    if (ec) return Status::io_error(path.string() + ": cannot write the file: " + ec.message());
  }
  return cmd;
}

namespace {

// The program a bare name runs, as execvp finds it in PATH; "" when none.
std::string find_in_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string_view rest = path ? path : "/usr/local/bin:/usr/bin:/bin";
  while (true) {
    const size_t colon = rest.find(':');
    std::string dir(rest.substr(0, colon));
    if (dir.empty()) dir = ".";
    const std::string candidate = dir + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0 && !std::filesystem::is_directory(candidate)) return candidate;
    if (colon == std::string_view::npos) return "";
    rest.remove_prefix(colon + 1);
  }
}

}  // namespace

Status check_program_here(const config::RunConfig& config) {
  const config::LaunchConfig& l = config.launch;
  if (l.program.empty()) return Status::OK();
  const bool python = is_python_program(l.program);
  if (python || l.program.find('/') != std::string::npos) {
    if (::access(l.program.c_str(), F_OK) != 0) {
      return Status::invalid_input("launch.program=" + l.program + ": no such file here; fix the path (relative to the current directory)");
    }
    if (::access(l.program.c_str(), python ? R_OK : X_OK) != 0 || std::filesystem::is_directory(l.program)) {
      return Status::invalid_input("launch.program=" + l.program + (python ? ": cannot be read" : ": is not an executable file; chmod +x it"));
    }
  } else if (find_in_path(l.program).empty()) {
    return Status::invalid_input("launch.program=" + l.program + ": not found in PATH; give its path (./" + l.program + ")");
  }
  if (python) {
    const bool found = l.python.find('/') != std::string::npos ? ::access(l.python.c_str(), X_OK) == 0 : !find_in_path(l.python).empty();
    if (!found) return Status::invalid_input("launch.python=" + l.python + ": not found; install it or set launch.python to an interpreter");
  }
  return Status::OK();
}

}  // namespace stagecraft::launch
