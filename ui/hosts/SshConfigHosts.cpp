// SshConfigHosts: `Host` aliases of an OpenSSH client config.
#include "hosts/SshConfigHosts.h"

#include <QDir>
#include <QFile>
#include <QRegularExpression>

QStringList sshConfigAliases(const QString& text) {
  QStringList out;
  static const QRegularExpression keyword(QStringLiteral("^\\s*host(?:\\s*=\\s*|\\s+)(.*)$"), QRegularExpression::CaseInsensitiveOption);
  static const QRegularExpression space(QStringLiteral("\\s+"));
  for (const QString& raw : text.split(QLatin1Char('\n'))) {
    QString line = raw;
    const int hash = line.indexOf(QLatin1Char('#'));
    if (hash >= 0) line.truncate(hash);
    const auto m = keyword.match(line);
    if (!m.hasMatch()) continue;
    for (QString name : m.captured(1).split(space, Qt::SkipEmptyParts)) {
      if (name.startsWith(QLatin1Char('"')) && name.endsWith(QLatin1Char('"')) && name.size() >= 2) name = name.mid(1, name.size() - 2);
      if (name.isEmpty() || name.contains(QLatin1Char('*')) || name.contains(QLatin1Char('?')) || name.startsWith(QLatin1Char('!'))) continue;
      if (!out.contains(name)) out << name;
    }
  }
  return out;
}

QStringList sshConfigAliasesFromFile(const QString& path, QString* error) {
  const QString file = path.isEmpty() ? QDir::home().filePath(QStringLiteral(".ssh/config")) : path;
  QFile f(file);
  if (!f.exists()) return {};
  if (!f.open(QIODevice::ReadOnly | QIODevice::Text)) {
    if (error) *error = QObject::tr("%1: cannot read the SSH config: %2").arg(file, f.errorString());
    return {};
  }
  return sshConfigAliases(QString::fromUtf8(f.readAll()));
}
