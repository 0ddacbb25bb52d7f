// Worker events (launch/worker_events.h): every kind survives encode -> decode (a start with its
// kernel paths), the wire format stays what histories already hold, and malformed, partial or
// wrong-typed lines are errors that name the problem; a step's events from the trainer's
// StepStats (launch/step_events.h).
#include "stagecraft/launch/worker_events.h"
#include "stagecraft/launch/step_events.h"

#include <QtTest>

#include <cmath>
#include <string>

using namespace stagecraft;
using namespace stagecraft::launch;

Q_DECLARE_METATYPE(stagecraft::launch::WorkerEvent)

class TestWorkerEvents : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void roundTrip_data() {
    QTest::addColumn<WorkerEvent>("event");
    QTest::newRow("start") << WorkerEvent{StartEvent{.rank = 3, .world_size = 8, .dp = 2, .tp = 2, .pp = 2, .step = 10, .steps = 100}};
    QTest::newRow("start with cp") << WorkerEvent{StartEvent{.rank = 3, .world_size = 16, .dp = 2, .tp = 2, .pp = 2, .cp = 2, .step = 0, .steps = 100}};
    QTest::newRow("start with kernels") << WorkerEvent{StartEvent{
        .rank = 1, .world_size = 2, .dp = 2, .tp = 1, .pp = 1, .step = 0, .steps = 10,
        .kernels = {{"gemm", "cuBLAS, bf16 tensor cores"}, {"attention", "flash, tensor cores (mma.sync)"}, {"layernorm backward", "4 warps a block"}}}};
    QTest::newRow("step") << WorkerEvent{StepEvent{.rank = 1, .step = 7, .loss = 2.5, .lr = 1e-4, .grad_norm = 0.75,
                                                   .tokens_per_s = 12345.5, .step_ms = 81.25, .mem_bytes = int64_t(3) << 32}};
    QTest::newRow("fp16 step skipped") << WorkerEvent{StepEvent{.rank = 0, .step = 12, .loss = 3.25, .lr = 1e-4, .grad_norm = 0,
                                                                .loss_scale = 32768, .skipped = true}};
    QTest::newRow("step with a diverged loss") << WorkerEvent{StepEvent{.rank = 0, .step = 9, .loss = NAN, .lr = 1e-3}};
    QTest::newRow("another program's TFLOP/s and MFU") << WorkerEvent{StepEvent{.rank = 0, .step = 10, .loss = 7.25, .tflops = 567.75, .mfu = 0.5742}};
    QTest::newRow("mixture of experts") << WorkerEvent{StepEvent{.rank = 3, .step = 5, .loss = 2.75, .lr = 1e-3, .lm_loss = 2.5, .aux_loss = 0.25,
                                                                 .moe_layers = {1, 2}, .moe_load = {{3, 0, 5, 8}, {4, 4, 4, 4}}, .moe_dropped = 2}};
    QTest::newRow("checkpoint") << WorkerEvent{CheckpointEvent{.rank = 0, .step = 50, .path = "/tmp/ck \"a\"/step-50"}};
    QTest::newRow("done") << WorkerEvent{DoneEvent{.rank = 2, .step = 100, .loss = 1.125}};
    QTest::newRow("error with rank") << WorkerEvent{ErrorEvent{.rank = 5, .message = "train.data=x.bin: cannot open"}};
    QTest::newRow("error before the rank is known") << WorkerEvent{ErrorEvent{.message = "RANK: not set"}};
    QTest::newRow("timing") << WorkerEvent{TimingEvent{.rank = 2, .step = 4, .start = 1764000000.25, .step_ms = 58.5, .forward_ms = 10.25,
                                                       .backward_ms = 20.5, .recompute_ms = 1, .tp_ms = 2, .pp_wait_ms = 3, .pp_send_ms = 0.5,
                                                       .dp_ms = 4, .optimizer_ms = 0.75, .sync_ms = 0.125, .ops = {}}};
    QTest::newRow("timing with cp") << WorkerEvent{TimingEvent{.rank = 1, .step = 4, .step_ms = 30, .forward_ms = 10, .backward_ms = 15,
                                                               .tp_ms = 1, .cp_ms = 6.5, .ops = {}}};
    QTest::newRow("timing with ops") << WorkerEvent{TimingEvent{.rank = 0, .step = 3, .step_ms = 5, .ops = {{false, 0, 1, 0.5, 1.5}, {true, 1, 1, 2, 4.25}}}};
  }
  void roundTrip() {
    QFETCH(WorkerEvent, event);
    const std::string line = encode_event(event);
    QVERIFY(!line.empty());
    QCOMPARE(line.back(), '\n');
    QCOMPARE(line.find('\n'), line.size() - 1);  // one line
    auto back = decode_event(line);
    QVERIFY2(back.ok(), back.status().message().c_str());
    QCOMPARE(back->index(), event.index());
    QVERIFY2(same_event(back.value(), event), line.c_str());
    QCOMPARE(event_rank(back.value()), event_rank(event));
    QCOMPARE(encode_event(back.value()), line);
  }

  // The exact lines the worker wrote before the types existed (keys in this order), so that
  // histories and tools that read them keep working.
  void wireFormat_data() {
    QTest::addColumn<WorkerEvent>("event");
    QTest::addColumn<QString>("line");
    QTest::newRow("step") << WorkerEvent{StepEvent{.rank = 0, .step = 3, .loss = 2.5, .lr = 0.001, .grad_norm = 0.5,
                                                   .tokens_per_s = 1000, .step_ms = 12.5, .mem_bytes = 1024}}
                          << "{\"event\":\"step\",\"rank\":0,\"step\":3,\"loss\":2.5,\"lr\":0.001,\"grad_norm\":0.5,\"tokens_per_s\":1000.0,\"step_ms\":12.5,\"mem_bytes\":1024}";
    QTest::newRow("fp16: the scale, and skipped only when true")
        << WorkerEvent{StepEvent{.rank = 0, .step = 3, .loss = 2.5, .lr = 0.001, .grad_norm = 0, .tokens_per_s = 1000, .step_ms = 12.5,
                                 .loss_scale = 32768, .skipped = true}}
        << "{\"event\":\"step\",\"rank\":0,\"step\":3,\"loss\":2.5,\"lr\":0.001,\"grad_norm\":0.0,\"tokens_per_s\":1000.0,\"step_ms\":12.5,\"loss_scale\":32768.0,\"skipped\":true}";
    QTest::newRow("TFLOP/s and MFU only when known")
        << WorkerEvent{StepEvent{.rank = 0, .step = 3, .loss = 2.5, .tflops = 1.5, .mfu = 0.25}}
        << "{\"event\":\"step\",\"rank\":0,\"step\":3,\"loss\":2.5,\"lr\":null,\"grad_norm\":null,\"tokens_per_s\":null,\"step_ms\":null,\"tflops\":1.5,\"mfu\":0.25}";
    // A mixture of experts: both losses, each MoE layer's index with its tokens per expert, the
    // dropped assignments (docs/runs.md).
    QTest::newRow("mixture of experts")
        << WorkerEvent{StepEvent{.rank = 0, .step = 3, .loss = 2.5, .lm_loss = 2.25, .aux_loss = 0.25, .moe_layers = {1, 3},
                                 .moe_load = {{2, 0, 6}, {1, 1, 6}}, .moe_dropped = 0}}
        << "{\"event\":\"step\",\"rank\":0,\"step\":3,\"loss\":2.5,\"lr\":null,\"grad_norm\":null,\"tokens_per_s\":null,\"step_ms\":null,"
           "\"lm_loss\":2.25,\"aux_loss\":0.25,\"moe_layers\":[1,3],\"moe_load\":[[2,0,6],[1,1,6]],\"moe_dropped\":0}";
    QTest::newRow("timing with ep") << WorkerEvent{TimingEvent{.rank = 0, .step = 1, .step_ms = 2, .ep_ms = 0.75}}
                                    << "{\"event\":\"timing\",\"rank\":0,\"step\":1,\"start\":0.0,\"step_ms\":2.0,\"forward_ms\":0.0,"
                                       "\"backward_ms\":0.0,\"recompute_ms\":0.0,\"tp_ms\":0.0,\"ep_ms\":0.75,\"pp_wait_ms\":0.0,\"pp_send_ms\":0.0,"
                                       "\"dp_ms\":0.0,\"optimizer_ms\":0.0,\"sync_ms\":0.0}";
    // The kernel paths in the device's order; a start without them is written as before.
    QTest::newRow("start with kernels")
        << WorkerEvent{StartEvent{.rank = 0, .world_size = 1, .dp = 1, .tp = 1, .pp = 1, .step = 0, .steps = 5,
                                  .kernels = {{"gemm", "OpenBLAS sgemm (2 threads)"}, {"attention", "standard, causal blocks of OpenBLAS"}}}}
        << "{\"event\":\"start\",\"rank\":0,\"world_size\":1,\"dp\":1,\"tp\":1,\"pp\":1,\"step\":0,\"steps\":5,"
           "\"kernels\":{\"gemm\":\"OpenBLAS sgemm (2 threads)\",\"attention\":\"standard, causal blocks of OpenBLAS\"}}";
    QTest::newRow("start without kernels") << WorkerEvent{StartEvent{.rank = 0, .world_size = 1, .dp = 1, .tp = 1, .pp = 1, .step = 0, .steps = 5}}
                                           << "{\"event\":\"start\",\"rank\":0,\"world_size\":1,\"dp\":1,\"tp\":1,\"pp\":1,\"step\":0,\"steps\":5}";
    QTest::newRow("diverged loss is null") << WorkerEvent{DoneEvent{.rank = 1, .step = 4, .loss = NAN}}
                                           << "{\"event\":\"done\",\"rank\":1,\"step\":4,\"loss\":null}";
    QTest::newRow("error without rank") << WorkerEvent{ErrorEvent{.message = "no RANK"}}
                                        << "{\"event\":\"error\",\"message\":\"no RANK\"}";
    QTest::newRow("checkpoint") << WorkerEvent{CheckpointEvent{.rank = 0, .step = 2, .path = "/c"}}
                                << "{\"event\":\"checkpoint\",\"rank\":0,\"step\":2,\"path\":\"/c\"}";
    // Times to the microsecond: a clock read resolves no finer, and lines stay short.
    QTest::newRow("timing") << WorkerEvent{TimingEvent{.rank = 1, .step = 3, .start = 1764000000.1234567, .step_ms = 12.3456789, .forward_ms = 4,
                                                       .ops = {{true, 1, 0, 0.0004, 2.0005}}}}
                            << "{\"event\":\"timing\",\"rank\":1,\"step\":3,\"start\":1764000000.123457,\"step_ms\":12.346,\"forward_ms\":4.0,"
                               "\"backward_ms\":0.0,\"recompute_ms\":0.0,\"tp_ms\":0.0,\"pp_wait_ms\":0.0,\"pp_send_ms\":0.0,\"dp_ms\":0.0,"
                               "\"optimizer_ms\":0.0,\"sync_ms\":0.0,\"ops\":[[\"b\",1,0,0.0,2.001]]}";
    // A run with context parallelism adds its cp group's time after tp's.
    QTest::newRow("timing with cp") << WorkerEvent{TimingEvent{.rank = 0, .step = 1, .step_ms = 2, .tp_ms = 0.5, .cp_ms = 0.25}}
                                    << "{\"event\":\"timing\",\"rank\":0,\"step\":1,\"start\":0.0,\"step_ms\":2.0,\"forward_ms\":0.0,"
                                       "\"backward_ms\":0.0,\"recompute_ms\":0.0,\"tp_ms\":0.5,\"cp_ms\":0.25,\"pp_wait_ms\":0.0,\"pp_send_ms\":0.0,"
                                       "\"dp_ms\":0.0,\"optimizer_ms\":0.0,\"sync_ms\":0.0}";
  }
  void wireFormat() {
    QFETCH(WorkerEvent, event);
    QFETCH(QString, line);
    QCOMPARE(QString::fromStdString(encode_event(event)), line + "\n");
  }

  void decodesWhatOlderWorkersWrote() {
    // Older workers put "rank" last and may leave optional fields out.
    auto e = decode_event("{\"event\":\"step\",\"step\":12,\"loss\":3.5,\"rank\":2}\r\n");
    QVERIFY2(e.ok(), e.status().message().c_str());
    const auto* step = std::get_if<StepEvent>(&e.value());
    QVERIFY(step);
    QCOMPARE(step->rank, 2);
    QCOMPARE(step->step, int64_t(12));
    QCOMPARE(step->loss, 3.5);
    QVERIFY(std::isnan(step->lr));
    QCOMPARE(step->mem_bytes, int64_t(-1));
    auto start = decode_event("{\"event\":\"start\"}");
    QVERIFY(start.ok());
    QCOMPARE(std::get<StartEvent>(start.value()), StartEvent{});
    // A start from before the kernel paths were recorded: none, and none written back.
    const char* before = "{\"event\":\"start\",\"rank\":1,\"world_size\":2,\"dp\":2,\"tp\":1,\"pp\":1,\"step\":0,\"steps\":3}";
    auto old_start = decode_event(before);
    QVERIFY2(old_start.ok(), old_start.status().message().c_str());
    QVERIFY(std::get<StartEvent>(old_start.value()).kernels.empty());
    QCOMPARE(encode_event(old_start.value()), std::string(before) + "\n");
    auto null_kernels = decode_event("{\"event\":\"start\",\"kernels\":null}");
    QVERIFY2(null_kernels.ok(), null_kernels.status().message().c_str());
    QVERIFY(std::get<StartEvent>(null_kernels.value()).kernels.empty());
  }

  void unknownFieldsAreIgnored() {
    auto e = decode_event("{\"event\":\"done\",\"rank\":0,\"step\":5,\"loss\":1.5,\"gpu_temp\":71,\"extra\":{\"a\":[1,2]}}");
    QVERIFY2(e.ok(), e.status().message().c_str());
    QVERIFY(same_event(e.value(), WorkerEvent{DoneEvent{.rank = 0, .step = 5, .loss = 1.5}}));
    QCOMPARE(QString::fromStdString(encode_event(e.value())), QString("{\"event\":\"done\",\"rank\":0,\"step\":5,\"loss\":1.5}") + "\n");
  }

  void errors_data() {
    QTest::addColumn<QString>("line");
    QTest::addColumn<QString>("message");
    QTest::newRow("a log line") << "hello from rank 0" << "not a JSON object line";
    QTest::newRow("empty") << "" << "not a JSON object line";
    QTest::newRow("cut off") << "{\"event\":\"step\",\"step\":3,\"lo" << "worker event";
    QTest::newRow("an array") << "[{\"event\":\"step\"}]" << "not a JSON object line";
    QTest::newRow("no event field") << "{\"step\":3}" << "no string \"event\" field";
    QTest::newRow("event not a string") << "{\"event\":3}" << "no string \"event\" field";
    QTest::newRow("unknown kind") << "{\"event\":\"eval\",\"loss\":2}" << "unknown kind \"eval\"";
    QTest::newRow("step without step") << "{\"event\":\"step\",\"loss\":2}" << "worker event \"step\": no \"step\" field";
    QTest::newRow("step as a string") << "{\"event\":\"step\",\"step\":\"7\"}" << "\"step\" must be an integer, got \"7\"";
    QTest::newRow("fractional step") << "{\"event\":\"step\",\"step\":7.5}" << "\"step\" must be an integer, got 7.5";
    QTest::newRow("loss as a string") << "{\"event\":\"step\",\"step\":1,\"loss\":\"low\"}" << "\"loss\" must be a number (or null), got \"low\"";
    QTest::newRow("negative rank") << "{\"event\":\"done\",\"rank\":-4}" << "\"rank\" must be 0 or more, got -4";
    QTest::newRow("rank too large") << "{\"event\":\"done\",\"rank\":99999999999}" << "\"rank\" must be an integer";
    QTest::newRow("checkpoint without path") << "{\"event\":\"checkpoint\",\"step\":2}" << "worker event \"checkpoint\": no \"path\" field";
    QTest::newRow("checkpoint path not a string") << "{\"event\":\"checkpoint\",\"step\":2,\"path\":5}" << "\"path\" must be a string, got 5";
    QTest::newRow("error without message") << "{\"event\":\"error\",\"rank\":1}" << "worker event \"error\": no \"message\" field";
    QTest::newRow("error message null") << "{\"event\":\"error\",\"message\":null}" << "no \"message\" field";
    QTest::newRow("skipped as a number") << "{\"event\":\"step\",\"step\":1,\"skipped\":1}" << "\"skipped\" must be true or false, got 1";
    QTest::newRow("start dp as bool") << "{\"event\":\"start\",\"dp\":true}" << "\"dp\" must be an integer, got true";
    QTest::newRow("kernels as an array") << "{\"event\":\"start\",\"kernels\":[\"gemm\"]}"
                                         << "worker event \"start\": \"kernels\" must be an object of strings (work: path), got an array";
    QTest::newRow("kernel path not a string") << "{\"event\":\"start\",\"kernels\":{\"gemm\":\"cuBLAS\",\"attention\":3}}"
                                              << "\"kernels\" must be an object of strings (work: path), got \"attention\": 3";
    QTest::newRow("moe_load without moe_layers") << "{\"event\":\"step\",\"step\":1,\"moe_load\":[[1]]}"
                                                 << "\"moe_layers\" and \"moe_load\" must be arrays of the same length";
    QTest::newRow("moe_load with a fraction") << "{\"event\":\"step\",\"step\":1,\"moe_layers\":[1],\"moe_load\":[[1.5]]}"
                                              << "\"moe_load\" holds a count that is not a whole number";
    QTest::newRow("moe_layers not indices") << "{\"event\":\"step\",\"step\":1,\"moe_layers\":[\"a\"],\"moe_load\":[[1]]}"
                                            << "\"moe_layers\" holds an entry that is not a layer index";
    QTest::newRow("timing without step") << "{\"event\":\"timing\",\"forward_ms\":1}" << "worker event \"timing\": no \"step\" field";
    QTest::newRow("timing part as a string") << "{\"event\":\"timing\",\"step\":1,\"dp_ms\":\"x\"}" << "\"dp_ms\" must be a number";
    QTest::newRow("timing ops not an array") << "{\"event\":\"timing\",\"step\":1,\"ops\":{}}" << "\"ops\" must be an array";
    QTest::newRow("timing op too short") << "{\"event\":\"timing\",\"step\":1,\"ops\":[[\"f\",0,0,1]]}" << "not a 5-element array";
    QTest::newRow("timing op kind") << "{\"event\":\"timing\",\"step\":1,\"ops\":[[\"x\",0,0,1,2]]}" << "whose kind is not";
    QTest::newRow("timing op chunk") << "{\"event\":\"timing\",\"step\":1,\"ops\":[[\"f\",-1,0,1,2]]}" << "chunk or micro-batch";
    QTest::newRow("timing op time") << "{\"event\":\"timing\",\"step\":1,\"ops\":[[\"f\",0,0,\"a\",2]]}" << "non-number";
  }
  void errors() {
    QFETCH(QString, line);
    QFETCH(QString, message);
    auto e = decode_event(line.toStdString());
    QVERIFY2(!e.ok(), qPrintable(line));
    QCOMPARE(e.status().code(), Status::Code::kInvalidInput);
    const QString got = QString::fromStdString(e.status().message());
    QVERIFY2(got.contains(message), qPrintable(got));
    QVERIFY2(!got.contains('\n'), qPrintable(got));
  }

  void names() {
    QCOMPARE(event_name(StartEvent{}), std::string_view("start"));
    QCOMPARE(event_name(StepEvent{}), std::string_view("step"));
    QCOMPARE(event_name(TimingEvent{}), std::string_view("timing"));
    QCOMPARE(event_name(CheckpointEvent{}), std::string_view("checkpoint"));
    QCOMPARE(event_name(DoneEvent{}), std::string_view("done"));
    QCOMPARE(event_name(ErrorEvent{}), std::string_view("error"));
    QVERIFY(!same_event(StepEvent{.step = 1}, StepEvent{.step = 2}));
    QVERIFY(!same_event(StepEvent{.step = 1}, DoneEvent{.step = 1}));
  }

  // The steps whose timing carries a timeline: the first three, every tenth, the last.
  void timelineSteps() {
    std::vector<int64_t> kept;
    for (int64_t s = 1; s <= 25; ++s) {
      if (has_timeline(s, 25)) kept.push_back(s);
    }
    QCOMPARE(kept, (std::vector<int64_t>{1, 2, 3, 10, 20, 25}));
  }

  // step_events.h: every figure of the trainer's step reaches its events; the loss scale only when
  // there is one, the experts' load only where asked, the ops only on timeline steps.
  void eventsOfAStep() {
    runtime::StepStats st;
    st.step = 4;
    st.loss = 2.75;
    st.lr = 1e-3;
    st.grad_norm = 0.5;
    st.step_ms = 81.25;
    st.tokens_per_s = 1000.5;
    st.mem_bytes = size_t(3) << 32;
    st.timing = {.start_unix_s = 1764000000.25, .forward_ms = 10.25, .backward_ms = 20.5, .recompute_ms = 1, .tp_ms = 2, .pp_wait_ms = 3,
                 .pp_send_ms = 0.5, .dp_ms = 4, .cp_ms = 6.5, .ep_ms = 0.25, .optimizer_ms = 0.75, .sync_ms = 0.125,
                 .ops = {{.backward = false, .chunk = 0, .micro_batch = 1, .start_ms = 1.5, .end_ms = 4.5},
                         {.backward = true, .chunk = 1, .micro_batch = 0, .start_ms = 5, .end_ms = 9}}};
    const StepEvent dense = step_event(st, true);
    QVERIFY(same_event(dense, StepEvent{.step = 4, .loss = 2.75, .lr = 1e-3, .grad_norm = 0.5, .tokens_per_s = 1000.5, .step_ms = 81.25,
                                        .mem_bytes = int64_t(3) << 32}));
    QVERIFY(std::isnan(dense.loss_scale) && std::isnan(dense.lm_loss) && dense.moe_layers.empty() && dense.moe_dropped == -1);

    st.loss_scale = 65536;
    st.skipped = true;
    st.lm_loss = 2.5;
    st.aux_loss = 0.25;
    st.moe_layers = {1, 3};
    st.moe_load = {{3, 0, 5, 8}, {4, 4, 4, 4}};
    st.moe_dropped = 2;
    const StepEvent reporting = step_event(st, true), other = step_event(st, false);
    QCOMPARE(reporting.loss_scale, 65536.0);
    QVERIFY(reporting.skipped);
    QCOMPARE(reporting.lm_loss, 2.5);
    QCOMPARE(reporting.aux_loss, 0.25);
    QCOMPARE(reporting.moe_layers, (std::vector<int>{1, 3}));
    QCOMPARE(reporting.moe_load, st.moe_load);
    QCOMPARE(reporting.moe_dropped, int64_t(2));
    QCOMPARE(other.lm_loss, 2.5);  // both losses on every rank, the load on one
    QVERIFY(other.moe_layers.empty() && other.moe_load.empty() && other.moe_dropped == -1);

    const TimingEvent off_timeline = timing_event(st, 100);  // step 4 of 100: no timeline
    QVERIFY(same_event(off_timeline, TimingEvent{.step = 4, .start = 1764000000.25, .step_ms = 81.25, .forward_ms = 10.25, .backward_ms = 20.5,
                                                .recompute_ms = 1, .tp_ms = 2, .pp_wait_ms = 3, .pp_send_ms = 0.5, .dp_ms = 4,
                                                .optimizer_ms = 0.75, .sync_ms = 0.125, .cp_ms = 6.5, .ep_ms = 0.25, .ops = {}}));
    const TimingEvent last = timing_event(st, 4);  // the run's last step: its timeline
    QCOMPARE(last.ops, (std::vector<TimingEvent::Op>{{false, 0, 1, 1.5, 4.5}, {true, 1, 0, 5, 9}}));
  }
};

QTEST_APPLESS_MAIN(TestWorkerEvents)
#include "tst_worker_events.moc"
