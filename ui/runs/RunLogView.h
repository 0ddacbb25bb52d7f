// RunLogView: a run's log lines (store::LogRow: rank, stream, text) with a rank filter and a
// search box: Enter / Find next / Find previous move to the next line holding the text (case-
// insensitive, wrapping around), and "Only matching lines" hides every other line. The count of
// matching lines is shown next to the box.
//
// Lines are shown as "[rank R] text" ("[rank R stderr] text" for standard error). The view holds
// the latest kMaxHeldLines lines it was given (older ones are dropped) and shows at most
// kMaxShownLines of them (the latest). New lines are appended to the shown text, which keeps the
// cursor and the search position; the text is rebuilt only when a filter changes.
#pragma once

#include <QString>
#include <QVector>
#include <QWidget>

#include <vector>

#include "stagecraft/store/run_store.h"

class QCheckBox;
class QComboBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;

class RunLogView : public QWidget {
  Q_OBJECT

 public:
  static constexpr int kMaxShownLines = 50000;
  static constexpr int kMaxHeldLines = 4 * kMaxShownLines;

  explicit RunLogView(QWidget* parent = nullptr);

  // Replaces the lines with run `id`'s (`worldSize` ranks for the rank filter).
  void setLogs(qint64 id, int worldSize, const std::vector<stagecraft::store::LogRow>& rows);
  // Adds lines written since (same run).
  void appendLogs(const std::vector<stagecraft::store::LogRow>& rows);
  void clear();

  qint64 runId() const { return m_runId; }
  int lineCount() const { return m_lines.size(); }  // every line held, whatever the filters
  int shownLineCount() const;

  // -1: every rank.
  void setRankFilter(int rank);
  int rankFilter() const;
  void setSearchText(const QString& text);
  QString searchText() const;
  void setOnlyMatching(bool only);

  // Moves to the next (or previous) shown line holding the search text; false when none does.
  bool findNext();
  bool findPrevious();
  // Lines of the rank filter that hold the search text (0 when the text is empty).
  int matchCount() const { return m_matches; }
  // The shown text, and the line (0-based) the cursor is on.
  QString shownText() const;
  int currentLine() const;
  QString currentLineText() const;

 private:
  struct Line {
    int rank;
    bool isStderr;
    QString text;  // formatted as shown
  };
  bool find(bool backward);
  bool shows(const Line& line) const;
  bool matches(const Line& line) const;
  void rebuild();
  // Recounts the matching lines over every held line (after a filter changed).
  void updateMatchLabel();
  void showMatchCount();

  qint64 m_runId = 0;
  QVector<Line> m_lines;
  int m_matches = 0;
  QComboBox* m_rank = nullptr;
  QLineEdit* m_search = nullptr;
  QCheckBox* m_only = nullptr;
  QLabel* m_matchLabel = nullptr;
  QPlainTextEdit* m_text = nullptr;
};
