// stagecraft-worker: one training rank. Started by `stagecraft-cli run` (or any torchrun-style
// launcher) with the environment of launch/worker_env.h; links the engine only, never Qt.
//
// It fetches the run configuration from the run's store (key "config"), plans it exactly as
// the launcher did, joins its groups over Gloo, trains, and reports on stdout one JSON object
// per line (DESIGN.md §9):
//   {"event":"start","rank":R,"world_size":W,"dp":..,"tp":..,"pp":..,"step":S}
//   {"event":"step","rank":R,"step":N,"loss":..,"lr":..,"grad_norm":..,"tokens_per_s":..,"step_ms":..,"mem_bytes":..}
//   {"event":"checkpoint","rank":R,"step":N,"path":"..."}        (rank 0)
//   {"event":"done","rank":R,"step":N,"loss":..}
//   {"event":"error","rank":R,"message":"..."}                    then exit status 1 (2: bad input)
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "stagecraft/comm/gloo_communicator.h"
#include "stagecraft/comm/process_groups.h"
#include "stagecraft/comm/rendezvous.h"
#include "stagecraft/config/config_io.h"
#include "stagecraft/core/json.h"
#include "stagecraft/launch/worker_env.h"
#include "stagecraft/plan/plan.h"
#include "stagecraft/runtime/kernels.h"
#include "stagecraft/runtime/token_data.h"
#include "stagecraft/runtime/trainer.h"

using namespace stagecraft;

namespace {

int g_rank = -1;

void emit(Json event) {
  if (g_rank >= 0 && !event.find("rank")) event.set("rank", g_rank);
  const std::string line = event.dump() + "\n";
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

int fail(const Status& s) {
  Json e = Json::object();
  e.set("event", "error");
  e.set("message", s.message());
  emit(std::move(e));
  return s.code() == Status::Code::kInvalidInput ? 2 : 1;
}

int run() {
  auto env = launch::read_worker_env();
  if (!env.ok()) return fail(env.status());
  g_rank = env->rank;
  runtime::cpu::set_num_threads(env->threads);
  comm::RendezvousClientOptions so;
  so.host = env->master_addr;
  so.port = env->master_port;
  so.token = env->token;
  auto store = comm::RendezvousClient::connect(so);
  if (!store.ok()) return fail(store.status());
  auto yaml = store.value()->get("config");
  if (!yaml.ok()) return fail(yaml.status().with_context("fetching the run configuration"));
  auto cfg = config::parse_config(yaml.value(), "run configuration", {});
  if (!cfg.ok()) return fail(cfg.status());
  auto plan = plan::make_plan(cfg.value());
  if (!plan.ok()) return fail(plan.status());
  const auto& topo = plan->topology;
  if (topo.world_size() != env->world_size) {
    return fail(Status::invalid_input("WORLD_SIZE=" + std::to_string(env->world_size) + " but the plan has " +
                                      std::to_string(topo.world_size()) + " ranks"));
  }
  auto data = runtime::TokenData::open(cfg->train.data, static_cast<size_t>(cfg->model.seq_len) + 1);
  if (!data.ok()) return fail(data.status());

  auto device = comm::GlooDevice::create(comm::gloo_device_options_from_env(*store.value()));
  if (!device.ok()) return fail(device.status());
  comm::GlooOptions opt;
  opt.timeout = std::chrono::milliseconds(static_cast<long long>(cfg->train.hang_timeout_s * 1000));
  const int r = env->rank;
  auto groups = comm::build_process_groups(topo, r, cfg->model.tied_embeddings,
                                           comm::gloo_communicator_factory(*store.value(), device.value(), r, opt));
  if (!groups.ok()) return fail(groups.status());
  auto layout = comm::rank_layout_of(plan.value(), r);
  if (!layout.ok()) return fail(layout.status());

  auto trainer = runtime::Trainer::create(cfg.value(), layout.value(), groups->trainer_groups(), &data.value());
  if (!trainer.ok()) return fail(trainer.status());
  if (Status s = trainer.value()->start(); !s) return fail(s);
  {
    Json e = Json::object();
    e.set("event", "start");
    e.set("world_size", topo.world_size());
    e.set("dp", plan->dp);
    e.set("tp", plan->tp);
    e.set("pp", plan->pp);
    e.set("step", static_cast<long long>(trainer.value()->step()));
    e.set("steps", cfg->train.steps);
    emit(std::move(e));
  }
  double last_loss = 0;
  const int every = cfg->train.checkpoint_every;
  while (trainer.value()->step() < cfg->train.steps) {
    auto st = trainer.value()->train_step();
    if (!st.ok()) return fail(st.status());
    last_loss = st->loss;
    Json e = Json::object();
    e.set("event", "step");
    e.set("step", static_cast<long long>(st->step));
    e.set("loss", st->loss);
    e.set("lr", st->lr);
    e.set("grad_norm", st->grad_norm);
    e.set("tokens_per_s", st->tokens_per_s);
    e.set("step_ms", st->step_ms);
    e.set("mem_bytes", static_cast<unsigned long long>(st->mem_bytes));
    emit(std::move(e));
    const bool last = trainer.value()->step() == cfg->train.steps;
    if (last || (every > 0 && st->step % every == 0)) {
      auto path = trainer.value()->save_checkpoint();
      if (!path.ok()) return fail(path.status());
      if (r == 0) {
        Json c = Json::object();
        c.set("event", "checkpoint");
        c.set("step", static_cast<long long>(st->step));
        c.set("path", path.value());
        emit(std::move(c));
      }
    }
  }
  Json d = Json::object();
  d.set("event", "done");
  d.set("step", static_cast<long long>(trainer.value()->step()));
  d.set("loss", last_loss);
  emit(std::move(d));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--version") {
    std::printf("stagecraft-worker %s\n", STAGECRAFT_VERSION);  // preflight compares it with the launcher's
    return 0;
  }
  try {
    return run();
  } catch (const std::bad_alloc&) {
    return fail(Status::unavailable("out of memory"));
  } catch (const std::exception& e) {
    return fail(Status::internal(std::string("internal error: ") + e.what()));
  }
}
