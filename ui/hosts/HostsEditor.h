// HostsEditor: Run > Hosts — edits a hostfile in DeepSpeed's format (`HOST slots=N`, `#`
// comments), checks every line as it is typed with the engine's parser (launch/hostfile.h) and
// marks each bad line with the engine's message, adds hosts from the aliases of ~/.ssh/config,
// and tests the connection to every host (or one) with the engine's preflight on a background
// thread, one result row per host (reachable, host key, authenticated, worker version, slots).
//
// Host keys: a host whose key known_hosts does not hold yet may be trusted after its SHA256
// fingerprint was shown to the person in a confirmation (launch::trust_host_key, which takes
// the key only while it is still unknown and still has that fingerprint). A changed key is never
// accepted: the engine refuses it, and the message says to remove the old entry by hand.
//
// Every action that a test drives has a method (setText, openFile, saveFile, testConnection,
// trustHostKey); the buttons call them.
#pragma once

#include <QDialog>
#include <QList>
#include <QString>

#include <functional>
#include <vector>

#include "stagecraft/launch/hostfile.h"
#include "stagecraft/launch/preflight.h"

class QLabel;
class QLineEdit;
class QListWidget;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;
class PreflightRunner;
class PreflightTable;

struct HostfileProblem {
  int line = 0;     // 1-based; 0 when the problem is the file as a whole ("no hosts")
  QString message;  // the engine's message, which names origin:line and the fix
};

class HostsEditor : public QDialog {
  Q_OBJECT

 public:
  explicit HostsEditor(QWidget* parent = nullptr);
  ~HostsEditor() override;

  // Every problem of a hostfile's text (each bad line reported once, in line order) and the
  // hosts of its good lines. `origin` names the text in messages.
  static QList<HostfileProblem> checkHostfile(const QString& text, const QString& origin,
                                              std::vector<stagecraft::launch::HostEntry>* good = nullptr);

  void setText(const QString& text);
  QString text() const;
  QList<HostfileProblem> problems() const { return m_problems; }
  QList<int> badLines() const;
  // Hosts of the good lines.
  const std::vector<stagecraft::launch::HostEntry>& hosts() const { return m_hosts; }

  // False with *error set (and shown) when the file cannot be read or written.
  bool openFile(const QString& path, QString* error = nullptr);
  bool saveFile(const QString& path, QString* error = nullptr);
  QString filePath() const { return m_path; }

  // SSH settings for the connection test (empty: ~/.ssh/config, ~/.ssh/known_hosts, the worker
  // beside this program).
  void setSshConfigPath(const QString& path);
  QString sshConfigPath() const;
  void setKnownHostsPath(const QString& path);
  QString knownHostsPath() const;
  void setWorkerPath(const QString& path);
  QString workerPath() const;
  stagecraft::launch::PreflightOptions preflightOptions() const;
  // What the connection test checks besides the SSH settings: `checks` turns preflightOptions()
  // into those of the run the hosts are for (the launch dialog sets launch::preflight_options of
  // its config: GPUs for backend cuda, another program instead of the worker). Unset: the worker
  // and the cores.
  void setRunChecks(std::function<stagecraft::launch::PreflightOptions(stagecraft::launch::PreflightOptions)> checks);
  // preflightOptions() with the run's checks: what "Test connection" and the launch dialog check.
  stagecraft::launch::PreflightOptions testOptions() const;

  // Aliases of the SSH config in use; appends `ALIAS slots=N`.
  QStringList sshAliases() const;
  void addHost(const QString& host, int slotCount);

  // Tests `hosts` (empty: every host of the good lines). False, with the reason in the status
  // line, when there is nothing to test or a pass is running.
  bool testConnection(const QStringList& hosts = {});
  bool isTesting() const;
  PreflightTable* preflightTable() const { return m_table; }

  // Trusts the host key of result row `row` after showing its fingerprint (when `ask`); false
  // with *error when declined or refused.
  bool trustHostKey(int row, bool ask = true, QString* error = nullptr);

  QString statusText() const;

 Q_SIGNALS:
  void problemsChanged();
  void testFinished();
  void hostfileSaved(const QString& path);

 private:
  void revalidate();
  void showStatus(const QString& text);
  void onTestFinished();
  void chooseOpen();
  void chooseSave();
  void chooseAlias();
  void updateTrustButton();

  QPlainTextEdit* m_editor = nullptr;
  QListWidget* m_problemList = nullptr;
  QLineEdit* m_sshConfig = nullptr;
  QLineEdit* m_knownHosts = nullptr;
  QLineEdit* m_worker = nullptr;
  QSpinBox* m_aliasSlots = nullptr;
  QPushButton* m_test = nullptr;
  QPushButton* m_testOne = nullptr;
  std::function<stagecraft::launch::PreflightOptions(stagecraft::launch::PreflightOptions)> m_runChecks;
  QPushButton* m_trust = nullptr;
  PreflightTable* m_table = nullptr;
  QLabel* m_status = nullptr;
  PreflightRunner* m_runner = nullptr;

  QString m_path;
  QList<HostfileProblem> m_problems;
  std::vector<stagecraft::launch::HostEntry> m_hosts;
  std::vector<int> m_testedSlots;
};
