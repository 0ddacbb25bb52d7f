// stagecraft-cli run and eval with real worker processes over real Gloo: the parallel
// equivalence of layouts, checkpoints that PyTorch reads, resume across layouts, a failing rank,
// and bad input.
#include <QtTest>

#include "cli_process.h"

#include <cmath>

namespace {

using Run = stagecraft::testing::CliRun;

Run cli(const QStringList& args, const QProcessEnvironment& env = QProcessEnvironment::systemEnvironment()) {
  return stagecraft::testing::run_cli(args, env);
}

// The step events of rank 0, as (step, loss).
std::vector<double> losses(const QString& jsonl, QString* error = nullptr) {
  std::vector<double> out;
  for (const QString& line : jsonl.split('\n', Qt::SkipEmptyParts)) {
    const auto o = QJsonDocument::fromJson(line.toUtf8()).object();
    if (o["event"].toString() == "step" && o["rank"].toInt() == 0) out.push_back(o["loss"].toDouble());
    if (o["event"].toString() == "error" && error) *error = o["message"].toString();
  }
  return out;
}

const char* kConfig =
    "name: equivalence\n"
    "cluster: {nodes: 1, gpus_per_node: 1, device: cpu}\n"
    "model: {layers: 4, hidden: 32, heads: 4, seq_len: 16, vocab: 256}\n"
    "train: {global_batch: 8, micro_batch: 1, steps: 5, lr: 1.0e-2, warmup_steps: 2, weight_decay: 0.1, seed: 7,\n"
    "        data: DATA, checkpoint_dir: CKPT, hang_timeout_s: 60}\n"
    "backend: cpu\n";

}  // namespace

class TestCliRun : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;
  QString config_;

  QStringList layout(int dp, int tp, int pp, const QStringList& extra = {}) {
    return QStringList{"run", config_, QString("cluster.gpus_per_node=%1").arg(dp * tp * pp), QString("parallel.dp=%1").arg(dp),
                       QString("parallel.tp=%1").arg(tp), QString("parallel.pp=%1").arg(pp), "--json"} +
           extra;
  }

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    QFile data(dir_.filePath("data.txt"));
    QVERIFY(data.open(QIODevice::WriteOnly));
    for (int i = 0; i < 200; ++i) data.write(QString("Stagecraft plans data, tensor and pipeline parallel training, line %1.\n").arg(i).toUtf8());
    data.close();
    QString yaml = QString(kConfig).replace("DATA", dir_.filePath("data.txt")).replace("CKPT", dir_.filePath("ckpt"));
    config_ = dir_.filePath("run.yaml");
    QFile f(config_);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(yaml.toUtf8());
  }

  // docs/ARCHITECTURE.md §5's central test through the real launcher, workers and Gloo: the loss of every
  // step matches the single-rank run for each layout (1e-5 relative: fp32 summation order).
  void layoutsTrainTheSameModel_data() {
    QTest::addColumn<QStringList>("args");
    QTest::newRow("dp=2 tp=2 pp=2") << layout(2, 2, 2);
    QTest::newRow("dp=8") << layout(8, 1, 1);
    QTest::newRow("tp=2 pp=2 interleaved") << layout(1, 2, 2, {"pipeline.schedule=interleaved", "pipeline.virtual_stages=2"});
    QTest::newRow("dp=2 pp=2 zero 1 gpipe") << layout(2, 1, 2, {"parallel.zero=1", "pipeline.schedule=gpipe"});
    // Zero 2 and 3's reduce-scatters and gathers on Gloo's background thread (zero_shards.h).
    QTest::newRow("dp=2 tp=2 zero 2") << layout(2, 2, 1, {"parallel.zero=2"});
    QTest::newRow("dp=2 pp=2 zero 3 interleaved") << layout(2, 1, 2, {"parallel.zero=3", "pipeline.schedule=interleaved", "pipeline.virtual_stages=2"});
    // Context parallelism: each sequence split over two worker processes, K/V over the ring or
    // heads exchanged by Gloo's all-to-all.
    QTest::newRow("cp=2 ring") << QStringList{"run", config_, "cluster.gpus_per_node=2", "parallel.cp=2", "parallel.cp_comm=ring", "--json"};
    QTest::newRow("cp=2 all_to_all dp=2") << QStringList{"run", config_, "cluster.gpus_per_node=4", "parallel.dp=2", "parallel.cp=2",
                                                         "parallel.cp_comm=all_to_all", "--json"};
    // Both: ZeRO-3 shards over the dp x cp ranks while the ring splits each sequence.
    QTest::newRow("cp=2 dp=2 zero 3 ring") << QStringList{"run", config_, "cluster.gpus_per_node=4", "parallel.dp=2", "parallel.cp=2",
                                                          "parallel.cp_comm=ring", "parallel.zero=3", "--json"};
  }
  void layoutsTrainTheSameModel() {
    QFETCH(QStringList, args);
    const Run ref = cli(layout(1, 1, 1));
    QCOMPARE(ref.code, 0);
    const auto expected = losses(ref.out);
    QCOMPARE(expected.size(), size_t(5));
    const Run r = cli(args);
    QVERIFY2(r.code == 0, qPrintable(r.err));
    const auto got = losses(r.out);
    QCOMPARE(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
      QVERIFY2(std::abs(got[i] - expected[i]) <= 1e-5 * expected[i], qPrintable(QString("step %1: %2 vs %3").arg(i + 1).arg(got[i], 0, 'g', 10).arg(expected[i], 0, 'g', 10)));
    }
  }

  // A mixture of experts (4 experts, top 2, after a dense layer, a shared expert) through the real
  // launcher and worker processes: the tokens cross the processes to their experts over Gloo's
  // all-to-all-v, and every layout's 5 losses match one rank's (1e-5), as do its checkpoint's
  // files (Qwen3-MoE's names).
  void mixtureOfExpertsOverWorkers_data() {
    QTest::addColumn<QStringList>("extra");
    QTest::newRow("dp=2 ep=2") << QStringList{"cluster.gpus_per_node=2", "parallel.dp=2", "parallel.ep=2"};
    QTest::newRow("tp=2 ep=2 dp=2 zero 3") << QStringList{"cluster.gpus_per_node=4", "parallel.dp=2", "parallel.tp=2", "parallel.ep=2",
                                                         "parallel.zero=3"};
    QTest::newRow("ep=4 dp=4") << QStringList{"cluster.gpus_per_node=4", "parallel.dp=4", "parallel.ep=4"};
  }
  void mixtureOfExpertsOverWorkers() {
    QFETCH(QStringList, extra);
    const QStringList moe = {"model.arch=llama", "model.kv_heads=2", "model.tied_embeddings=false", "model.moe.experts=4", "model.moe.top_k=2",
                             "model.moe.ffn_hidden=32", "model.moe.dense_layers=1", "model.moe.shared_experts=1", "--json"};
    const Run ref = cli(QStringList{"run", config_} + moe);
    QVERIFY2(ref.code == 0, qPrintable(ref.err));
    const auto expected = losses(ref.out);
    QCOMPARE(expected.size(), size_t(5));
    const Run r = cli(QStringList{"run", config_} + extra + moe);
    QVERIFY2(r.code == 0, qPrintable(r.err));
    const auto got = losses(r.out);
    QCOMPARE(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
      QVERIFY2(std::abs(got[i] - expected[i]) <= 1e-5 * expected[i], qPrintable(QString("step %1: %2 vs %3").arg(i + 1).arg(got[i], 0, 'g', 10).arg(expected[i], 0, 'g', 10)));
    }
    QVERIFY(QFile::exists(dir_.filePath("ckpt/step-5/model.safetensors")));
  }

  // The checkpoint is a Hugging Face GPT-2: an independent PyTorch implementation reading only
  // model.safetensors and config.json computes the same loss as `eval`.
  void checkpointIsGpt2ForPyTorch() {
    const Run r = cli(layout(2, 2, 1));
    QVERIFY2(r.code == 0, qPrintable(r.err));
    const QString ckpt = dir_.filePath("ckpt/step-5");
    for (const char* f : {"model.safetensors", "config.json", "optimizer.safetensors", "trainer.json", "run.yaml"}) {
      QVERIFY2(QFile::exists(ckpt + "/" + f), f);
    }
    const Run e = cli({"eval", config_, "--checkpoint", ckpt, "--data", dir_.filePath("data.txt"), "--windows", "8", "--json"});
    QCOMPARE(e.code, 0);
    const double ours = QJsonDocument::fromJson(e.out.toUtf8()).object()["loss"].toDouble();
    QVERIFY(ours > 0);
    QProcess py;
    py.start("/usr/bin/python3", {"-c", "import torch"});
    py.waitForFinished();
    if (py.exitCode() != 0) QSKIP("Debian's /usr/bin/python3 has no torch (apt-get install python3-torch) for the reference");
    QProcess ref;
    ref.start("/usr/bin/python3", {QStringLiteral(STAGECRAFT_SOURCE_DIR "/tests/cli/ref/gpt2_eval.py"), ckpt, dir_.filePath("data.txt"), "8"});
    QVERIFY(ref.waitForFinished(120000));
    QVERIFY2(ref.exitCode() == 0, ref.readAllStandardError().constData());
    const double theirs = QString::fromUtf8(ref.readAllStandardOutput()).trimmed().toDouble();
    // Both in fp32 with different summation orders: 1e-5 relative.
    QVERIFY2(std::abs(ours - theirs) <= 1e-5 * theirs, qPrintable(QString("%1 vs %2").arg(ours, 0, 'g', 10).arg(theirs, 0, 'g', 10)));
  }

  // Stop at step 3 (a checkpoint), resume with another layout: steps 4 and 5 match the
  // uninterrupted run.
  void resumeAcrossLayouts() {
    const Run full = cli(layout(1, 1, 1));
    QCOMPARE(full.code, 0);
    const auto expected = losses(full.out);
    const Run first = cli(layout(2, 1, 1, {"train.checkpoint_every=3", QString("train.checkpoint_dir=%1").arg(dir_.filePath("resume"))}));
    QVERIFY2(first.code == 0, qPrintable(first.err));
    const QString step3 = dir_.filePath("resume/step-3");
    QVERIFY(QFile::exists(step3 + "/trainer.json"));
    const Run second = cli(layout(1, 2, 2, {QString("train.resume=%1").arg(step3), QString("train.checkpoint_dir=%1").arg(dir_.filePath("resume2"))}));
    QVERIFY2(second.code == 0, qPrintable(second.err));
    const auto got = losses(second.out);
    QCOMPARE(got.size(), size_t(2));
    for (size_t i = 0; i < 2; ++i) {
      QVERIFY2(std::abs(got[i] - expected[3 + i]) <= 1e-5 * expected[3 + i],
               qPrintable(QString("step %1: %2 vs %3").arg(4 + i).arg(got[i], 0, 'g', 10).arg(expected[3 + i], 0, 'g', 10)));
    }
  }

  // A rank that dies ends the run: the others are stopped, the exit status is 1 and the error
  // names the rank.
  void failingRankStopsTheRun() {
    const QString wrapper = dir_.filePath("worker.sh");
    QFile w(wrapper);
    QVERIFY(w.open(QIODevice::WriteOnly));
    w.write(QString("#!/bin/sh\nif [ \"$RANK\" = 2 ]; then echo 'injected failure' >&2; exit 3; fi\nexec %1/stagecraft-worker\n")
                .arg(STAGECRAFT_BIN_DIR)
                .toUtf8());
    w.close();
    QVERIFY(w.setPermissions(QFileDevice::ReadOwner | QFileDevice::WriteOwner | QFileDevice::ExeOwner));
    auto env = QProcessEnvironment::systemEnvironment();
    env.insert("STAGECRAFT_WORKER", wrapper);
    QElapsedTimer t;
    t.start();
    const Run r = cli(layout(2, 2, 1), env);
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains("rank 2 exited with status 3: injected failure"), qPrintable(r.err));
    QVERIFY(t.elapsed() < 30000);
  }

  void badInput_data() {
    QTest::addColumn<QStringList>("extra");
    QTest::addColumn<QString>("message");
    QTest::newRow("missing data") << QStringList{"train.data=/nonexistent/data.bin"} << "train.data=/nonexistent/data.bin: cannot read";
    QTest::newRow("dropout") << QStringList{"model.dropout=0.1"} << "trains without dropout";
    QTest::newRow("selective recompute") << QStringList{"train.recompute=selective"} << "train.recompute=selective: the engine recomputes none or full";
    QTest::newRow("vocab too small") << QStringList{"model.vocab=64"} << "raise model.vocab to at least";
    QTest::newRow("two nodes") << QStringList{"cluster.nodes=2"} << "starts every rank on this machine";
    QTest::newRow("expert tensor parallelism") << QStringList{"model.arch=llama", "model.moe.experts=4", "cluster.gpus_per_node=2", "parallel.dp=2",
                                                              "parallel.expert_tp=2"}
                                               << "parallel.expert_tp=2: the engine trains whole experts";
    QTest::newRow("q/k norms") << QStringList{"model.arch=llama", "model.qk_norm=true"} << "model.qk_norm: the engine does not train q/k RMSNorm yet";
    QTest::newRow("decoupled head size") << QStringList{"model.arch=llama", "model.head_dim=16"}
                                         << "model.head_dim=16: the engine trains heads x head_dim = hidden only";
  }
  void badInput() {
    QFETCH(QStringList, extra);
    QFETCH(QString, message);
    const Run r = cli(QStringList{"run", config_} + extra);
    QCOMPARE(r.code, 2);
    QCOMPARE(r.err.count('\n'), 1);
    QVERIFY2(r.err.contains(message), qPrintable(r.err));
  }
};

QTEST_GUILESS_MAIN(TestCliRun)
#include "tst_cli_run.moc"
