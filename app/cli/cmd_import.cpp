// stagecraft-cli import: another framework's config (LiBai, PaddlePaddle or Colossal-AI Python,
// DeepSpeed JSON) read back as a Stagecraft run configuration, printed as YAML or written to -o.
//
// What the file does not carry (usually the model shape) comes from --base, a Stagecraft config
// whose layout keys only need to parse: the imported file decides the layout. The result is
// validated like a loaded file; problems are reported one per line with the imported file's line.
#include <cstdio>

#include "args.h"
#include "commands.h"
#include "stagecraft/config/config_io.h"
#include "stagecraft/interop/frameworks.h"

namespace stagecraft::cli {

int cmd_import(const std::vector<std::string>& argv) {
  ArgSpec spec;
  spec.options = {"--from", "--base", "-o"};
  auto args = parse_args(argv, spec, "import");
  if (!args.ok()) return report(args.status());
  const std::string choices = stagecraft::interop::framework_choices(true);
  if (args->positionals.size() != 1) {
    return report(Status::invalid_input("import: expected one FILE (usage: stagecraft-cli import FILE --from " + choices +
                                        " [--base CONFIG] [-o OUT.yaml])"));
  }
  const auto from = args->option("--from");
  if (!from) return report(Status::invalid_input("import: --from FORMAT is required; FORMAT is " + choices));
  const auto framework = stagecraft::interop::parse_framework(*from);
  if (!framework || !stagecraft::interop::can_import(*framework)) {
    return report(Status::invalid_input("import: --from " + *from + ": " +
                                        (framework ? "Stagecraft cannot import it (Megatron-LM's configuration is a command line)"
                                                   : std::string("unknown format")) +
                                        "; choose " + choices));
  }
  const auto out = args->option("-o");
  if (out && out->empty()) return report(Status::invalid_input("import: -o needs a file name"));

  std::optional<config::RunConfig> base;
  if (auto base_path = args->option("--base")) {
    auto loaded = config::load_config_file(*base_path, {}, config::Rules::kExceptLayout);
    if (!loaded.ok()) return report(loaded.status());
    base = std::move(loaded).value();
  }
  const std::string& path = args->positionals[0];
  auto text = config::read_text_file(path);
  if (!text.ok()) return report(text.status());
  auto imported = stagecraft::interop::import_config(text.value(), *framework, base ? &*base : nullptr, path);
  if (!imported.ok()) return report(imported.status());
  const std::string yaml = config::to_yaml(imported.value());
  if (out) {
    if (Status st = config::write_text_file_atomic(*out, yaml); !st) return report(st);
    std::printf("wrote %s\n", out->c_str());
  } else {
    std::fwrite(yaml.data(), 1, yaml.size(), stdout);
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace stagecraft::cli
