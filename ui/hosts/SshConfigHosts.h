// SshConfigHosts: the host aliases an OpenSSH client config (~/.ssh/config) defines, so the
// hosts editor can offer them. Reads `Host` lines only (keyword case-insensitive, `Host=a b`
// accepted); patterns (`*`, `?`, `!name`) are not hosts and are skipped; `Include`d files are
// not followed. Each alias is returned once, in file order.
#pragma once

#include <QString>
#include <QStringList>

// Aliases in `text`.
QStringList sshConfigAliases(const QString& text);
// Aliases in the file at `path` (empty: ~/.ssh/config). A missing file gives no alias and no
// error; an unreadable one sets *error.
QStringList sshConfigAliasesFromFile(const QString& path, QString* error = nullptr);
