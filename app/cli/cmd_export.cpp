// stagecraft-cli export: a run configuration written as another framework's config (LiBai,
// PaddlePaddle, Colossal-AI, Megatron-LM, DeepSpeed), to stdout or to files.
//
// With -o FILE the configuration goes to FILE and a format's other files beside it, named
// after FILE's stem (DeepSpeed: FILE = ds_config.json, STEM.hostfile, STEM.pipeline.py); every
// file is written atomically, and each one written is named on stdout. Without -o, stdout gets
// the configuration, or every file under a "==> name <==" header. What the framework runs
// differently from the plan is printed on stderr as notes (and written as comments).
//
// `--to slurm` writes the Slurm batch script of the run instead (launch/slurm.h), for sbatch on a
// cluster without Stagecraft's supervision; Slurm's options (--partition ...) go into it.
#include <cstdio>
#include <filesystem>

#include "args.h"
#include "commands.h"
#include "history_file.h"
#include "stagecraft/config/config_io.h"
#include "stagecraft/interop/frameworks.h"
#include "stagecraft/launch/run_session.h"
#include "stagecraft/launch/slurm.h"
#include "stagecraft/plan/plan.h"

namespace stagecraft::cli {

namespace {

// Where the i-th file of an export goes when the first goes to `main`.
std::string companion_path(const std::string& main, const std::string& name) {
  const std::filesystem::path p(main);
  std::string stem = p.stem().string();
  if (stem.empty()) stem = p.filename().string();
  return (p.parent_path() / (stem + "." + name)).string();
}

int export_slurm(const Args& args, const std::optional<std::string>& out) {
  if (auto w = args.option("--worker"); w && !is_own_worker(*w)) {
    return report(Status::invalid_input("export --to slurm: --worker=" + *w +
                                        ": the exported script starts Stagecraft's own worker (a path ending in stagecraft-worker); "
                                        "run another program with `stagecraft-cli run --slurm --worker PROGRAM`"));
  }
  auto options = slurm_options(args);
  if (!options.ok()) return report(options.status());
  auto cfg = config::load_config_file(args.positionals[0], args.overrides);
  if (!cfg.ok()) return report(cfg.status());
  auto plan = plan::make_plan(cfg.value());
  if (!plan.ok()) return report(plan.status());
  if (Status s = launch::check_runnable(cfg.value(), plan.value(), {}, true); !s) return report(s);
  auto script = launch::slurm_batch_script(cfg.value(), plan.value(), options.value());
  if (!script.ok()) return report(script.status().with_context("export --to slurm"));
  if (!out) {
    std::fwrite(script->data(), 1, script->size(), stdout);
    return std::fflush(stdout) == 0 ? 0 : 1;
  }
  if (Status st = config::write_text_file_atomic(*out, script.value()); !st) return report(st);
  std::printf("wrote %s\n", out->c_str());
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace

int cmd_export(const std::vector<std::string>& argv) {
  ArgSpec spec;
  spec.options = {"--to", "-o", "--worker"};
  spec.options.insert(slurm_option_names().begin(), slurm_option_names().end());
  spec.repeatable = {"--sbatch-arg"};
  spec.overrides = true;
  auto args = parse_args(argv, spec, "export");
  if (!args.ok()) return report(args.status());
  if (args->positionals.size() != 1) {
    return report(Status::invalid_input("export: expected one CONFIG file (usage: stagecraft-cli export CONFIG [key=value ...] --to " +
                                        stagecraft::interop::framework_choices() + "|slurm [-o FILE])"));
  }
  const auto to = args->option("--to");
  if (!to) return report(Status::invalid_input("export: --to FORMAT is required; FORMAT is " + stagecraft::interop::framework_choices() + " or slurm"));
  const auto out = args->option("-o");
  if (out && out->empty()) return report(Status::invalid_input("export: -o needs a file name"));
  if (*to == "slurm") return export_slurm(args.value(), out);
  if (auto o = first_slurm_option(args.value()); o || args->option("--worker")) {
    return report(Status::invalid_input("export: " + o.value_or("--worker") + " is for --to slurm"));
  }
  const auto framework = stagecraft::interop::parse_framework(*to);
  if (!framework) return report(Status::invalid_input("export: --to " + *to + ": unknown format; choose " + stagecraft::interop::framework_choices() + " or slurm"));

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
