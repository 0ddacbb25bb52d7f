// Runs the real stagecraft-cli binary for the CLI suites: exit code, stdout, stderr.
#pragma once

#include <QProcess>
#include <QString>
#include <QStringList>

namespace stagecraft::testing {

struct CliRun {
  int code = -1;  // -1: crashed or timed out
  QString out, err;
};

inline CliRun run_cli(const QStringList& args, const QProcessEnvironment& env = QProcessEnvironment::systemEnvironment(),
                      int timeout_ms = 120000) {
  QProcess p;
  p.setProgram(QStringLiteral(STAGECRAFT_BIN_DIR "/stagecraft-cli"));
  p.setArguments(args);
  p.setProcessEnvironment(env);
  p.start();
  CliRun r;
  if (!p.waitForFinished(timeout_ms)) {
    p.kill();
    p.waitForFinished();
    r.err = "timed out";
    return r;
  }
  r.code = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
  r.out = QString::fromUtf8(p.readAllStandardOutput());
  r.err = QString::fromUtf8(p.readAllStandardError());
  return r;
}

}  // namespace stagecraft::testing
