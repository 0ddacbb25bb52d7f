// stagecraft-cli export: a run configuration written as another framework's config (LiBai,
// PaddlePaddle, Colossal-AI, Megatron-LM, DeepSpeed), to stdout or to files.
//
// With -o FILE the configuration goes to FILE and a format's other files beside it, named
// after FILE's stem (DeepSpeed: FILE = ds_config.json, STEM.hostfile, STEM.pipeline.py); every
// file is written atomically, and each one written is named on stdout. Without -o, stdout gets
// the configuration, or every file under a "==> name <==" header. What the framework runs
// differently from the plan is printed on stderr as notes (and written as comments).
#include <cstdio>
#include <filesystem>

#include "args.h"
#include "commands.h"
#include "history_file.h"
#include "stagecraft/config/config_io.h"
#include "stagecraft/interop/frameworks.h"

namespace stagecraft::cli {

namespace {

// Where the i-th file of an export goes when the first goes to `main`.
std::string companion_path(const std::string& main, const std::string& name) {
  const std::filesystem::path p(main);
  std::string stem = p.stem().string();
  if (stem.empty()) stem = p.filename().string();
  return (p.parent_path() / (stem + "." + name)).string();
}

}  // namespace

int cmd_export(const std::vector<std::string>& argv) {
  ArgSpec spec;
  spec.options = {"--to", "-o"};
  spec.overrides = true;
  auto args = parse_args(argv, spec, "export");
  if (!args.ok()) return report(args.status());
  if (args->positionals.size() != 1) {
    return report(Status::invalid_input("export: expected one CONFIG file (usage: stagecraft-cli export CONFIG [key=value ...] --to " +
                                        stagecraft::interop::framework_choices() + " [-o FILE])"));
  }
  const auto to = args->option("--to");
  if (!to) return report(Status::invalid_input("export: --to FORMAT is required; FORMAT is " + stagecraft::interop::framework_choices()));
  const auto framework = stagecraft::interop::parse_framework(*to);
  if (!framework) return report(Status::invalid_input("export: --to " + *to + ": unknown format; choose " + stagecraft::interop::framework_choices()));
  const auto out = args->option("-o");
  if (out && out->empty()) return report(Status::invalid_input("export: -o needs a file name"));

  auto cfg = load_run_config(args->positionals[0], args->overrides, nullptr);
  if (!cfg.ok()) return report(cfg.status());
  stagecraft::interop::ExportOptions options;
  if (out && *framework == stagecraft::interop::Framework::kLibai) options.config_path = *out;
  auto exported = stagecraft::interop::export_files(cfg.value(), *framework, options);
  if (!exported.ok()) return report(exported.status().with_context("export --to " + *to));
  for (const auto& note : exported->notes) std::fprintf(stderr, "stagecraft-cli: note: %s\n", note.c_str());

  if (!out) {
    auto text = stagecraft::interop::export_config(cfg.value(), *framework, options);
    if (!text.ok()) return report(text.status());
    std::fwrite(text->data(), 1, text->size(), stdout);
    return std::fflush(stdout) == 0 ? 0 : 1;
  }
  const auto& files = exported->files;
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string path = i == 0 ? *out : companion_path(*out, files[i].name);
    if (Status st = config::write_text_file_atomic(path, files[i].text); !st) return report(st);
    std::printf("wrote %s\n", path.c_str());
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace stagecraft::cli
