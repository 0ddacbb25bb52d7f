// stagecraft-cli eval: mean next-token cross-entropy of a checkpoint on a token file, on the CPU
// or (backend: cuda) the first visible GPU.
#include <charconv>
#include <cstdio>

#include <memory>

#include "args.h"
#include "commands.h"
#include "stagecraft/config/config_io.h"
#include "stagecraft/runtime/device.h"
#include "stagecraft/runtime/evaluate.h"

namespace stagecraft::cli {

int cmd_eval(const std::vector<std::string>& argv) {
  ArgSpec spec;
  spec.flags = {"--json"};
  spec.options = {"--checkpoint", "--data", "--windows"};
  spec.overrides = true;
  auto args = parse_args(argv, spec, "eval");
  if (!args.ok()) return report(args.status());
  const char* usage = "(usage: stagecraft-cli eval CONFIG --checkpoint DIR --data FILE [--windows N] [--json])";
  if (args->positionals.size() != 1) return report(Status::invalid_input(std::string("eval: expected one CONFIG file ") + usage));
  auto ckpt = args->option("--checkpoint");
  auto data = args->option("--data");
  if (!ckpt) return report(Status::invalid_input(std::string("eval: --checkpoint DIR is required ") + usage));
  if (!data) return report(Status::invalid_input(std::string("eval: --data FILE is required ") + usage));
  int windows = 1;
  if (auto w = args->option("--windows")) {
    auto [p, ec] = std::from_chars(w->data(), w->data() + w->size(), windows);
    if (ec != std::errc() || p != w->data() + w->size() || windows < 1) {
      return report(Status::invalid_input("eval: --windows " + *w + ": expected a whole number of at least 1"));
    }
  }
  auto cfg = config::load_config_file(args->positionals[0], args->overrides, config::Rules::kExceptLayout);
  if (!cfg.ok()) return report(cfg.status());
  // backend: cuda evaluates on the first visible GPU.
  std::unique_ptr<runtime::Device> gpu;
  if (cfg->backend == config::Backend::kCuda) {
    auto d = runtime::make_device(config::Backend::kCuda, 0);
    if (!d.ok()) return report(d.status().with_context("eval with backend=cuda"));
    gpu = std::move(d).value();
  }
  auto r = runtime::evaluate_checkpoint(cfg->model, *ckpt, *data, windows, gpu.get(), cfg->train.data_dtype);
  if (!r.ok()) return report(r.status());
  if (args->has("--json")) {
    std::printf("{\"loss\": %.9g, \"windows\": %d, \"tokens\": %lld}\n", r->loss, r->windows, r->tokens);
  } else {
    std::printf("loss %.4f over %d windows (%lld tokens)\n", r->loss, r->windows, r->tokens);
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace stagecraft::cli
