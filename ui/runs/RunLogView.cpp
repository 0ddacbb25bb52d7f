// RunLogView: rank filter, search and "only matching lines" over a run's log lines.
#include "runs/RunLogView.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFontDatabase>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QTextBlock>
#include <QTextCursor>
#include <QTextDocument>
#include <QVBoxLayout>

#include <algorithm>

namespace store = stagecraft::store;

RunLogView::RunLogView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  auto* bar = new QHBoxLayout;
  m_rank = new QComboBox(this);
  m_rank->setObjectName(QStringLiteral("logRank"));
  m_search = new QLineEdit(this);
  m_search->setObjectName(QStringLiteral("logSearch"));
  m_search->setPlaceholderText(tr("Search the log"));
  m_search->setClearButtonEnabled(true);
  auto* prev = new QPushButton(tr("Previous"), this);
  auto* next = new QPushButton(tr("Next"), this);
  m_only = new QCheckBox(tr("Only matching lines"), this);
  m_matchLabel = new QLabel(this);
  bar->addWidget(new QLabel(tr("Rank:"), this));
  bar->addWidget(m_rank);
  bar->addWidget(m_search, 1);
  bar->addWidget(prev);
  bar->addWidget(next);
  bar->addWidget(m_only);
  bar->addWidget(m_matchLabel);
  layout->addLayout(bar);
  m_text = new QPlainTextEdit(this);
  m_text->setObjectName(QStringLiteral("logText"));
  m_text->setReadOnly(true);
  m_text->setLineWrapMode(QPlainTextEdit::NoWrap);
  m_text->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  // The document drops its oldest lines itself as new ones are appended.
  m_text->setMaximumBlockCount(kMaxShownLines);
  layout->addWidget(m_text, 1);
  clear();

  connect(m_rank, &QComboBox::currentIndexChanged, this, &RunLogView::rebuild);
  connect(m_search, &QLineEdit::textChanged, this, [this] {
    if (m_only->isChecked()) {
      rebuild();
    } else {
      updateMatchLabel();
    }
  });
  connect(m_search, &QLineEdit::returnPressed, this, &RunLogView::findNext);
  connect(next, &QPushButton::clicked, this, &RunLogView::findNext);
  connect(prev, &QPushButton::clicked, this, &RunLogView::findPrevious);
  connect(m_only, &QCheckBox::toggled, this, &RunLogView::rebuild);
}

void RunLogView::clear() { setLogs(0, 0, {}); }

void RunLogView::setLogs(qint64 id, int worldSize, const std::vector<store::LogRow>& rows) {
  const int keepRank = id == m_runId ? rankFilter() : -1;
  m_runId = id;
  m_lines.clear();
  {
    const QSignalBlocker block(m_rank);
    m_rank->clear();
    m_rank->addItem(tr("all"), -1);
    for (int r = 0; r < worldSize; ++r) m_rank->addItem(QString::number(r), r);
    m_rank->setCurrentIndex(std::max(0, m_rank->findData(keepRank)));
  }
  m_text->clear();
  m_matches = 0;
  const size_t first = rows.size() > static_cast<size_t>(kMaxHeldLines) ? rows.size() - kMaxHeldLines : 0;
  m_lines.reserve(static_cast<qsizetype>(rows.size() - first));
  for (size_t i = first; i < rows.size(); ++i) {
    const auto& r = rows[i];
    const QString prefix = r.is_stderr ? QStringLiteral("[rank %1 stderr] ").arg(r.rank) : QStringLiteral("[rank %1] ").arg(r.rank);
    m_lines.append(Line{r.rank, r.is_stderr, prefix + QString::fromStdString(r.line)});
  }
  rebuild();
}

void RunLogView::appendLogs(const std::vector<store::LogRow>& rows) {
  if (rows.empty()) return;
  const int rank = rankFilter();
  auto counts = [&](const Line& l) { return (rank < 0 || l.rank == rank) && matches(l); };
  QStringList shown;
  for (const auto& r : rows) {
    const QString prefix = r.is_stderr ? QStringLiteral("[rank %1 stderr] ").arg(r.rank) : QStringLiteral("[rank %1] ").arg(r.rank);
    Line line{r.rank, r.is_stderr, prefix + QString::fromStdString(r.line)};
    if (shows(line)) shown << line.text;
    if (counts(line)) ++m_matches;
    m_lines.append(std::move(line));
  }
  // Hold the latest kMaxHeldLines; the matches among the dropped ones no longer count.
  if (m_lines.size() > kMaxHeldLines) {
    const qsizetype drop = m_lines.size() - kMaxHeldLines;
    for (qsizetype i = 0; i < drop; ++i) m_matches -= counts(m_lines[i]) ? 1 : 0;
    m_lines.remove(0, drop);
  }
  // Appending (never rebuilding) keeps the cursor, the search position and the scroll; the
  // document's maximum block count drops the oldest shown lines.
  if (shown.size() > kMaxShownLines) shown = shown.mid(shown.size() - kMaxShownLines);
  if (!shown.isEmpty()) m_text->appendPlainText(shown.join(QLatin1Char('\n')));
  showMatchCount();
}

int RunLogView::shownLineCount() const { return m_text->document()->isEmpty() ? 0 : m_text->blockCount(); }

void RunLogView::setRankFilter(int rank) { m_rank->setCurrentIndex(std::max(0, m_rank->findData(rank))); }

int RunLogView::rankFilter() const { return m_rank->count() > 0 ? m_rank->currentData().toInt() : -1; }

void RunLogView::setSearchText(const QString& text) { m_search->setText(text); }

QString RunLogView::searchText() const { return m_search->text(); }

void RunLogView::setOnlyMatching(bool only) { m_only->setChecked(only); }

bool RunLogView::matches(const Line& line) const {
  const QString needle = m_search->text();
  return !needle.isEmpty() && line.text.contains(needle, Qt::CaseInsensitive);
}

bool RunLogView::shows(const Line& line) const {
  if (rankFilter() >= 0 && line.rank != rankFilter()) return false;
  if (m_only->isChecked() && !m_search->text().isEmpty() && !matches(line)) return false;
  return true;
}

void RunLogView::rebuild() {
  QStringList shown;
  for (const Line& l : m_lines) {
    if (shows(l)) shown << l.text;
  }
  if (shown.size() > kMaxShownLines) shown = shown.mid(shown.size() - kMaxShownLines);
  m_text->setPlainText(shown.join(QLatin1Char('\n')));
  updateMatchLabel();
}

void RunLogView::updateMatchLabel() {
  m_matches = 0;
  const int rank = rankFilter();
  if (!m_search->text().isEmpty()) {
    for (const Line& l : m_lines) {
      if ((rank < 0 || l.rank == rank) && matches(l)) ++m_matches;
    }
  }
  showMatchCount();
}

void RunLogView::showMatchCount() {
  m_matchLabel->setText(m_search->text().isEmpty() ? QString() : tr("%n matching line(s)", nullptr, m_matches));
}

bool RunLogView::find(bool backward) {
  const QString needle = m_search->text();
  if (needle.isEmpty()) return false;
  QTextDocument::FindFlags flags;
  if (backward) flags |= QTextDocument::FindBackward;
  if (m_text->find(needle, flags)) return true;
  // Wrap around: from the other end of the text.
  QTextCursor c = m_text->textCursor();
  c.movePosition(backward ? QTextCursor::End : QTextCursor::Start);
  m_text->setTextCursor(c);
  return m_text->find(needle, flags);
}

bool RunLogView::findNext() { return find(false); }

bool RunLogView::findPrevious() { return find(true); }

QString RunLogView::shownText() const { return m_text->toPlainText(); }

int RunLogView::currentLine() const { return m_text->textCursor().blockNumber(); }

QString RunLogView::currentLineText() const { return m_text->textCursor().block().text(); }
