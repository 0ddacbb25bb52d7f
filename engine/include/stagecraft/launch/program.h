// Another program as a run's ranks (launch.program): its command line and the files it needs,
// from the run's configuration. Stagecraft starts it once per rank with torchrun's environment
// (worker_env.h) instead of stagecraft-worker, and reads its output for metrics
// (metric_lines.h). What is not here: starting and supervising it (local_run.h, remote_run.h,
// supervisor.h), checking it exists on the hosts (preflight.h).
//
// The command line, in order:
//   1. launch.python and the program when the program is a Python file (is_python_program),
//      else the program alone (a name without '/' is looked up in PATH, as a shell does);
//   2. the plan as the framework's arguments, launch.framework:
//        megatron   the argument list of `export --to megatron` (interop::export_files), e.g.
//                   --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 ... --seed 1234;
//        torchtitan the options of `export --to torchtitan` (TORCHTITAN_ARGS), e.g.
//                   --parallelism.tensor_parallel_degree 2 ... --debug.seed 1234, which override
//                   the configuration the program's own --module / --config name;
//        deepspeed  `--deepspeed --deepspeed_config .stagecraft/<name>-ds_config.json`, the
//                   ds_config.json of `export --to deepspeed` written there (a file of the
//                   command, relative to the run's working directory; a Slurm run writes it in
//                   its run directory instead, with an absolute path, so that a job waiting in
//                   the queue keeps its own);
//   3. launch.args, split like a shell's words (core/text.h split_words: quotes, backslashes,
//      nothing expanded);
//   4. the arguments given after `--` on the command line (`extra`), as they are.
// What the export notes (what the framework runs differently from the plan) is kept in notes.
//
// Pure except prepare_program(), which writes the files, and check_program_here(). Thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "stagecraft/config/run_config.h"
#include "stagecraft/core/status.h"

namespace stagecraft::launch {

// A path ending in ".py": run with launch.python.
bool is_python_program(std::string_view path);

struct ProgramFile {
  std::string path;  // relative to the run's working directory
  std::string text;
};

struct ProgramCommand {
  std::vector<std::string> argv;   // what each rank runs (launch.framework megatron with tp > 1:
                                   // through `env CUDA_DEVICE_MAX_CONNECTIONS=1`, as Megatron-LM needs)
  std::vector<ProgramFile> files;  // to write before the ranks start
  std::vector<std::string> notes;  // the framework export's notes, one line each
};

// The command for config.launch (launch.program must be set). Fails (invalid_input, one line
// naming the key) when launch.program is empty, launch.args does not split, or the framework
// export refuses the plan (its message).
// The command's files go in `files_dir` (relative to the run's working directory, or absolute).
Result<ProgramCommand> program_command(const config::RunConfig& config, const std::vector<std::string>& extra,
                                       const std::string& files_dir = ".stagecraft");

// program_command(), with its files written under `dir` (created as needed; an absolute
// files_dir is used as it is).
Result<ProgramCommand> prepare_program(const config::RunConfig& config, const std::vector<std::string>& extra, const std::string& dir,
                                       const std::string& files_dir = ".stagecraft");

// Whether launch.program can start on this machine, from the current directory: a path with a
// '/' must exist and be executable (readable for a .py program), a bare name must be found in
// PATH (a .py program: in the current directory), and a .py program's launch.python in PATH.
// Fails (invalid_input) with one line naming the program and the fix. Reads the file system.
Status check_program_here(const config::RunConfig& config);

}  // namespace stagecraft::launch
