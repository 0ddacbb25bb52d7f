// stagecraft-cli: Stagecraft without a screen: plan, search, scale, export, import, run, the run
// history and calibration. `stagecraft-cli help` lists the commands.
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "commands.h"

namespace stagecraft::cli {

const std::vector<Command>& commands() {
  static const std::vector<Command> kCommands = {
      {"plan", "plan CONFIG [key=value ...] [--tokens N] [--json]",
       "Show the groups, the stage of every layer, the predicted memory and step time, and the warnings of a run configuration.",
       cmd_plan},
      {"search", "search CONFIG [key=value ...] [--top N] [--all] [--tp N] [--pp N] [--cp N] [--ep N] [--expert-tp N] [--tp-in-node] [--schedules LIST] [--recompute LIST] [--no-zero] [--max-zero N] [--max-micro-batch N] [--plausible] [--json]",
       "Rank every layout (dp, tp, cp, pp, ep, schedule, micro-batch, recompute, sp, zero 0-3) that fits, by predicted throughput.", cmd_search},
      {"scale", "scale CONFIG [key=value ...] [--max-nodes N] [--tokens N] [--cp N] [--ep N] [--expert-tp N] [--max-zero N] [--plausible] [--json|--csv]",
       "The best layout of the same model and global batch at 1, 2, 4, ... nodes: tokens/s, MFU, days to train, ideal linear scaling.",
       cmd_scale},
      {"export", "export CONFIG [key=value ...] --to libai|paddle|colossalai|megatron|deepspeed|torchtitan|hf|slurm [-o FILE] [--partition P] [--account A] [--time T] [--qos Q] [--constraint C] [--sbatch-arg ARG ...] [--worker PATH]",
       "Write the plan as another framework's config: the same sizes, stages and micro-batches; notes on what it runs differently. --to slurm writes the run's Slurm batch script.",
       cmd_export},
      {"import", "import FILE --from libai|paddle|colossalai|deepspeed|torchtitan|hf [--base CONFIG] [-o OUT.yaml]",
       "Read another framework's config as a Stagecraft config (YAML); what it does not carry comes from --base.", cmd_import},
      {"devices", "devices [--json]", "List the devices the cost model knows, with memory, peaks and links.", cmd_devices},
      {"run", "run CONFIG [key=value ...] [--hosts FILE [--include ..] [--exclude ..] [--ssh-config F] [--known-hosts F] [--master-addr A]] [--worker PROGRAM [--framework megatron|deepspeed|torchtitan] [-- ARGS ...]] [--slurm [--partition P] [--account A] [--time T] [--qos Q] [--constraint C] [--sbatch-arg ARG ...] [--dry-run]] [--json] [--detach] [--db FILE]",
       "Train the configuration with Stagecraft's engine, or run another program (--worker PROGRAM) with torchrun's environment, one process per rank, on this machine, on the hosts of a hostfile over SSH, or as a Slurm batch job (--slurm); live progress and metrics, recorded in the run history.",
       cmd_run},
      {"preflight", "preflight CONFIG --hosts FILE [--include H@H:0,1] [--exclude ..] [--ssh-config F] [--known-hosts F] [--worker PROGRAM] [--json] | --slurm [--partition P] [--account A] [--time T] [--qos Q] [--constraint C] [--sbatch-arg ARG ...]",
       "Check every host of a remote run: reachable, host key known, authenticated, worker with this version (or the program of --worker / launch.program), enough slots; with --slurm, the partition, its nodes' GPUs and whether Slurm accepts the job.",
       cmd_preflight},
      {"eval", "eval CONFIG --checkpoint DIR --data FILE [--windows N] [--json]",
       "Mean next-token cross-entropy of a checkpoint on a token file.", cmd_eval},
      {"runs", "runs list [--state S] [--name SUBSTR] | show ID | logs ID [--rank R] | metrics ID [--csv] | compare ID | cancel ID [--json] [--db FILE]",
       "The run history: list runs, show one with the kernels its ranks took and its transitions, its logs and metrics, its predicted against its measured step part by part, or cancel one that is running.", cmd_runs},
      {"calibrate", "calibrate RUN_ID ... [-o PROFILE.yaml] [--name NAME] [--json] [--db FILE]",
       "Fit the cost model's device constants to recorded runs and write a device profile (default: the user catalog), so plans predict this machine.",
       cmd_calibrate},
  };
  return kCommands;
}

int report(const Status& st) {
  const std::string& msg = st.message();
  size_t start = 0;
  while (start <= msg.size()) {
    const size_t nl = msg.find('\n', start);
    const std::string line = msg.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    std::fprintf(stderr, "stagecraft-cli: error: %s\n", line.c_str());
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  return st.code() == Status::Code::kInvalidInput || st.code() == Status::Code::kNotFound ? 2 : 1;
}

int print_help(const std::string& command) {
  for (const auto& c : commands()) {
    if (command == c.name) {
      std::printf("usage: stagecraft-cli %s\n\n%s\n", c.usage, c.summary);
      return 0;
    }
  }
  std::printf("usage: stagecraft-cli COMMAND [ARGS]\n\nStagecraft plans and runs hybrid-parallel (DP x TP x PP) training.\n\nCommands:\n");
  // Long usages take a line of their own, their summary indented under them.
  for (const auto& c : commands()) {
    if (std::strlen(c.usage) <= 52) {
      std::printf("  %-52s %s\n", c.usage, c.summary);
    } else {
      std::printf("  %s\n  %-52s %s\n", c.usage, "", c.summary);
    }
  }
  std::printf("\nExit status: 0 success, 1 the operation failed, 2 invalid input.\n"
              "Run `stagecraft-cli COMMAND --help` for one command.\n");
  return 0;
}

}  // namespace stagecraft::cli

int main(int argc, char** argv) {
  using namespace stagecraft::cli;
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.size() >= 2 && args[0] == "help" && args[1] == "--man") return print_man(args.size() > 2 ? args[2] : "");
    if (args.size() == 2 && args[0] == "help" && args[1] == "--bash-completion") return print_bash_completion();
    if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
      return print_help(args.size() > 1 ? args[1] : "");
    }
    if (args[0] == "--version") {
      std::printf("stagecraft-cli %s\n", STAGECRAFT_VERSION);
      return 0;
    }
    for (const auto& c : commands()) {
      if (args[0] == c.name) {
        std::vector<std::string> rest(args.begin() + 1, args.end());
        for (const auto& a : rest) {
          if (a == "--help" || a == "-h") return print_help(c.name);
        }
        return c.run(rest);
      }
    }
    std::fprintf(stderr, "stagecraft-cli: error: unknown command '%s'; run stagecraft-cli help for the list\n", args[0].c_str());
    return 2;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "stagecraft-cli: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stagecraft-cli: error: internal error: %s\n", e.what());
    return 1;
  }
}
