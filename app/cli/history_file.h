// The CLI's side of a run's history: which file (--db), and `run --detach`'s background
// supervisor. The record itself is the engine's (stagecraft/launch/run_session.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stagecraft/config/run_config.h"
#include "stagecraft/core/status.h"
#include "stagecraft/store/run_store.h"

namespace stagecraft::cli {

// The history file for a command: --db's value when given, else RunStore::default_path().
std::string history_path(const std::string* db_option);

// The history for reading: never created by a read. Null (with ok) when the default file does not
// exist yet; not_found when --db names a missing file.
Result<std::unique_ptr<store::RunStore>> open_history_to_read(const std::string* db_option);

// A config file with its overrides, and `pipeline.costs: run:ID` resolved from the history into an
// explicit partition (launch/run_measurement.h resolve_pipeline_costs), for the commands that plan
// stages: plan, run, export, preflight.
Result<config::RunConfig> load_run_config(const std::string& path, const std::vector<std::string>& overrides, const std::string* db_option);

// `run --detach`: forks; the child leaves the session (setsid), puts its stdin, stdout and
// stderr on /dev/null and returns -1 to go on supervising run `id`. The parent records the child
// as the run's supervisor and returns the exit status it should end with (0, or 1 when the fork
// failed, with the run recorded failed).
int detach_supervisor(const std::string& db, int64_t id);

}  // namespace stagecraft::cli
