// Checkpoint directories and safetensors files as a run meets them: a save that replaces an older
// checkpoint of its step whole or not at all, what an unfinished save leaves, trainer.json's
// fields checked, a checkpoint of another model refused by its config.json or its tensors, and
// safetensors headers that describe data twice or shapes past every bound.
#include "stagecraft/config/config_io.h"
#include "stagecraft/core/json.h"
#include "stagecraft/model/model.h"
#include "stagecraft/runtime/checkpoint.h"
#include "stagecraft/runtime/safetensors.h"

#include <QtTest>

#include <cstring>
#include <filesystem>

using namespace stagecraft;
using namespace stagecraft::runtime;
namespace fs = std::filesystem;

namespace {

config::ModelConfig tiny_model() {
  config::ModelConfig m;
  m.layers = 2;
  m.hidden = 16;
  m.heads = 2;
  m.seq_len = 8;
  m.vocab = 32;
  return m;
}

// Every tensor of `m`, filled with `value`; with `prefixes` the optimizer's names.
std::vector<NamedTensor> tensors_of(const config::ModelConfig& m, float value, std::initializer_list<const char*> prefixes = {""}) {
  std::vector<NamedTensor> out;
  for (const auto& p : model::ModelDesc::from(m).params()) {
    for (const char* prefix : prefixes) {
      NamedTensor t;
      t.name = prefix + p.name;
      t.shape = p.shape;
      t.data.assign(static_cast<size_t>(p.numel()), value);
      out.push_back(std::move(t));
    }
  }
  return out;
}

Status save(const std::string& path, const config::ModelConfig& m, float value, const TrainerState& state) {
  return write_checkpoint(path, m, "name: test\n", tensors_of(m, value), tensors_of(m, 0.5f, {"exp_avg.", "exp_avg_sq."}), state);
}

// A checkpoint of step `step`, every weight 1, with nothing else in its state.
Status save_step(const std::string& path, const config::ModelConfig& m, int64_t step) {
  TrainerState state;
  state.step = step;
  return save(path, m, 1.0f, state);
}

bool write_bytes(const std::string& path, const std::string& bytes) {
  QFile f(QString::fromStdString(path));
  return f.open(QIODevice::WriteOnly) && f.write(bytes.data(), static_cast<qint64>(bytes.size())) == static_cast<qint64>(bytes.size());
}

// A safetensors file of `header` (JSON) and `data` bytes.
std::string safetensors_bytes(std::string header, const std::string& data) {
  while (header.size() % 8 != 0) header += ' ';
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((uint64_t(header.size()) >> (8 * i)) & 0xff);
  return out + header + data;
}

QStringList entries(const fs::path& dir) {
  QStringList names;
  for (const auto& e : fs::directory_iterator(dir)) names << QString::fromStdString(e.path().filename().string());
  names.sort();
  return names;
}

}  // namespace

class TestCheckpoint : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir dir_;
  std::string at(const char* name) const { return dir_.filePath(name).toStdString(); }

 private slots:
  // A second save of a step replaces the first whole; one that fails part way leaves the first as
  // it was, and nothing of its own.
  void saveReplacesWholeOrNotAtAll() {
    const config::ModelConfig m = tiny_model();
    const std::string ckpt = at("run/step-3");
    TrainerState state;
    state.step = 3;
    QVERIFY(save(ckpt, m, 1.0f, state).ok());
    state.tokens = 96;
    QVERIFY(save(ckpt, m, 2.0f, state).ok());
    auto back = read_checkpoint(ckpt, m, true);
    QVERIFY2(back.ok(), back.status().message().c_str());
    QCOMPARE(back->model.find("wte.weight")->data.front(), 2.0f);
    QCOMPARE(back->state.tokens, 96.0);
    QCOMPARE(entries(at("run")), QStringList{"step-3"});

    // A tensor whose values do not fill its shape fails the save after other files were written.
    auto broken = tensors_of(m, 3.0f);
    broken.back().data.pop_back();
    const Status s = write_checkpoint(ckpt, m, "name: test\n", tensors_of(m, 3.0f), broken, state);
    QVERIFY(!s.ok());
    QCOMPARE(entries(at("run")), QStringList{"step-3"});
    back = read_checkpoint(ckpt, m, true);
    QVERIFY2(back.ok(), back.status().message().c_str());
    QCOMPARE(back->model.find("wte.weight")->data.front(), 2.0f);
  }

  // What a save that died (a crash, a kill) left is removed by the next save of that step, and is
  // never read as a checkpoint.
  void unfinishedSaveIsClearedAway() {
    const config::ModelConfig m = tiny_model();
    const fs::path run = at("crashed");
    fs::create_directories(run / "step-7.partial-12345");
    QVERIFY(write_bytes((run / "step-7.partial-12345" / "model.safetensors").string(), "half a file"));
    auto read = read_checkpoint((run / "step-7.partial-12345").string(), m, false);
    QVERIFY(!read.ok());
    QVERIFY2(QString::fromStdString(read.status().message()).contains("no trainer.json"), read.status().message().c_str());
    QVERIFY(save_step((run / "step-7").string(), m, 7).ok());
    QCOMPARE(entries(run), QStringList{"step-7"});
  }

  // The seed is any uint64 (train.seed), kept through the file's int64.
  void largeSeedRoundTrips() {
    const config::ModelConfig m = tiny_model();
    TrainerState state;
    state.step = 1;
    state.seed = 18446744073709551615ull;
    QVERIFY(save(at("seed/step-1"), m, 1.0f, state).ok());
    auto back = read_checkpoint(at("seed/step-1"), m, false);
    QVERIFY2(back.ok(), back.status().message().c_str());
    QCOMPARE(back->state.seed, state.seed);
  }

  // Skipped steps are kept in any precision: AdamW's count leaves them out after a resume in
  // another precision too.
  void skippedStepsAreKeptWithoutAScaler() {
    const config::ModelConfig m = tiny_model();
    TrainerState state;
    state.step = 10;
    state.skipped_steps = 2;  // from an fp16 run, now resumed in bf16 (no loss scale)
    QVERIFY(save(at("skips/step-10"), m, 1.0f, state).ok());
    auto back = read_checkpoint(at("skips/step-10"), m, false);
    QVERIFY2(back.ok(), back.status().message().c_str());
    QCOMPARE(back->state.skipped_steps, int64_t(2));
    QCOMPARE(back->state.loss_scale, 0.0);
  }

  void damagedTrainerStateIsRefused_data() {
    QTest::addColumn<QString>("json");
    QTest::addColumn<QString>("says");  // "" = read
    QTest::newRow("an fp16 run's state") << R"({"step": 5, "seed": 7, "tokens": 80, "loss_scale": 32768, "loss_scale_clean_steps": 3, "skipped_steps": 1})" << "";
    QTest::newRow("no step") << R"({"seed": 7})" << "expected {\"step\": N, ...} with N a whole number of at least 0";
    QTest::newRow("negative step") << R"({"step": -1})" << "expected {\"step\": N, ...}";
    QTest::newRow("seed as text") << R"({"step": 5, "seed": "seven"})" << "seed must be a whole number; the file is damaged";
    QTest::newRow("tokens as text") << R"({"step": 5, "tokens": "x"})" << "tokens must be a number of at least 0";
    QTest::newRow("negative tokens") << R"({"step": 5, "tokens": -3})" << "tokens must be a number of at least 0";
    QTest::newRow("skipped steps as text") << R"({"step": 5, "skipped_steps": "2"})" << "skipped_steps must be a whole number";
    QTest::newRow("more skipped steps than steps") << R"({"step": 5, "skipped_steps": 6})" << "skipped_steps 6 exceeds step 5";
    QTest::newRow("loss scale as text") << R"({"step": 5, "loss_scale": "1024"})" << "loss_scale must be a power of two from 1 to 2^127";
    QTest::newRow("loss scale not a power of two") << R"({"step": 5, "loss_scale": 1000})" << "loss_scale must be a power of two";
    QTest::newRow("loss scale past a float") << R"({"step": 5, "loss_scale": 1e300})" << "loss_scale must be a power of two";
    QTest::newRow("loss scale below the floor") << R"({"step": 5, "loss_scale": 0.5})" << "loss_scale must be a power of two";
    QTest::newRow("negative clean steps") << R"({"step": 5, "loss_scale": 1024, "loss_scale_clean_steps": -1})"
                                          << "loss_scale_clean_steps must be a whole number of at least 0";
  }
  void damagedTrainerStateIsRefused() {
    QFETCH(QString, json);
    QFETCH(QString, says);
    const config::ModelConfig m = tiny_model();
    const std::string ckpt = at("state/step-5");
    QVERIFY(save_step(ckpt, m, 5).ok());
    QVERIFY(write_bytes(ckpt + "/trainer.json", json.toStdString()));
    auto back = read_checkpoint(ckpt, m, true);
    if (says.isEmpty()) {
      QVERIFY2(back.ok(), back.status().message().c_str());
      QCOMPARE(back->state.loss_scale, 32768.0);
      QCOMPARE(back->state.skipped_steps, int64_t(1));
      return;
    }
    QVERIFY(!back.ok());
    const QString msg = QString::fromStdString(back.status().message());
    QVERIFY2(msg.startsWith(QString::fromStdString("checkpoint " + ckpt + "/trainer.json: ")) && msg.contains(says) && !msg.contains('\n'),
             qPrintable(msg));
  }

  // A checkpoint of another model is refused, naming the key to set, before any tensor is used.
  void anotherModelIsRefused_data() {
    QTest::addColumn<QString>("key");
    QTest::addColumn<int>("value");
    QTest::addColumn<QString>("says");
    QTest::newRow("fewer layers") << "layers" << 1 << "its config.json has n_layer 2, the configured model model.layers 1; set model.layers: 2";
    QTest::newRow("more heads") << "heads" << 4 << "has n_head 2, the configured model model.heads 4; set model.heads: 2";
    QTest::newRow("untied") << "tied" << 0 << "has tie_word_embeddings true; set model.tied_embeddings: true";
    QTest::newRow("another MLP width") << "ffn" << 32 << "has n_inner 64, the configured model model.ffn_hidden 32; set model.ffn_hidden: 64";
  }
  void anotherModelIsRefused() {
    QFETCH(QString, key);
    QFETCH(int, value);
    QFETCH(QString, says);
    const config::ModelConfig m = tiny_model();
    const std::string ckpt = at("model/step-1");
    QVERIFY(save_step(ckpt, m, 1).ok());
    config::ModelConfig other = m;
    if (key == "layers") other.layers = value;
    if (key == "heads") other.heads = value;
    if (key == "tied") other.tied_embeddings = value != 0;
    if (key == "ffn") other.ffn_hidden = value;
    auto back = read_checkpoint(ckpt, other, false);
    QVERIFY(!back.ok());
    const QString msg = QString::fromStdString(back.status().message());
    QVERIFY2(msg.startsWith(QString::fromStdString("checkpoint " + ckpt + " is of another model: ")) && msg.contains(says), qPrintable(msg));
  }

  // Without config.json (a hand-made checkpoint), a tensor the model has no use for is refused.
  void unusedTensorIsRefused() {
    config::ModelConfig untied = tiny_model();
    untied.tied_embeddings = false;
    const std::string ckpt = at("names/step-1");
    QVERIFY(save_step(ckpt, untied, 1).ok());
    fs::remove(ckpt + "/config.json");
    auto back = read_checkpoint(ckpt, tiny_model(), false);
    QVERIFY(!back.ok());
    QVERIFY2(QString::fromStdString(back.status().message()) ==
                 QString::fromStdString(ckpt + "/model.safetensors: tensor lm_head.weight is not part of the configured model (a "
                                               "checkpoint of another model?)"),
             back.status().message().c_str());
    QVERIFY2(read_checkpoint(ckpt, untied, true).ok(), "the same checkpoint for its own model");
  }

  // Each data byte belongs to one tensor: entries over the same bytes (which could ask for any
  // amount of memory from a small file) and shapes past every bound are refused by name.
  void safetensorsHeadersThatLie_data() {
    QTest::addColumn<QString>("header");
    QTest::addColumn<QString>("says");
    QTest::newRow("two entries on the same bytes")
        << R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})"
        << "tensors a and b share data bytes (data_offsets overlap)";
    QTest::newRow("entries that overlap in part")
        << R"({"a": {"dtype": "F16", "shape": [4], "data_offsets": [0, 8]}, "b": {"dtype": "F16", "shape": [2], "data_offsets": [6, 10]}})"
        << "tensors a and b share data bytes";
    QTest::newRow("a shape whose product wraps around")
        << R"({"a": {"dtype": "F32", "shape": [4294967296, 4294967296, 0], "data_offsets": [0, 0]}})" << "tensor a: shape too large";
  }
  void safetensorsHeadersThatLie() {
    QFETCH(QString, header);
    QFETCH(QString, says);
    const std::string file = at("lie.safetensors");
    QVERIFY(write_bytes(file, safetensors_bytes(header.toStdString(), std::string(16, '\0'))));
    auto t = read_safetensors(file);
    QVERIFY(!t.ok());
    QCOMPARE(t.status().code(), Status::Code::kInvalidInput);
    QVERIFY2(QString::fromStdString(t.status().message()).contains(says), t.status().message().c_str());
  }

  // Neighbouring entries that do not overlap are read as they are.
  void safetensorsNeighboursAreRead() {
    const std::string file = at("neighbours.safetensors");
    std::string data(16, '\0');
    const float v[4] = {1, 2, 3, 4};
    std::memcpy(data.data(), v, sizeof v);
    QVERIFY(write_bytes(file, safetensors_bytes(R"({"b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}, "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})",
                                                data)));
    auto t = read_safetensors(file);
    QVERIFY2(t.ok(), t.status().message().c_str());
    QCOMPARE(t->find("a")->data, (std::vector<float>{1, 2}));
    QCOMPARE(t->find("b")->data, (std::vector<float>{3, 4}));
  }

  void init() { QVERIFY(dir_.isValid()); }
};

QTEST_APPLESS_MAIN(TestCheckpoint)
#include "tst_checkpoint.moc"
