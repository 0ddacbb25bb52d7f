// stagecraft-cli runs: the run history (engine store/) — list runs, show one, its logs and
// metrics, its prediction against its measurements (compare), and cancel one that is running (its
// supervisor is asked to stop every rank).
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <thread>
#include <variant>

#include "args.h"
#include "commands.h"
#include "history_file.h"
#include "stagecraft/core/json.h"
#include "stagecraft/launch/run_kernels.h"
#include "stagecraft/launch/run_measurement.h"
#include "stagecraft/plan/calibrate.h"
#include "stagecraft/launch/slurm.h"
#include "stagecraft/launch/worker_env.h"
#include "stagecraft/launch/worker_events.h"
#include "stagecraft/store/run_store.h"

namespace stagecraft::cli {

namespace {

constexpr const char* kUsage =
    "runs list [--state S] [--name SUBSTR] | show ID | logs ID [--rank R] | metrics ID [--csv] | compare ID | cancel ID"
    "  [--json] [--db FILE]";

std::string iso_time(double unix_s) {
  if (unix_s <= 0) return {};
  const std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string local_time(double unix_s) {
  if (unix_s <= 0) return "-";
  const std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

// Each rank's node of a Slurm run: its job's nodes in Slurm's block distribution (the plan's ranks
// node-major, world / nodes a node, as the batch script asks); empty when the nodes are not known.
std::vector<std::string> rank_nodes(const store::RunRecord& r) {
  const auto nodes = launch::expand_nodelist(r.job_nodes);
  if (nodes.empty() || r.world_size <= 0 || r.world_size % static_cast<int>(nodes.size()) != 0) return {};
  const int per_node = r.world_size / static_cast<int>(nodes.size());
  std::vector<std::string> out;
  for (int rank = 0; rank < r.world_size; ++rank) out.push_back(nodes[static_cast<size_t>(rank / per_node)]);
  return out;
}

// "ranks 0-1 on sc7n0, 2-3 on sc7n1".
std::string rank_nodes_text(const std::vector<std::string>& per_rank) {
  std::string s;
  for (size_t r = 0; r < per_rank.size();) {
    size_t end = r;
    while (end + 1 < per_rank.size() && per_rank[end + 1] == per_rank[r]) ++end;
    s += (s.empty() ? "ranks " : ", ") + std::to_string(r) + (end > r ? "-" + std::to_string(end) : "") + " on " + per_rank[r];
    r = end + 1;
  }
  return s;
}

Json number_or_null(double v) { return std::isnan(v) ? Json() : Json(v); }

std::string hosts_text(const std::vector<std::string>& hosts) {
  std::string out;
  for (const auto& h : hosts) out += (out.empty() ? "" : ",") + h;
  return out.empty() ? "-" : out;
}

Json run_json(const store::RunRecord& r) {
  Json j = Json::object();
  j.set("id", static_cast<long long>(r.id));
  j.set("name", r.name);
  j.set("state", std::string(store::to_string(r.state)));
  j.set("created", iso_time(r.created));
  j.set("started", r.started > 0 ? Json(iso_time(r.started)) : Json());
  j.set("ended", r.ended > 0 ? Json(iso_time(r.ended)) : Json());
  j.set("hosts", Json::array_of(r.hosts));
  j.set("world_size", r.world_size);
  j.set("steps", static_cast<long long>(r.last_step));
  j.set("total_steps", static_cast<long long>(r.total_steps));
  j.set("last_loss", number_or_null(r.last_loss));
  j.set("reason", r.reason);
  if (!r.job_id.empty()) {
    j.set("job_id", r.job_id);
    j.set("job_state", r.job_state);
    j.set("job_reason", r.job_reason);
    j.set("job_nodes", r.job_nodes);
    if (const auto per_rank = rank_nodes(r); !per_rank.empty()) j.set("rank_nodes", Json::array_of(per_rank));
  }
  return j;
}

void print_json(const Json& j) { std::printf("%s\n", j.dump(2).c_str()); }

Result<int64_t> parse_id(const std::string& sub, const std::vector<std::string>& positionals) {
  if (positionals.size() != 2) {
    return Status::invalid_input("runs " + sub + ": expected one run ID (usage: stagecraft-cli runs " + sub + " ID)");
  }
  const std::string& text = positionals[1];
  int64_t id = 0;
  bool ok = !text.empty() && text.size() <= 18;
  for (char ch : text) ok = ok && ch >= '0' && ch <= '9';
  if (ok) id = std::stoll(text);
  if (!ok || id <= 0) {
    return Status::invalid_input("runs " + sub + ": '" + text + "' is not a run ID; give the number `stagecraft-cli runs list` shows");
  }
  return id;
}

Result<std::unique_ptr<store::RunStore>> open_history(const Args& args) {
  const auto db = args.option("--db");
  return open_history_to_read(db ? &*db : nullptr);
}

Status no_such_run(int64_t id, const Args& args) {
  const auto db = args.option("--db");
  return Status::not_found("run " + std::to_string(id) + ": no such run in " + history_path(db ? &*db : nullptr) +
                           " (see `stagecraft-cli runs list`)");
}

int runs_list(const Args& args, store::RunStore* st) {
  if (args.positionals.size() != 1) return report(Status::invalid_input("runs list: takes no argument besides its options"));
  store::RunFilter f;
  if (auto s = args.option("--state")) {
    f.state = store::parse_run_state(*s);
    if (!f.state) {
      return report(Status::invalid_input("runs list: --state " + *s +
                                          ": not a state; use queued, running, succeeded, failed, cancelled or lost"));
    }
  }
  if (auto n = args.option("--name")) f.name_contains = *n;
  f.documents = false;  // the list shows neither configs nor plans
  std::vector<store::RunRecord> runs;
  if (st) {
    auto r = st->list_runs(f);
    if (!r.ok()) return report(r.status());
    runs = std::move(r).value();
  }
  if (args.has("--json")) {
    Json a = Json::array();
    for (const auto& r : runs) a.push_back(run_json(r));
    print_json(a);
    return 0;
  }
  if (runs.empty()) {
    std::printf("no runs recorded\n");
    return 0;
  }
  // NAME and HOSTS as wide as their longest entry (from 20 and 16 up to 48): the columns stay in line.
  auto hosts_of = [](const store::RunRecord& r) {
    return r.job_id.empty() ? hosts_text(r.hosts) : r.job_nodes.empty() ? "slurm job " + r.job_id : r.job_nodes;
  };
  auto fit = [](std::string s, size_t w) { return s.size() <= w ? s : s.substr(0, w - 3) + "..."; };
  size_t name_w = 20, hosts_w = 16;
  for (const auto& r : runs) {
    name_w = std::max(name_w, std::min<size_t>(r.name.size(), 48));
    hosts_w = std::max(hosts_w, std::min<size_t>(hosts_of(r).size(), 48));
  }
  const int nw = static_cast<int>(name_w), hw = static_cast<int>(hosts_w);
  std::printf("%-6s %-*s %-10s %-19s %-*s %11s %10s\n", "ID", nw, "NAME", "STATE", "CREATED", hw, "HOSTS", "STEPS", "LAST LOSS");
  for (const auto& r : runs) {
    char steps[40], loss[24];
    std::snprintf(steps, sizeof steps, "%lld/%lld", static_cast<long long>(r.last_step), static_cast<long long>(r.total_steps));
    if (std::isnan(r.last_loss)) {
      std::snprintf(loss, sizeof loss, "-");
    } else {
      std::snprintf(loss, sizeof loss, "%.4f", r.last_loss);
    }
    std::printf("%-6lld %-*s %-10s %-19s %-*s %11s %10s\n", static_cast<long long>(r.id), nw, fit(r.name, name_w).c_str(),
                std::string(store::to_string(r.state)).c_str(), local_time(r.created).c_str(), hw, fit(hosts_of(r), hosts_w).c_str(), steps,
                loss);
  }
  return 0;
}

int runs_show(const Args& args, store::RunStore& st, int64_t id) {
  auto r = st.get_run(id);
  if (!r.ok()) return report(r.status());
  auto tr = st.transitions(id);
  if (!tr.ok()) return report(tr.status());
  auto kernels = launch::run_kernel_sets(st, id);
  if (!kernels.ok()) return report(kernels.status());
  if (args.has("--json")) {
    Json j = run_json(r.value());
    Json ks = Json::array();
    for (const auto& k : kernels.value()) {
      Json paths = Json::object();
      for (const auto& [work, path] : k.paths) paths.set(work, path);
      ks.push_back(Json::object({{"ranks", Json::array_of(k.ranks)}, {"paths", paths}}));
    }
    j.set("kernels", ks);
    Json sup = Json::object();
    sup.set("pid", static_cast<long long>(r->supervisor.pid));
    sup.set("host", r->supervisor.host);
    j.set("supervisor", sup);
    Json ts = Json::array();
    for (const auto& t : tr.value()) {
      Json o = Json::object();
      o.set("from", t.from ? Json(std::string(store::to_string(*t.from))) : Json());
      o.set("to", std::string(store::to_string(t.to)));
      o.set("time", iso_time(t.time));
      o.set("reason", t.reason);
      ts.push_back(o);
    }
    j.set("transitions", ts);
    j.set("config", r->config_yaml);
    auto plan = Json::parse(r->plan_json);
    j.set("plan", plan.ok() ? plan.value() : Json());
    print_json(j);
    return 0;
  }
  std::printf("run %lld: %s\n", static_cast<long long>(r->id), r->name.c_str());
  std::printf("  state        %s%s%s\n", std::string(store::to_string(r->state)).c_str(), r->reason.empty() ? "" : " — ",
              r->reason.c_str());
  std::printf("  created      %s\n  started      %s\n  ended        %s\n", local_time(r->created).c_str(),
              local_time(r->started).c_str(), local_time(r->ended).c_str());
  std::printf("  hosts        %s\n  world size   %d\n", hosts_text(r->hosts).c_str(), r->world_size);
  if (!r->job_id.empty()) {
    std::printf("  slurm job    %s %s%s\n", r->job_id.c_str(), r->job_state.c_str(),
                r->job_reason.empty() || r->job_reason == "None" ? "" : (" (" + r->job_reason + ")").c_str());
    const auto per_rank = rank_nodes(r.value());
    std::printf("  slurm nodes  %s%s\n", r->job_nodes.empty() ? "(not placed yet)" : r->job_nodes.c_str(),
                per_rank.empty() ? "" : (": " + rank_nodes_text(per_rank)).c_str());
  }
  // One line for the whole run when every rank took the same paths, else one per set of ranks.
  const auto lines = launch::kernel_sets_lines(kernels.value(), r->world_size);
  for (size_t i = 0; i < lines.size(); ++i) std::printf("  %-12s %s\n", i == 0 ? "kernels" : "", lines[i].c_str());
  std::printf("  steps        %lld/%lld\n", static_cast<long long>(r->last_step), static_cast<long long>(r->total_steps));
  if (!std::isnan(r->last_loss)) std::printf("  last loss    %.4f\n", r->last_loss);
  std::printf("  supervisor   pid %lld on %s\n", static_cast<long long>(r->supervisor.pid),
              r->supervisor.host.empty() ? "?" : r->supervisor.host.c_str());
  std::printf("transitions:\n");
  for (const auto& t : tr.value()) {
    std::printf("  %s  %-9s -> %-9s %s\n", local_time(t.time).c_str(), t.from ? std::string(store::to_string(*t.from)).c_str() : "",
                std::string(store::to_string(t.to)).c_str(), t.reason.c_str());
  }
  return 0;
}

Result<std::optional<int>> parse_rank(const Args& args) {
  auto text = args.option("--rank");
  if (!text) return std::optional<int>();
  bool ok = !text->empty() && text->size() <= 9;
  for (char ch : *text) ok = ok && ch >= '0' && ch <= '9';
  if (!ok) return Status::invalid_input("runs logs: --rank " + *text + ": give a rank number (0, 1, ...)");
  return std::optional<int>(std::stoi(*text));
}

int runs_logs(const Args& args, store::RunStore& st, int64_t id) {
  auto rank = parse_rank(args);
  if (!rank.ok()) return report(rank.status());
  auto r = st.get_run(id);
  if (!r.ok()) return report(r.status());
  if (rank.value() && *rank.value() >= r->world_size) {
    return report(Status::invalid_input("runs logs: --rank " + std::to_string(*rank.value()) + ": run " + std::to_string(id) + " has ranks 0-" +
                                        std::to_string(r->world_size - 1)));
  }
  auto logs = st.logs(id, rank.value());
  if (!logs.ok()) return report(logs.status());
  if (args.has("--json")) {
    Json a = Json::array();
    for (const auto& l : logs.value()) {
      a.push_back(Json::object({{"rank", l.rank}, {"stream", l.is_stderr ? "stderr" : "stdout"}, {"time", iso_time(l.time)}, {"line", l.line}}));
    }
    print_json(a);
    return 0;
  }
  for (const auto& l : logs.value()) std::printf("[rank %d%s] %s\n", l.rank, l.is_stderr ? " stderr" : "", l.line.c_str());
  return 0;
}

int runs_metrics(const Args& args, store::RunStore& st, int64_t id) {
  if (args.has("--csv") && args.has("--json")) return report(Status::invalid_input("runs metrics: give --csv or --json, not both"));
  auto r = st.get_run(id);
  if (!r.ok()) return report(r.status());
  auto m = st.metrics(id);
  if (!m.ok()) return report(m.status());
  auto num = [](double v) {
    if (std::isnan(v)) return std::string();
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    return std::string(buf);
  };
  if (args.has("--json")) {
    Json a = Json::array();
    for (const auto& x : m.value()) {
      a.push_back(Json::object({{"rank", x.rank},
                                {"step", static_cast<long long>(x.step)},
                                {"loss", number_or_null(x.loss)},
                                {"lr", number_or_null(x.lr)},
                                {"grad_norm", number_or_null(x.grad_norm)},
                                {"tokens_per_s", number_or_null(x.tokens_per_s)},
                                {"step_ms", number_or_null(x.step_ms)},
                                {"mem_bytes", x.mem_bytes >= 0 ? Json(static_cast<long long>(x.mem_bytes)) : Json()},
                                {"tflops", number_or_null(x.tflops)},
                                {"mfu", number_or_null(x.mfu)},
                                {"time", x.time}}));
    }
    print_json(a);
    return 0;
  }
  if (args.has("--csv")) {
    // tflops and mfu come last: scripts that read the older columns by position still do.
    std::printf("step,rank,loss,lr,grad_norm,tokens_per_s,step_ms,mem_bytes,time,tflops,mfu\n");
    for (const auto& x : m.value()) {
      std::printf("%lld,%d,%s,%s,%s,%s,%s,%s,%.3f,%s,%s\n", static_cast<long long>(x.step), x.rank, num(x.loss).c_str(), num(x.lr).c_str(),
                  num(x.grad_norm).c_str(), num(x.tokens_per_s).c_str(), num(x.step_ms).c_str(),
                  x.mem_bytes >= 0 ? std::to_string(x.mem_bytes).c_str() : "", x.time, num(x.tflops).c_str(), num(x.mfu).c_str());
    }
    return 0;
  }
  std::printf("%6s %5s %10s %10s %10s %12s %9s %12s\n", "STEP", "RANK", "LOSS", "LR", "GRAD_NORM", "TOKENS/S", "STEP_MS", "MEM_BYTES");
  for (const auto& x : m.value()) {
    std::printf("%6lld %5d %10s %10s %10s %12s %9s %12s\n", static_cast<long long>(x.step), x.rank, num(x.loss).c_str(), num(x.lr).c_str(),
                num(x.grad_norm).c_str(), num(x.tokens_per_s).c_str(), num(x.step_ms).c_str(),
                x.mem_bytes >= 0 ? std::to_string(x.mem_bytes).c_str() : "-");
  }
  return 0;
}

// Asks the run's supervisor to stop (through the history: store::cancel_run; it stops every rank,
// TERM then KILL, and records the run cancelled) and waits until the history says the run ended.
int runs_cancel(const Args& args, store::RunStore& st, int64_t id) {
  if (Status s = store::cancel_run(st, id); !s) {
    // A lost run's Slurm job outlives its supervisor: cancel the job itself.
    auto lost = st.get_run(id);
    if (lost.ok() && lost->state == store::RunState::kLost && !lost->job_id.empty()) {
      if (Status c = launch::slurm_cancel(lost->job_id); !c) return report(c.with_context("runs cancel: run " + std::to_string(id)));
      std::printf("run %lld is lost (its supervisor is gone); cancelled its Slurm job %s\n", static_cast<long long>(id), lost->job_id.c_str());
      return 0;
    }
    return report(s.with_context("runs cancel"));
  }
  auto r = st.get_run(id);
  if (!r.ok()) return report(r.status());
  std::string why;
  // The supervisor allows its ranks a grace period (5 s) between TERM and KILL.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    auto now = st.get_run(id);
    if (!now.ok()) return report(now.status());
    if (store::is_terminal(now->state)) {
      if (args.has("--json")) {
        print_json(Json::object({{"id", static_cast<long long>(id)}, {"state", std::string(store::to_string(now->state))}, {"reason", now->reason}}));
      } else {
        std::printf("run %lld %s%s%s\n", static_cast<long long>(id), std::string(store::to_string(now->state)).c_str(),
                    now->reason.empty() ? "" : ": ", now->reason.c_str());
      }
      return now->state == store::RunState::kCancelled ? 0 : 1;
    }
    if (store::check_liveness(now->supervisor, &why) == store::Liveness::kGone) {
      (void)st.transition(id, store::RunState::kLost, why);
      return report(Status::unavailable("runs cancel: run " + std::to_string(id) + ": its supervisor ended without recording the end (" +
                                        why + "); it is now marked lost"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return report(Status::timeout("runs cancel: run " + std::to_string(id) + " did not stop within 30 s; supervisor pid " +
                                std::to_string(r->supervisor.pid) + " still runs"));
}

// Predicted against measured, part by part (plan/calibrate.h), of the run's steady steps.
int runs_compare(const Args& args, store::RunStore& st, int64_t id) {
  auto m = launch::measure_run(st, id);
  if (!m.ok()) return report(m.status().with_context("runs compare"));
  const auto rows = plan::compare(m->plan.estimate, m->step);
  if (args.has("--json")) {
    Json j = Json::object();
    j.set("id", static_cast<long long>(id));
    j.set("device", m->plan.device.name);
    j.set("profile", m->plan.device.profile);
    j.set("steps", Json::array_of(std::vector<long long>{static_cast<long long>(m->first_step), static_cast<long long>(m->last_step)}));
    j.set("bottleneck_rank", m->bottleneck_rank);
    j.set("parts", plan::comparison_to_json(rows));
    Json ranks = Json::array();
    for (const auto& r : m->ranks) {
      Json x = Json::object();
      x.set("rank", r.rank);
      x.set("pp_rank", r.pp_rank);
      x.set("step_s", r.step_s);
      x.set("forward_s", r.forward_s);
      x.set("backward_s", r.backward_s);
      x.set("recompute_s", r.recompute_s);
      x.set("tp_s", r.tp_s);
      x.set("pp_wait_s", r.pp_wait_s);
      x.set("pp_send_s", r.pp_send_s);
      x.set("dp_s", r.dp_s);
      x.set("optimizer_s", r.optimizer_s);
      x.set("sync_s", r.sync_s);
      x.set("mem_bytes", r.mem_bytes);
      ranks.push_back(std::move(x));
    }
    j.set("ranks", std::move(ranks));
    print_json(j);
    return 0;
  }
  std::printf("run %lld: predicted (%s%s) vs measured, medians of steps %lld-%lld, bottleneck rank %d (pp rank %d)\n",
              static_cast<long long>(id), m->plan.device.name.c_str(), m->plan.device.profile.empty() ? ", the catalog's constants" : (", " + m->plan.device.profile).c_str(),
              static_cast<long long>(m->first_step), static_cast<long long>(m->last_step), m->bottleneck_rank,
              m->ranks[static_cast<size_t>(m->bottleneck_rank)].pp_rank);
  std::printf("%s", plan::comparison_to_text(rows).c_str());
  std::printf("  (PP + bubble: pipeline waits and sends and the step's closing sync, against the predicted PP send/recv + bubble)\n");
  return 0;
}

}  // namespace

int cmd_runs(const std::vector<std::string>& argv) {
  ArgSpec spec;
  spec.flags = {"--json", "--csv"};
  spec.options = {"--db", "--rank", "--state", "--name"};
  auto args = parse_args(argv, spec, "runs");
  if (!args.ok()) return report(args.status());
  const auto& a = args.value();
  if (a.positionals.empty()) return report(Status::invalid_input(std::string("runs: expected a subcommand (usage: stagecraft-cli ") + kUsage + ")"));
  const std::string sub = a.positionals[0];
  auto only = [&](std::initializer_list<const char*> allowed) -> Status {
    for (const auto& f : a.flags) {
      if (f == "--json") continue;
      if (std::find(allowed.begin(), allowed.end(), f) == allowed.end()) return Status::invalid_input("runs " + sub + ": " + f + " does not apply here");
    }
    for (const auto& [o, v] : a.options) {
      if (o == "--db") continue;
      if (std::find(allowed.begin(), allowed.end(), o) == allowed.end()) return Status::invalid_input("runs " + sub + ": " + o + " does not apply here");
    }
    return Status::OK();
  };
  Status fits;
  if (sub == "list") {
    fits = only({"--state", "--name"});
  } else if (sub == "show" || sub == "cancel") {
    fits = only({});
  } else if (sub == "logs") {
    fits = only({"--rank"});
  } else if (sub == "metrics") {
    fits = only({"--csv"});
  } else if (sub == "compare") {
    fits = only({});
  } else {
    return report(Status::invalid_input("runs: unknown subcommand '" + sub + "'; use list, show, logs, metrics, compare or cancel"));
  }
  if (!fits) return report(fits);
  int64_t id = 0;
  if (sub != "list") {
    auto parsed = parse_id(sub, a.positionals);
    if (!parsed.ok()) return report(parsed.status());
    id = parsed.value();
  }
  auto st = open_history(a);
  if (!st.ok()) return report(st.status());
  if (sub == "list") return runs_list(a, st.value().get());
  if (!st.value()) return report(no_such_run(id, a));
  store::RunStore& s = *st.value();
  if (sub == "show") return runs_show(a, s, id);
  if (sub == "logs") return runs_logs(a, s, id);
  if (sub == "metrics") return runs_metrics(a, s, id);
  if (sub == "compare") return runs_compare(a, s, id);
  return runs_cancel(a, s, id);
}

}  // namespace stagecraft::cli
