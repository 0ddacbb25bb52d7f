// Checkpoint directories and safetensors files as a run meets them: a save that replaces an older
// checkpoint of its step whole or not at all, what an unfinished save leaves, trainer.json's
// fields checked, a checkpoint of another model refused by its config.json or its tensors, and
// safetensors headers that describe data twice or shapes past every bound; Llama checkpoints in
// Hugging Face's layout, Hugging Face model directories (single or sharded) read for train.init
// and eval, and token files of uint32.
#include "stagecraft/config/config_io.h"
#include "stagecraft/core/json.h"
#include "stagecraft/model/model.h"
#include "stagecraft/runtime/checkpoint.h"
#include "stagecraft/runtime/safetensors.h"
#include "stagecraft/runtime/token_data.h"

#include <QtTest>

#include <cstring>
#include <functional>
#include <filesystem>

using namespace stagecraft;
using namespace stagecraft::runtime;
namespace fs = std::filesystem;

namespace {

config::ModelConfig tiny_llama() {
  config::ModelConfig m;
  m.arch = "llama";
  m.layers = 2;
  m.hidden = 16;
  m.heads = 4;
  m.kv_heads = 2;
  m.ffn_hidden = 24;
  m.seq_len = 8;
  m.vocab = 32;
  m.tied_embeddings = false;
  m.rope_theta = 500000;
  return m;
}

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

 private Q_SLOTS:
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

  // A Llama checkpoint is in Hugging Face's layout and refuses another model by its Llama keys.
  void llamaCheckpointInHuggingFaceLayout() {
    const config::ModelConfig m = tiny_llama();
    const std::string ckpt = at("llama/step-1");
    QVERIFY(save_step(ckpt, m, 1).ok());
    auto back = read_checkpoint(ckpt, m, true);
    QVERIFY2(back.ok(), back.status().message().c_str());
    QVERIFY(back->model.find("model.layers.1.self_attn.k_proj.weight"));
    QCOMPARE(back->model.find("model.layers.1.self_attn.k_proj.weight")->shape, (std::vector<int64_t>{8, 16}));
    QVERIFY(back->model.find("model.layers.0.mlp.gate_proj.weight"));
    QVERIFY(back->model.find("lm_head.weight"));
    auto cfg = Json::parse(config::read_text_file(ckpt + "/config.json").value());
    QVERIFY(cfg.ok());
    QCOMPARE(cfg->find("model_type")->as_string(), std::string("llama"));
    QCOMPARE(cfg->find("num_key_value_heads")->as_int(), int64_t(2));
    struct Case {
      const char* what;
      std::function<void(config::ModelConfig&)> change;
      const char* says;
    };
    const std::vector<Case> cases = {
        {"kv heads", [](auto& o) { o.kv_heads = 4; }, "has num_key_value_heads 2, the configured model model.kv_heads 4; set model.kv_heads: 2"},
        {"ffn", [](auto& o) { o.ffn_hidden = 32; }, "has intermediate_size 24, the configured model model.ffn_hidden 32; set model.ffn_hidden: 24"},
        {"theta", [](auto& o) { o.rope_theta = 10000; }, "has rope_theta 500000, the configured model.rope_theta 10000; set model.rope_theta: 500000"},
        {"arch", [](auto& o) { o.arch = "gpt2"; o.kv_heads = 0; }, "has model_type llama, the configured model.arch gpt2; set model.arch: llama"},
        {"biases", [](auto& o) { o.qkv_bias = true; }, "has model_type llama (no biases); set model.qkv_bias: false"},
        {"tied", [](auto& o) { o.tied_embeddings = true; }, "has tie_word_embeddings false; set model.tied_embeddings: false"},
    };
    for (const auto& c : cases) {
      config::ModelConfig other = m;
      c.change(other);
      auto r = read_checkpoint(ckpt, other, false);
      QVERIFY2(!r.ok(), c.what);
      QVERIFY2(QString::fromStdString(r.status().message()).contains(c.says), r.status().message().c_str());
    }
  }

  // A Hugging Face model directory: config.json beside model.safetensors, or shards that
  // model.safetensors.index.json maps (here with an older checkpoint's rotary buffers, which are
  // skipped), gives the same weights; what the engine cannot run is refused naming the key.
  void huggingFaceDirectories() {
    const config::ModelConfig m = tiny_llama();
    std::vector<NamedTensor> all = tensors_of(m, 0.0f);
    for (size_t i = 0; i < all.size(); ++i) {
      for (size_t j = 0; j < all[i].data.size(); ++j) all[i].data[j] = static_cast<float>(i) + 0.001f * static_cast<float>(j);
    }
    const std::string single = at("hf-single"), sharded = at("hf-sharded");
    fs::create_directories(single);
    fs::create_directories(sharded);
    QVERIFY(config::write_text_file_atomic(single + "/config.json", model::hf_config_json(m)).ok());
    QVERIFY(write_safetensors(single + "/model.safetensors", all).ok());
    QVERIFY(config::write_text_file_atomic(sharded + "/config.json", model::hf_config_json(m)).ok());
    std::vector<NamedTensor> a(all.begin(), all.begin() + 7), b(all.begin() + 7, all.end());
    NamedTensor inv;
    inv.name = "model.layers.0.self_attn.rotary_emb.inv_freq";
    inv.shape = {2};
    inv.data = {1.0f, 0.5f};
    a.push_back(inv);
    QVERIFY(write_safetensors(sharded + "/model-00001-of-00002.safetensors", a).ok());
    QVERIFY(write_safetensors(sharded + "/model-00002-of-00002.safetensors", b).ok());
    Json map = Json::object();
    for (const auto& t : a) map.set(t.name, "model-00001-of-00002.safetensors");
    for (const auto& t : b) map.set(t.name, "model-00002-of-00002.safetensors");
    Json index = Json::object();
    index.set("weight_map", map);
    QVERIFY(config::write_text_file_atomic(sharded + "/model.safetensors.index.json", index.dump(2)).ok());
    for (const std::string& dir : {single, sharded}) {
      auto w = read_model_dir(dir, m);
      QVERIFY2(w.ok(), w.status().message().c_str());
      for (const auto& t : all) {
        const NamedTensor* got = w->find(t.name);
        QVERIFY2(got && got->data == t.data, t.name.c_str());
      }
    }
    // Refusals, each in one line naming what to change.
    auto refused = [&](const std::string& dir, const QString& says) {
      auto w = read_model_dir(dir, m);
      QVERIFY2(!w.ok(), qPrintable(says));
      QVERIFY2(QString::fromStdString(w.status().message()).contains(says) && !QString::fromStdString(w.status().message()).contains('\n'),
               w.status().message().c_str());
    };
    refused(at("nowhere"), "is not a directory");
    const std::string empty = at("hf-empty");
    fs::create_directories(empty);
    refused(empty, "holds neither model.safetensors nor model.safetensors.index.json");
    const std::string scaled = at("hf-scaled");
    fs::create_directories(scaled);
    std::string text = model::hf_config_json(m);
    const std::string unscaled = "\"rope_scaling\": null";
    text.replace(text.find(unscaled), unscaled.size(), "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0}");
    QVERIFY(config::write_text_file_atomic(scaled + "/config.json", text).ok());
    QVERIFY(write_safetensors(scaled + "/model.safetensors", all).ok());
    refused(scaled, "rope_scaling");
    const std::string extra = at("hf-extra");
    fs::create_directories(extra);
    std::vector<NamedTensor> more = all;
    NamedTensor bias;
    bias.name = "model.layers.0.self_attn.o_proj.bias";
    bias.shape = {16};
    bias.data.assign(16, 0.0f);
    more.push_back(bias);
    QVERIFY(write_safetensors(extra + "/model.safetensors", more).ok());
    refused(extra, "tensor model.layers.0.self_attn.o_proj.bias is not part of the configured model");
  }

  // uint32 token files (vocabularies above 65,536), chosen by train.data_dtype or the vocabulary.
  void uint32Tokens() {
    QCOMPARE(token_bytes(config::DataDtype::kAuto, 50257), 2);
    QCOMPARE(token_bytes(config::DataDtype::kAuto, 128256), 4);
    QCOMPARE(token_bytes(config::DataDtype::kUint32, 256), 4);
    QCOMPARE(token_bytes(config::DataDtype::kUint16, 128256), 2);
    std::string bytes;
    const std::vector<uint32_t> ids = {128000, 5, 70000, 128255, 1, 2, 3, 4};
    for (uint32_t v : ids) bytes.append(reinterpret_cast<const char*>(&v), 4);
    const std::string path = at("tokens.bin");
    QVERIFY(write_bytes(path, bytes));
    auto d = TokenData::open(path, 2, 4);
    QVERIFY2(d.ok(), d.status().message().c_str());
    QCOMPARE(d->size(), ids.size());
    QCOMPARE(d->vocab_needed(), 128256);
    for (size_t i = 0; i < ids.size(); ++i) QCOMPARE(d->token(i), static_cast<int>(ids[i]));
    // The same bytes as uint16 are other tokens; an odd size is refused naming the width.
    auto narrow = TokenData::open(path, 2, 2);
    QVERIFY(narrow.ok());
    QCOMPARE(narrow->size(), 2 * ids.size());
    QVERIFY(write_bytes(at("odd.bin"), bytes.substr(0, 30)));
    auto odd = TokenData::open(at("odd.bin"), 2, 4);
    QVERIFY(!odd.ok());
    QVERIFY2(QString::fromStdString(odd.status().message()).contains("30 bytes is not a whole number of uint32 tokens"), odd.status().message().c_str());
    // A uint16 file read as uint32 shows ids no vocabulary has.
    std::string wide16;
    for (uint16_t v : {uint16_t(65535), uint16_t(65535), uint16_t(3), uint16_t(4)}) wide16.append(reinterpret_cast<const char*>(&v), 2);
    QVERIFY(write_bytes(at("u16.bin"), wide16));
    auto wrong = TokenData::open(at("u16.bin"), 2, 4);
    QVERIFY(!wrong.ok());
    QVERIFY2(QString::fromStdString(wrong.status().message()).contains("set train.data_dtype: uint16"), wrong.status().message().c_str());
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
