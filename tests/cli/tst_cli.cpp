// stagecraft-cli plan, export and import driven as a person would: the real binary, real files in
// a temporary directory, exit codes (0 success, 2 invalid input, 1 an operation failed), stdout,
// and the one line on stderr that names what to fix.
#include <QtTest>

#include "cli_process.h"

namespace {

using Run = stagecraft::testing::CliRun;

Run cli(const QStringList& args, const QProcessEnvironment& env = QProcessEnvironment::systemEnvironment()) {
  return stagecraft::testing::run_cli(args, env, 60000);
}

QString config(const QString& name) { return QStringLiteral(STAGECRAFT_SOURCE_DIR "/configs/") + name; }

QJsonObject json(const QString& text) {
  QJsonParseError e;
  const auto d = QJsonDocument::fromJson(text.toUtf8(), &e);
  if (e.error != QJsonParseError::NoError) qWarning() << e.errorString();
  return d.object();
}

QString groups(const QJsonArray& a) {
  QStringList parts;
  for (const auto& g : a) {
    QStringList ranks;
    for (const auto& r : g.toArray()) ranks << QString::number(r.toInt());
    parts << "[" + ranks.join(',') + "]";
  }
  return parts.join(' ');
}

bool write(const QString& path, const QByteArray& text) {
  QFile f(path);
  return f.open(QIODevice::WriteOnly) && f.write(text) == text.size();
}

QString read(const QString& path) {
  QFile f(path);
  return f.open(QIODevice::ReadOnly) ? QString::fromUtf8(f.readAll()) : QString();
}

}  // namespace

class TestCli : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void planPrintsGroupsAndStages() {
    const Run r = cli({"plan", config("bert-large-3d.yaml")});
    QCOMPARE(r.code, 0);
    QVERIFY(r.err.isEmpty());
    QVERIFY(r.out.contains("dp=2  tp=2 (1d)  pp=2  order=tp-cp-dp-pp"));
    QVERIFY(r.out.contains("TP (4 groups of 2): [0,1] [2,3] [4,5] [6,7]"));
    QVERIFY(r.out.contains("DP (4 groups of 2): [0,2] [1,3] [4,6] [5,7]"));
    QVERIFY(r.out.contains("PP (4 groups of 2): [0,4] [1,5] [2,6] [3,7]"));
    QVERIFY(r.out.contains(QRegularExpression(R"(\n\s+0\s+0\s+0-11\s+12\s.*embedding\s+\[0-3\])")));
    QVERIFY(r.out.contains(QRegularExpression(R"(\n\s+1\s+1\s+12-23\s+12\s.*head\+loss\s+\[4-7\])")));
  }

  // docs/ARCHITECTURE.md §4's worked example, 8 GPUs with dp = tp = pp = 2, field by field.
  void planJsonHasTheWorkedExample() {
    const Run r = cli({"plan", config("bert-large-3d.yaml"), "--json"});
    QCOMPARE(r.code, 0);
    const QJsonObject d = json(r.out);
    QCOMPARE(d["world_size"].toInt(), 8);
    QCOMPARE(d["dp"].toInt(), 2);
    QCOMPARE(d["tp"].toInt(), 2);
    QCOMPARE(d["pp"].toInt(), 2);
    QCOMPARE(d["order"].toString(), QString("tp-cp-dp-pp"));
    const QJsonArray ranks = d["ranks"].toArray();
    QCOMPARE(ranks.size(), 8);
    for (int r = 0; r < 8; ++r) {
      const QJsonObject o = ranks[r].toObject();
      QCOMPARE(o["rank"].toInt(), r);
      QCOMPARE(o["node"].toInt(), 0);
      QCOMPARE(o["local_rank"].toInt(), r);
      QCOMPARE(o["tp"].toInt(), r % 2);  // rank = tp + dp x 2 + pp x 4
      QCOMPARE(o["dp"].toInt(), (r / 2) % 2);
      QCOMPARE(o["pp"].toInt(), r / 4);
    }
    const QJsonObject g = d["groups"].toObject();
    QCOMPARE(groups(g["tp"].toArray()), QString("[0,1] [2,3] [4,5] [6,7]"));
    QCOMPARE(groups(g["dp"].toArray()), QString("[0,2] [1,3] [4,6] [5,7]"));
    QCOMPARE(groups(g["pp"].toArray()), QString("[0,4] [1,5] [2,6] [3,7]"));
    const QJsonArray stages = d["stages"].toArray();
    QCOMPARE(stages.size(), 2);
    for (int s = 0; s < 2; ++s) {
      const QJsonObject o = stages[s].toObject();
      QCOMPARE(o["stage"].toInt(), s);
      QCOMPARE(o["pp_rank"].toInt(), s);
      const QJsonArray layers = o["layers"].toArray();
      QCOMPARE(layers.size(), 12);
      QCOMPARE(layers.first().toInt(), 12 * s);
      QCOMPARE(layers.last().toInt(), 12 * s + 11);
      QCOMPARE(groups(QJsonArray{o["ranks"]}), s == 0 ? QString("[0,1,2,3]") : QString("[4,5,6,7]"));
    }
    QVERIFY(d["warnings"].isArray());
  }

  void planOverridesApply() {
    const Run r = cli({"plan", config("bert-large-3d.yaml"), "parallel.tp=4", "parallel.dp=auto", "parallel.order=tp-pp-dp", "--json"});
    QCOMPARE(r.code, 0);
    const QJsonObject d = json(r.out);
    QCOMPARE(d["tp"].toInt(), 4);
    QCOMPARE(d["dp"].toInt(), 1);
    QCOMPARE(d["order"].toString(), QString("tp-cp-pp-dp"));
    QCOMPARE(groups(d["groups"].toObject()["tp"].toArray()), QString("[0,1,2,3] [4,5,6,7]"));
    // Paddle's order with dp = tp = pp = 2: PP groups [0,2], DP groups [0,4].
    const Run p = cli({"plan", config("paddle-gpt-dp2-mp2-pp2.yaml"), "--json"});
    QCOMPARE(p.code, 0);
    QCOMPARE(groups(json(p.out)["groups"].toObject()["pp"].toArray()), QString("[0,2] [1,3] [4,6] [5,7]"));
    QCOMPARE(groups(json(p.out)["groups"].toObject()["dp"].toArray()), QString("[0,4] [1,5] [2,6] [3,7]"));
  }

  void invalidInputExitsTwoWithOneLinePerProblem_data() {
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("file");  // written to the temporary directory as x.yaml when set
    QTest::addColumn<QString>("error");
    QTest::addColumn<int>("lines");  // one per problem
    const QString bert = config("bert-large-3d.yaml");
    QTest::newRow("missing file") << QStringList{"plan", "{dir}/missing.yaml"} << "" << "missing.yaml: no such file" << 1;
    QTest::newRow("bad YAML") << QStringList{"plan", "{dir}/x.yaml"} << "model: {layers: [1\n" << "x.yaml: line 2" << 1;
    QTest::newRow("unknown key, with a suggestion") << QStringList{"plan", bert, "pipeline.schedul=1f1b"} << ""
        << "command line: pipeline.schedul: unknown key; did you mean pipeline.schedule?" << 1;
    QTest::newRow("unknown key in the file") << QStringList{"plan", "{dir}/x.yaml"}
        << "model: {layers: 2, hidden: 8, heads: 2}\nparallel: {tpp: 2}\n" << "x.yaml:2: parallel.tpp: unknown key; did you mean parallel.tp?" << 1;
    QTest::newRow("bad value") << QStringList{"plan", bert, "parallel.tp_mode=4d"} << "" << "command line: parallel.tp_mode=4d: expected 1d, 2d, 2.5d or 3d" << 1;
    QTest::newRow("rule broken") << QStringList{"plan", bert, "train.global_batch=15"} << ""
        << "command line: train.global_batch=15: must be a multiple of dp x micro_batch = 2 x 2 = 4" << 1;
    QTest::newRow("three rules broken: one line each") << QStringList{"plan", bert, "parallel.tp=3", "parallel.dp=auto"} << ""
        << "command line: parallel.tp=3: 8 GPUs are not divisible by tp x pp = 6" << 3;
    QTest::newRow("unknown option") << QStringList{"plan", bert, "--jsn"} << "" << "plan: unknown option --jsn; did you mean --json?" << 1;
    QTest::newRow("unknown command") << QStringList{"frobnicate"} << "" << "unknown command 'frobnicate'" << 1;
    QTest::newRow("unknown --to format") << QStringList{"export", bert, "--to", "horovod"} << ""
        << "export: --to horovod: unknown format; choose libai|paddle|colossalai|megatron|deepspeed" << 1;
    QTest::newRow("export without --to") << QStringList{"export", bert} << "" << "export: --to FORMAT is required" << 1;
    QTest::newRow("export of a layout LiBai cannot run") << QStringList{"export", config("colossalai-2d.yaml"), "--to", "libai"} << ""
        << "export --to libai: parallel.tp_mode=2d: LiBai has only 1D" << 1;
    QTest::newRow("import from Megatron") << QStringList{"import", bert, "--from", "megatron"} << ""
        << "import: --from megatron: Stagecraft cannot import it" << 1;
    QTest::newRow("import of a missing file") << QStringList{"import", "{dir}/none.py", "--from", "libai"} << "" << "none.py: no such file" << 1;
    QTest::newRow("import without the model shape") << QStringList{"import", "{dir}/x.yaml", "--from", "libai"}
        << "train.dist.tensor_parallel_size = 2\n" << "does not give the model shape" << 1;
    QTest::newRow("import of a file that is not Python") << QStringList{"import", "{dir}/x.yaml", "--from", "paddle", "--base", bert}
        << "strategy.hybrid_configs = {'dp_degree': 2\n" << "x.yaml:1: '{' is never closed" << 1;
  }
  void invalidInputExitsTwoWithOneLinePerProblem() {
    QFETCH(QStringList, args);
    QFETCH(QString, file);
    QFETCH(QString, error);
    QFETCH(int, lines);
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    if (!file.isEmpty()) QVERIFY(write(dir.filePath("x.yaml"), file.toUtf8()));
    for (auto& a : args) a.replace("{dir}", dir.path());
    const Run r = cli(args);
    QCOMPARE(r.code, 2);
    QCOMPARE(r.err.count('\n'), lines);
    for (const auto& line : r.err.trimmed().split('\n')) QVERIFY2(line.startsWith("stagecraft-cli: error: "), qPrintable(r.err));
    QVERIFY2(r.err.contains(error), qPrintable(r.err));
    QVERIFY(r.out.isEmpty());
  }

  void failedWriteExitsOne() {
    const Run r = cli({"export", config("bert-large-3d.yaml"), "--to", "megatron", "-o", "/nonexistent-dir/x.sh"});
    QCOMPARE(r.code, 1);
    QCOMPARE(r.err.count('\n'), 1);
    QVERIFY(r.err.contains("/nonexistent-dir/x.sh: cannot write"));
  }

  // Every format to stdout, and with -o to files whose text is what stdout shows.
  void exportToEveryFormat_data() {
    QTest::addColumn<QString>("to");
    QTest::addColumn<QString>("expect");
    QTest::addColumn<QStringList>("companions");
    QTest::addColumn<QString>("tp2");  // what says tp = 2, gone with parallel.tp=4
    QTest::newRow("libai") << "libai" << "train.dist.tensor_parallel_size = 2" << QStringList{} << "train.dist.tensor_parallel_size = 2";
    QTest::newRow("paddle") << "paddle" << "\"mp_degree\": 2," << QStringList{} << "\"mp_degree\": 2,";
    QTest::newRow("colossalai") << "colossalai" << "tensor=dict(size=2, mode='1d')" << QStringList{} << "tensor=dict(size=2, mode='1d')";
    QTest::newRow("megatron") << "megatron" << "--tensor-model-parallel-size 2" << QStringList{} << "--tensor-model-parallel-size 2";
    QTest::newRow("deepspeed") << "deepspeed" << "\"train_micro_batch_size_per_gpu\": 2" << QStringList{"hostfile", "pipeline.py"} << "num_mp=2";
  }
  void exportToEveryFormat() {
    QFETCH(QString, to);
    QFETCH(QString, expect);
    QFETCH(QStringList, companions);
    QFETCH(QString, tp2);
    const Run r = cli({"export", config("bert-large-3d.yaml"), "--to", to});
    QCOMPARE(r.code, 0);
    QVERIFY2(r.out.contains(expect), qPrintable(r.out));
    QTemporaryDir dir;
    const QString main = dir.filePath("out." + QString(to == "deepspeed" ? "json" : to == "megatron" ? "sh" : "py"));
    const Run w = cli({"export", config("bert-large-3d.yaml"), "--to", to, "-o", main});
    QCOMPARE(w.code, 0);
    QVERIFY(w.out.startsWith("wrote " + main + "\n"));
    const QString text = read(main);
    QVERIFY(text.contains(expect));
    if (companions.isEmpty()) {
      // LiBai's train.sh line names the file the config is saved as.
      QCOMPARE(text, QString(r.out).replace("configs/bert-large-3d.py", main));
    } else {
      QVERIFY(r.out.startsWith("==> ds_config.json <==\n" + text));
      QCOMPARE(QJsonDocument::fromJson(text.toUtf8()).object()["train_batch_size"].toInt(), 16);
      for (const auto& c : companions) {
        const QString path = dir.filePath("out." + c);
        QVERIFY2(QFile::exists(path), qPrintable(path));
        QVERIFY(w.out.contains("wrote " + path + "\n"));
        QVERIFY(r.out.contains("==> " + c + " <==\n" + read(path)));
      }
      QVERIFY(read(dir.filePath("out.hostfile")).contains("localhost slots=8\n"));
    }
    // Overrides apply before the export.
    const Run o = cli({"export", config("bert-large-3d.yaml"), "parallel.tp=4", "parallel.dp=1", "--to", to});
    QCOMPARE(o.code, 0);
    QVERIFY(r.out.contains(tp2));
    QVERIFY(!o.out.contains(tp2));
  }

  void exportNotesGoToStderr() {
    const Run r = cli({"export", config("bert-large-3d.yaml"), "--to", "paddle"});
    QCOMPARE(r.code, 0);
    QVERIFY(r.err.contains("stagecraft-cli: note: PaddlePaddle orders ranks tp-pp-dp but this plan uses parallel.order=tp-dp-pp"));
    QVERIFY(r.out.contains("# NOTE: PaddlePaddle orders ranks tp-pp-dp"));
    const Run same = cli({"export", config("bert-large-3d.yaml"), "parallel.order=tp-pp-dp", "--to", "paddle"});
    QCOMPARE(same.code, 0);
    QVERIFY(!same.err.contains("orders ranks"));
  }

  // export, then import with the exported config as the base: the same plan.
  void importRoundTrip_data() {
    QTest::addColumn<QString>("config");
    QTest::addColumn<QString>("to");
    QTest::newRow("LiBai custom stages via LiBai") << "libai-bert-custom-stages.yaml" << "libai";
    QTest::newRow("LiBai pure PP via LiBai") << "libai-bert-pp8.yaml" << "libai";
    QTest::newRow("Paddle seed via Paddle") << "paddle-gpt-dp2-mp2-pp2.yaml" << "paddle";
    QTest::newRow("Colossal-AI pp 2, 2d via Colossal-AI") << "colossalai-pp2-2d.yaml" << "colossalai";
    QTest::newRow("GPT-3 via Paddle (zero as sharding)") << "gpt3-175b-1024x8.yaml" << "paddle";
    QTest::newRow("BERT 3D via DeepSpeed") << "bert-large-3d.yaml" << "deepspeed";
  }
  void importRoundTrip() {
    QFETCH(QString, config);
    QFETCH(QString, to);
    QTemporaryDir dir;
    const QString exported = dir.filePath(to == "deepspeed" ? "ds.json" : "exported.py");
    const QString back = dir.filePath("back.yaml");
    QCOMPARE(cli({"export", ::config(config), "--to", to, "-o", exported}).code, 0);
    const Run i = cli({"import", exported, "--from", to, "--base", ::config(config), "-o", back});
    QVERIFY2(i.code == 0, qPrintable(i.err));
    QCOMPARE(i.out, "wrote " + back + "\n");
    const Run stdout_yaml = cli({"import", exported, "--from", to, "--base", ::config(config)});
    QCOMPARE(stdout_yaml.code, 0);
    QCOMPARE(stdout_yaml.out, read(back));
    const QJsonObject a = json(cli({"plan", ::config(config), "--json"}).out);
    const QJsonObject b = json(cli({"plan", back, "--json"}).out);
    for (const char* key : {"world_size", "dp", "tp", "pp", "order", "tp_mode", "schedule", "virtual_stages", "micro_batches"}) {
      QVERIFY2(a[key] == b[key], key);
    }
    QCOMPARE(b["groups"], a["groups"]);
    QCOMPARE(b["stages"], a["stages"]);
  }
};

QTEST_APPLESS_MAIN(TestCli)
#include "tst_cli.moc"
