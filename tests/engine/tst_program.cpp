// launch/program.h: another program's command line from the run's configuration (interpreter,
// the plan as Megatron-LM's or DeepSpeed's arguments, launch.args, the arguments after --), the
// files it needs, and the check that it can start here.
#include "stagecraft/config/config_io.h"
#include "stagecraft/core/json.h"
#include "stagecraft/launch/program.h"

#include <QtTest>

#include <fstream>
#include <sstream>

using namespace stagecraft;
using namespace stagecraft::launch;

namespace {

// An 8-rank plan, dp 2 x tp 2 x pp 2, with `overrides`.
config::RunConfig plan_config(std::vector<std::string> overrides) {
  auto c = config::parse_config(
      "name: gpt-small\n"
      "cluster: {nodes: 1, gpus_per_node: 8}\n"
      "model: {layers: 8, hidden: 256, heads: 8, seq_len: 128}\n"
      "parallel: {dp: 2, tp: 2, pp: 2}\n"
      "train: {global_batch: 16, micro_batch: 2, steps: 50, lr: 1.0e-4}\n",
      "test.yaml", overrides);
  if (!c.ok()) qFatal("%s", c.status().message().c_str());
  return c.value();
}

QString words(const std::vector<std::string>& argv) {
  QStringList out;
  for (const auto& a : argv) out << QString::fromStdString(a);
  return out.join('|');
}

}  // namespace

class TestProgram : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void commandLine_data() {
    QTest::addColumn<QStringList>("overrides");
    QTest::addColumn<QStringList>("extra");
    QTest::addColumn<QString>("argv");  // joined by '|'
    QTest::newRow("a program alone") << QStringList{"launch.program=./train.sh"} << QStringList{} << "./train.sh";
    QTest::newRow("a python program runs with launch.python")
        << QStringList{"launch.program=train.py", "launch.python=/usr/bin/python3"} << QStringList{} << "/usr/bin/python3|train.py";
    QTest::newRow("launch.args split like a shell's, then the extra arguments")
        << QStringList{"launch.program=train.py", "launch.args=\"--data 'my data' --x=\\\\\\\"y\\\\\\\"\""}
        << QStringList{"--lr", "1e-3 two"} << "python3|train.py|--data|my data|--x=\"y\"|--lr|1e-3 two";
    QTest::newRow("megatron: the plan's arguments first")
        << QStringList{"launch.program=pretrain_gpt.py", "launch.framework=megatron"} << QStringList{"--data-path", "d"}
        << "env|CUDA_DEVICE_MAX_CONNECTIONS=1|python3|pretrain_gpt.py|--tensor-model-parallel-size|2|--pipeline-model-parallel-size|2|--num-layers|8|--hidden-size|256|"
           "--num-attention-heads|8|--ffn-hidden-size|1024|--seq-length|128|--max-position-embeddings|128|--micro-batch-size|2|"
           "--global-batch-size|16|--train-iters|50|--lr|1e-04|--min-lr|0.0|--lr-decay-style|cosine|--weight-decay|0.0|--adam-beta1|0.9|"
           "--adam-beta2|0.95|--clip-grad|1.0|--seed|1234|--overlap-grad-reduce|--data-path|d";
    QTest::newRow("megatron: an uneven split as a layout")
        << QStringList{"launch.program=pretrain_gpt.py", "launch.framework=megatron", "pipeline.partition=[0, 0, 0, 0, 0, 1, 1, 1]"}
        << QStringList{} << "env|CUDA_DEVICE_MAX_CONNECTIONS=1|python3|pretrain_gpt.py|--tensor-model-parallel-size|2|--pipeline-model-parallel-size|2|--decoder-first-pipeline-num-layers|5|--num-layers|8";
    QTest::newRow("megatron without tensor parallelism: no environment")
        << QStringList{"launch.program=pretrain_gpt.py", "launch.framework=megatron", "parallel.tp=1", "parallel.dp=4"} << QStringList{}
        << "python3|pretrain_gpt.py|--tensor-model-parallel-size|1|--pipeline-model-parallel-size|2|--num-layers|8";
    QTest::newRow("deepspeed: its config as a file")
        << QStringList{"launch.program=train.py", "launch.framework=deepspeed", "launch.args=--deepspeed_extra 1"} << QStringList{}
        << "python3|train.py|--deepspeed|--deepspeed_config|.stagecraft/gpt-small-ds_config.json|--deepspeed_extra|1";
    QTest::newRow("a name that is no file name") << QStringList{"name=my run/1", "launch.program=t.py", "launch.framework=deepspeed"}
                                                << QStringList{} << "python3|t.py|--deepspeed|--deepspeed_config|.stagecraft/my_run_1-ds_config.json";
    QTest::newRow("torchtitan: its options, then the extra arguments")
        << QStringList{"launch.program=train.py", "launch.framework=torchtitan", "train.precision=bf16", "parallel.zero=1"}
        << QStringList{"--module", "torchtitan_recipes.llama3", "--config", "c"}
        << "python3|train.py|--parallelism.data_parallel_replicate_degree|1|--parallelism.data_parallel_shard_degree|2|"
           "--parallelism.tensor_parallel_degree|2|--parallelism.pipeline_parallel_degree|2|--parallelism.pipeline_parallel_schedule|1F1B|"
           "--parallelism.num_pp_microbatches|4|--parallelism.pipeline_parallel_layers_per_stage|4|"
           "--training.num_tokens_per_microbatch_per_dp_rank|256|--training.num_tokens_per_train_step|2048|--training.max_context_length|128|"
           "--training.max_norm|1.0|--training.steps|50|--training.mixed_precision_param|bfloat16|--lr_scheduler.warmup_steps|0|"
           "--lr_scheduler.decay_type|cosine|--lr_scheduler.min_lr_factor|0.0|--debug.seed|1234|--module|torchtitan_recipes.llama3|--config|c";
  }

  // A Slurm run's files go in its run directory (an absolute files_dir), the command naming them there.
  void filesGoWhereTheRunSays() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const auto c = plan_config({"launch.program=train.py", "launch.framework=deepspeed"});
    const std::string run_dir = dir.path().toStdString() + "/runs/slurm-run-3";
    auto cmd = prepare_program(c, {}, "/nonexistent-cwd", run_dir);
    QVERIFY2(cmd.ok(), cmd.ok() ? "" : cmd.status().message().c_str());
    QCOMPARE(words(cmd->argv), QString::fromStdString("python3|train.py|--deepspeed|--deepspeed_config|" + run_dir + "/gpt-small-ds_config.json"));
    QVERIFY(QFile::exists(QString::fromStdString(run_dir + "/gpt-small-ds_config.json")));
  }
  void commandLine() {
    QFETCH(QStringList, overrides);
    QFETCH(QStringList, extra);
    QFETCH(QString, argv);
    std::vector<std::string> o, e;
    for (const auto& s : overrides) o.push_back(s.toStdString());
    for (const auto& s : extra) e.push_back(s.toStdString());
    auto cmd = program_command(plan_config(o), e);
    QVERIFY2(cmd.ok(), cmd.ok() ? "" : cmd.status().message().c_str());
    const QString got = words(cmd->argv);
    if (argv.endsWith("--num-layers|8")) {
      QVERIFY2(got.startsWith(argv), qPrintable(got));  // rows that stop at --num-layers give the line's start
    } else {
      QCOMPARE(got, argv);
    }
  }

  void deepspeedConfigIsWrittenWhereTheCommandSays() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const auto c = plan_config({"launch.program=train.py", "launch.framework=deepspeed"});
    auto cmd = prepare_program(c, {}, dir.path().toStdString());
    QVERIFY2(cmd.ok(), cmd.ok() ? "" : cmd.status().message().c_str());
    QCOMPARE(cmd->files.size(), size_t{1});
    std::ifstream in(dir.path().toStdString() + "/.stagecraft/gpt-small-ds_config.json");
    std::stringstream text;
    text << in.rdbuf();
    auto json = Json::parse(text.str());
    QVERIFY2(json.ok(), text.str().c_str());
    QCOMPARE(json->find("train_batch_size")->as_int(), int64_t{16});
    QCOMPARE(json->find("train_micro_batch_size_per_gpu")->as_int(), int64_t{2});
    QCOMPARE(json->find("gradient_accumulation_steps")->as_int(), int64_t{4});  // 16 / (dp 2 x micro 2)
  }

  void refusals_data() {
    QTest::addColumn<QStringList>("overrides");
    QTest::addColumn<QString>("message");
    QTest::newRow("no program") << QStringList{} << "launch.program: no program; give --worker PROGRAM or set launch.program";
    QTest::newRow("unclosed quote") << QStringList{"launch.program=t.sh", "launch.args=\"a 'b\""}
                                    << "launch.args: unclosed single quote at column 3";
    QTest::newRow("a layout Megatron cannot run")
        << QStringList{"launch.program=t.sh", "launch.framework=megatron", "parallel.tp_mode=2d", "parallel.tp=4", "parallel.dp=1"}
        << "launch.framework=megatron: parallel.tp_mode=2d";
  }
  void refusals() {
    QFETCH(QStringList, overrides);
    QFETCH(QString, message);
    std::vector<std::string> o;
    for (const auto& s : overrides) o.push_back(s.toStdString());
    auto cmd = program_command(plan_config(o), {});
    QVERIFY(!cmd.ok());
    QCOMPARE(cmd.status().code(), Status::Code::kInvalidInput);
    QVERIFY2(QString::fromStdString(cmd.status().message()).startsWith(message), cmd.status().message().c_str());
    QVERIFY(cmd.status().message().find('\n') == std::string::npos);
  }

  void programHereIsChecked() {
    auto check = [](std::vector<std::string> o) { return check_program_here(plan_config(std::move(o))); };
    QVERIFY(check({}).ok());  // Stagecraft's own worker: nothing to check
    QVERIFY(check({"launch.program=sh"}).ok());  // found in PATH
    QVERIFY(check({"launch.program=/bin/sh"}).ok());
    QVERIFY(check({"launch.program=" STAGECRAFT_SOURCE_DIR "/tests/integration/ddp_train.py", "launch.python=sh"}).ok());
    QVERIFY(QString::fromStdString(check({"launch.program=no-such-program-here"}).message())
                .startsWith("launch.program=no-such-program-here: not found in PATH"));
    QVERIFY(QString::fromStdString(check({"launch.program=/nonexistent/t.sh"}).message()).startsWith("launch.program=/nonexistent/t.sh: no such file here"));
    QVERIFY(QString::fromStdString(check({"launch.program=" STAGECRAFT_SOURCE_DIR "/README.md"}).message()).contains("is not an executable file"));
    QVERIFY(QString::fromStdString(check({"launch.program=" STAGECRAFT_SOURCE_DIR "/tests/integration/ddp_train.py", "launch.python=no-such-python"})
                                       .message())
                .startsWith("launch.python=no-such-python: not found"));
  }
};

QTEST_APPLESS_MAIN(TestProgram)
#include "tst_program.moc"
