// format_flop_rate: the unit follows the magnitude, rounding never prints "1000.0", and rates an
// estimate cannot have read as zero.
#include <QtTest>

#include <cmath>
#include <limits>

#include "stagecraft/core/units.h"

class TestUnits : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void flopRateUnitFollowsMagnitude_data() {
    QTest::addColumn<double>("rate");
    QTest::addColumn<QString>("text");
    QTest::newRow("tiny GPT on a CPU rank") << 2.0e10 << "20.0 GFLOP/s";
    QTest::newRow("a CPU's nominal peak") << 1.6e11 << "160.0 GFLOP/s";
    QTest::newRow("A100 bf16 peak") << 3.12e14 << "312.0 TFLOP/s";
    QTest::newRow("Megatron per-GPU figure") << 1.385e14 << "138.5 TFLOP/s";
    QTest::newRow("a whole cluster") << 1.2e15 << "1.2 PFLOP/s";
    QTest::newRow("exactly one TFLOP/s") << 1.0e12 << "1.0 TFLOP/s";
    QTest::newRow("rounds up into the next unit") << 9.9996e11 << "1.0 TFLOP/s";
    QTest::newRow("just below the rounding edge") << 9.9994e11 << "999.9 GFLOP/s";
    QTest::newRow("megaflops") << 3.5e6 << "3.5 MFLOP/s";
    QTest::newRow("below a kiloflop") << 12.0 << "12.0 FLOP/s";
    QTest::newRow("beyond the last prefix stays in it") << 2.5e21 << "2500.0 EFLOP/s";
    QTest::newRow("zero") << 0.0 << "0 FLOP/s";
    QTest::newRow("negative") << -5.0e12 << "0 FLOP/s";
    QTest::newRow("not a number") << std::numeric_limits<double>::quiet_NaN() << "0 FLOP/s";
    QTest::newRow("infinite") << std::numeric_limits<double>::infinity() << "0 FLOP/s";
  }
  void flopRateUnitFollowsMagnitude() {
    QFETCH(double, rate);
    QFETCH(QString, text);
    QCOMPARE(QString::fromStdString(stagecraft::format_flop_rate(rate)), text);
  }
};

QTEST_APPLESS_MAIN(TestUnits)
#include "tst_units.moc"
