// Device catalog and the config's device: names, figures, overrides, new devices, errors.
#include "stagecraft/config/config_io.h"
#include "stagecraft/config/device.h"
#include "stagecraft/plan/plan.h"

#include <QtTest>

using namespace stagecraft;

namespace {

const char* kModel = "model: {layers: 4, hidden: 64, heads: 4}\n";

Result<config::RunConfig> load(const std::string& cluster, std::vector<std::string> overrides = {}) {
  return config::parse_config(std::string(kModel) + cluster, "test.yaml", overrides);
}

}  // namespace

class TestDevice : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void catalogHasTheIssuesNamesInOrder() {
    const QStringList expected = {"V100", "A100-40GB", "A100-80GB", "H100-SXM", "H100-PCIe", "H200", "H200-stagecraft", "L40S", "RTX-4090", "cpu"};
    QStringList names;
    for (const auto& d : config::device_catalog()) names << QString::fromStdString(d.name);
    QCOMPARE(names, expected);
  }

  void datasheetFigures_data() {
    QTest::addColumn<QString>("name");
    QTest::addColumn<double>("memory_gib");
    QTest::addColumn<double>("bf16");
    QTest::addColumn<double>("fp16");
    QTest::addColumn<double>("tf32");
    QTest::addColumn<double>("intra_gbps");
    QTest::addColumn<double>("inter_gbps");
    QTest::newRow("V100 has no bf16 and no tf32") << "V100" << 32.0 << 0.0 << 125.0 << 0.0 << 1200.0 << 400.0;
    QTest::newRow("A100 80GB: 312 dense, NVLink 3, 8x HDR") << "A100-80GB" << 80.0 << 312.0 << 312.0 << 156.0 << 2400.0 << 1600.0;
    QTest::newRow("A100 40GB") << "A100-40GB" << 40.0 << 312.0 << 312.0 << 156.0 << 2400.0 << 1600.0;
    QTest::newRow("H100 SXM: 989 dense, NVLink 4, 8x NDR") << "H100-SXM" << 80.0 << 989.4 << 989.4 << 494.7 << 3600.0 << 3200.0;
    QTest::newRow("H100 PCIe: PCIe 5.0") << "H100-PCIe" << 80.0 << 756.0 << 756.0 << 378.0 << 512.0 << 400.0;
    QTest::newRow("H200: H100 math, 141 GB") << "H200" << 140.0 << 989.4 << 989.4 << 494.7 << 3600.0 << 3200.0;
    QTest::newRow("L40S: PCIe 4.0") << "L40S" << 48.0 << 362.0 << 362.0 << 183.0 << 256.0 << 400.0;
    QTest::newRow("RTX 4090: fp32 accumulate") << "RTX-4090" << 24.0 << 165.2 << 165.2 << 82.6 << 256.0 << 100.0;
  }
  void datasheetFigures() {
    QFETCH(QString, name);
    QFETCH(double, memory_gib);
    QFETCH(double, bf16);
    QFETCH(double, fp16);
    QFETCH(double, tf32);
    QFETCH(double, intra_gbps);
    QFETCH(double, inter_gbps);
    const config::DeviceSpec* d = config::find_device(name.toStdString());
    QVERIFY(d);
    QCOMPARE(d->memory_gib, memory_gib);
    QCOMPARE(d->bf16_tflops, bf16);
    QCOMPARE(d->fp16_tflops, fp16);
    QCOMPARE(d->tf32_tflops, tf32);
    QCOMPARE(d->intra_node_gbps, intra_gbps);
    QCOMPARE(d->inter_node_gbps, inter_gbps);
    QVERIFY(d->memory_gbps > 0);
    QVERIFY(d->fp32_tflops > 0);
  }

  void peakFollowsPrecision() {
    const auto* a100 = config::find_device("A100-80GB");
    QCOMPARE(a100->peak_tflops(config::Precision::kBf16, false), 312.0);
    QCOMPARE(a100->peak_tflops(config::Precision::kBf16, true), 312.0);   // tf32 is fp32's mode
    QCOMPARE(a100->peak_tflops(config::Precision::kFp32, false), 19.5);   // fp32 math
    QCOMPARE(a100->peak_tflops(config::Precision::kFp32, true), 156.0);   // tf32 tensor cores
    const auto* v100 = config::find_device("v100");                         // any case
    QVERIFY(v100);
    QCOMPARE(v100->peak_tflops(config::Precision::kFp32, true), 15.7);    // no tf32
    QCOMPARE(v100->peak_tflops(config::Precision::kBf16, false), 0.0);
  }

  void cpuDescribesThisMachine() {
    const auto* cpu = config::find_device("cpu");
    QVERIFY(cpu && cpu->is_cpu);
    QVERIFY(cpu->memory_gib > 0.1);
    QVERIFY(cpu->fp32_tflops > 0);
    QCOMPARE(cpu->bf16_tflops, 0.0);
  }

  void overridesAndNewDevices() {
    auto c = load("cluster: {device: {base: A100-80GB, memory_gib: 40}, inter_node_gbps: 800}\n");
    QVERIFY2(c.ok(), c.status().message().c_str());
    auto d = config::resolve_device(c->cluster);
    QVERIFY(d.ok());
    QCOMPARE(d->memory_gib, 40.0);
    QCOMPARE(d->bf16_tflops, 312.0);
    QCOMPARE(d->inter_node_gbps, 800.0);
    QCOMPARE(d->intra_node_gbps, 2400.0);

    // A dotted override turns `device: NAME` into {base: NAME, ...}.
    auto o = load("cluster: {device: H100-SXM}\n", {"cluster.device.memory_gib=64", "cluster.intra_node_gbps=1000"});
    QVERIFY2(o.ok(), o.status().message().c_str());
    auto od = config::resolve_device(o->cluster);
    QVERIFY(od.ok());
    QCOMPARE(od->memory_gib, 64.0);
    QCOMPARE(od->bf16_tflops, 989.4);
    QCOMPARE(od->intra_node_gbps, 1000.0);

    auto n = load("cluster: {device: {name: NPU-1, memory_gib: 64, fp32_tflops: 40, bf16_tflops: 400, memory_gbps: 3000}}\n");
    QVERIFY2(n.ok(), n.status().message().c_str());
    auto nd = config::resolve_device(n->cluster);
    QVERIFY(nd.ok());
    QCOMPARE(QString::fromStdString(nd->name), QString("NPU-1"));
    QCOMPARE(nd->peak_tflops(config::Precision::kBf16, false), 400.0);
    QCOMPARE(nd->peak_tflops(config::Precision::kFp32, true), 40.0);

    // The mapping form survives a save and load.
    auto again = config::parse_config(config::to_yaml(c.value()), "saved.yaml", {});
    QVERIFY2(again.ok(), again.status().message().c_str());
    QVERIFY(again.value() == c.value());
    auto again_new = config::parse_config(config::to_yaml(n.value()), "saved.yaml", {});
    QVERIFY2(again_new.ok(), again_new.status().message().c_str());
    QVERIFY(again_new.value() == n.value());
  }

  void badDevicesAreNamed_data() {
    QTest::addColumn<QString>("cluster");
    QTest::addColumn<QString>("expected");
    QTest::newRow("unknown name suggests the closest")
        << "cluster: {device: A100}\n" << "test.yaml:2: cluster.device=A100: unknown device; did you mean A100-40GB?";
    QTest::newRow("typo") << "cluster: {device: H100-SXN}\n" << "did you mean H100-SXM?";
    QTest::newRow("new device without figures")
        << "cluster: {device: {name: X, memory_gib: 8}}\n" << "needs fp32_tflops bf16_tflops (or fp16_tflops) memory_gbps";
    QTest::newRow("mapping without base or name") << "cluster: {device: {memory_gib: 8}}\n" << "needs base";
    QTest::newRow("unknown device key") << "cluster: {device: {base: V100, memory: 8}}\n" << "cluster.device.memory: unknown key";
    QTest::newRow("negative memory") << "cluster: {device: {base: V100, memory_gib: -1}}\n" << "cluster.device.memory_gib=-1: must be between";
    QTest::newRow("bf16 on V100")
        << "cluster: {device: V100}\ntrain: {precision: bf16}\n" << "train.precision=bf16: V100 has no bf16 math; use fp16";
    QTest::newRow("16-bit on the CPU engine")
        << "cluster: {device: cpu}\ntrain: {precision: fp16}\n" << "train.precision=fp16: cpu has no fp16 math; use fp32";
  }
  void badDevicesAreNamed() {
    QFETCH(QString, cluster);
    QFETCH(QString, expected);
    auto c = load(cluster.toStdString());
    QVERIFY(!c.ok());
    QVERIFY2(QString::fromStdString(c.status().message()).contains(expected), c.status().message().c_str());
  }

  void planCarriesTheResolvedDevice() {
    auto c = load("cluster: {nodes: 1, gpus_per_node: 2, device: {base: L40S, memory_gib: 24}}\n");
    QVERIFY(c.ok());
    auto p = plan::make_plan(c.value());
    QVERIFY2(p.ok(), p.status().message().c_str());
    QCOMPARE(p->device.memory_gib, 24.0);
    QCOMPARE(p->estimate.device_memory_bytes, 24.0 * 1024 * 1024 * 1024);
  }
};

QTEST_APPLESS_MAIN(TestDevice)
#include "tst_device.moc"
