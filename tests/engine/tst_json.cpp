// Json: parse, dump, round trips and the parser's errors.
#include <QtTest>

#include "stagecraft/core/json.h"

using stagecraft::Json;

class TestJson : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void parsesAndDumpsRoundTrip_data() {
    QTest::addColumn<QString>("text");
    QTest::addColumn<QString>("compact");
    QTest::newRow("integers stay integers") << "[1, -2, 1024]" << "[1,-2,1024]";
    QTest::newRow("doubles keep a point") << "[1.5, 2.0, 1e-3]" << "[1.5,2.0,0.001]";
    QTest::newRow("object keeps key order") << R"({"b": 1, "a": 2})" << R"({"b":1,"a":2})";
    QTest::newRow("escapes") << "[\"a\\\"b\\\\c\\n\\u00e9\"]" << "[\"a\\\"b\\\\c\\n\xc3\xa9\"]";
    QTest::newRow("surrogate pair") << R"(["\ud83d\ude00"])" << "[\"\xf0\x9f\x98\x80\"]";
    QTest::newRow("literals") << "[true,false,null]" << "[true,false,null]";
    QTest::newRow("nested") << R"({"a":[{"b":[]},{}]})" << R"({"a":[{"b":[]},{}]})";
  }
  void parsesAndDumpsRoundTrip() {
    QFETCH(QString, text);
    QFETCH(QString, compact);
    auto j = Json::parse(text.toStdString());
    QVERIFY2(j.ok(), j.status().message().c_str());
    QCOMPARE(QString::fromStdString(j->dump()), compact);
    auto again = Json::parse(j->dump(2));
    QVERIFY(again.ok());
    QVERIFY(again.value() == j.value());
  }

  void rejectsInvalid_data() {
    QTest::addColumn<QString>("text");
    QTest::addColumn<QString>("fragment");
    QTest::newRow("trailing comma") << "[1,]" << "unexpected character ']'";
    QTest::newRow("comment") << "// x\n1" << "line 1, column 1";
    QTest::newRow("unterminated") << "\"abc" << "unterminated string";
    QTest::newRow("leading zero") << "01" << "unexpected text after";
    QTest::newRow("bare word") << "nul" << "unexpected character 'n'";
    QTest::newRow("second line") << "{\n  \"a\" 1}" << "line 2, column 7";
    QTest::newRow("lone surrogate") << R"("\udc00")" << "unpaired surrogate";
    QTest::newRow("empty") << "" << "unexpected end of input";
    QTest::newRow("two values") << "1 2" << "unexpected text after";
  }
  void rejectsInvalid() {
    QFETCH(QString, text);
    QFETCH(QString, fragment);
    auto j = Json::parse(text.toStdString());
    QVERIFY(!j.ok());
    QVERIFY2(QString::fromStdString(j.status().message()).contains(fragment), j.status().message().c_str());
  }

  void limitsNesting() {
    std::string deep(Json::kMaxDepth + 10, '[');
    deep += std::string(Json::kMaxDepth + 10, ']');
    auto j = Json::parse(deep);
    QVERIFY(!j.ok());
    QVERIFY(QString::fromStdString(j.status().message()).contains("nested deeper"));
    std::string ok(100, '[');
    ok += std::string(100, ']');
    QVERIFY(Json::parse(ok).ok());
  }

  void invalidUtf8IsReplacedOnOutput() {
    Json s(std::string("a\xff" "b"));
    QCOMPARE(QString::fromStdString(s.dump()), QString::fromUtf8("\"a\xef\xbf\xbd" "b\""));
    QVERIFY(!Json::parse("\"a\xff\"").ok());
  }

  void nonFiniteDoublesBecomeNull() {
    Json a = Json::array();
    a.push_back(Json(std::numeric_limits<double>::infinity()));
    QCOMPARE(QString::fromStdString(a.dump()), QString("[null]"));
  }

  void objectSetReplacesInPlace() {
    Json o = Json::object();
    o.set("x", 1);
    o.set("y", 2);
    o.set("x", 3);
    QCOMPARE(QString::fromStdString(o.dump()), QString(R"({"x":3,"y":2})"));
    QVERIFY(o.find("y") && o.find("y")->as_int() == 2);
    QVERIFY(!o.find("z"));
  }
};

QTEST_APPLESS_MAIN(TestJson)
#include "tst_json.moc"
