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

// `working_dir` empty: this process's.
inline CliRun run_cli(const QStringList& args, const QProcessEnvironment& env = QProcessEnvironment::systemEnvironment(),
                      int timeout_ms = 120000, const QString& working_dir = QString()) {
  QProcess p;
  p.setProgram(QStringLiteral(STAGECRAFT_BIN_DIR "/stagecraft-cli"));
  if (!working_dir.isEmpty()) p.setWorkingDirectory(working_dir);
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
