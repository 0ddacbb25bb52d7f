// CalibrateDialog: fits the cost model's device constants to recorded runs and saves them as a
// device profile — the window's `stagecraft-cli calibrate RUN_ID... -o PROFILE.yaml`.
//
// calibrate() reads the runs' samples (launch::calibration_samples: each run's layout and its
// measured step) and fits config::CostCalibration with plan::calibrate(), starting from the
// constants the first run was planned with. It shows every constant before and after (the ones
// the runs could tell apart marked fitted), each run's step-time error before and after, and the
// error over every compared part. The runs must share one device; the profile's base is that
// device's built-in one (for a run on a profile, the profile's base).
//
// saveProfile() writes the profile (config::write_device_profile) to profilePath(): by default
// config::user_devices_dir()/NAME.yaml, which puts it in the user catalog under NAME, or a file
// chosen with "Choose…". It emits profileSaved(), and useProfileRequested() when "use it in the
// open plan" is ticked, for the window to set `cluster.device: {base: BASE, profile: PATH}`.
//
// Engine errors (a run without timing events, runs of different devices, a file that cannot be
// written) are shown in the dialog and kept in errorText(); nothing is thrown.
#pragma once

#include <QDialog>
#include <QList>
#include <QString>

#include <optional>
#include <vector>

#include "stagecraft/plan/calibrate.h"

class QCheckBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QTableWidget;
namespace stagecraft::store {
class RunStore;
}

class CalibrateDialog : public QDialog {
  Q_OBJECT

 public:
  explicit CalibrateDialog(QWidget* parent = nullptr);

  // Fits the constants to runs `ids` of `store` and shows the fit; false with the reason shown.
  bool calibrate(stagecraft::store::RunStore& store, const QList<qint64>& ids);

  bool hasFit() const { return m_fit.has_value(); }
  const stagecraft::plan::CalibrationFit& fit() const { return *m_fit; }
  QList<qint64> runIds() const { return m_ids; }
  // The built-in device the profile calibrates ("cpu").
  QString baseDevice() const { return m_base; }
  // The constants the fit started from.
  const stagecraft::config::CostCalibration& startCalibration() const { return m_start; }

  QString profileName() const;
  // Also moves the path to user_devices_dir()/NAME.yaml unless a file was chosen.
  void setProfileName(const QString& name);
  QString profilePath() const;
  // A file of the person's choosing; an empty path goes back to the user catalog's.
  void setProfilePath(const QString& path);
  bool useInPlan() const;
  void setUseInPlan(bool use);

  // Writes the profile; false with the reason shown (and in *error).
  bool saveProfile(QString* error = nullptr);

  QString errorText() const { return m_error; }
  QString summaryText() const;
  QTableWidget* constantsTable() const { return m_constants; }
  QTableWidget* runsTable() const { return m_runs; }

  // "cpu-runs-3-4": the default profile name for runs `ids` of device `base`.
  static QString defaultProfileName(const QString& base, const QList<qint64>& ids);

 Q_SIGNALS:
  void profileSaved(const QString& path, const QString& baseDevice);
  void useProfileRequested(const QString& path, const QString& baseDevice);

 private:
  void showFit();
  void showError(const QString& message);
  void chooseFile();
  void updateButtons();

  QList<qint64> m_ids;
  QString m_base;
  QString m_historyPath;
  std::vector<std::string> m_labels;
  stagecraft::config::CostCalibration m_start;
  std::optional<stagecraft::plan::CalibrationFit> m_fit;
  bool m_pathChosen = false;
  QString m_error;

  QLabel* m_summary = nullptr;
  QTableWidget* m_constants = nullptr;
  QTableWidget* m_runs = nullptr;
  QLineEdit* m_name = nullptr;
  QLineEdit* m_path = nullptr;
  QPushButton* m_choose = nullptr;
  QCheckBox* m_use = nullptr;
  QLabel* m_status = nullptr;
  QPushButton* m_save = nullptr;
};
